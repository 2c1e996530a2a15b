// The paged KV cache: pages on demand, budget, freeing pages, growth that
// keeps page contents, and key min/max kept up to date as tokens are
// appended through the backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kv/kv_cache.h"
#include "model/forward.h"

namespace strata {
namespace {

KvGeometry geometry(DType dtype, int64_t page_size = 16) {
  KvGeometry g;
  g.n_layer = 3;
  g.n_kv_head = 2;
  g.head_dim = 8;
  g.dtype = dtype;
  g.page_size = page_size;
  return g;
}

TEST(KvGeometry, Bytes) {
  const KvGeometry g = geometry(DType::kF16);
  EXPECT_EQ(g.row(), 16);
  EXPECT_EQ(g.page_bytes(), 16u * 16 * 2);
  EXPECT_EQ(g.bytes_per_page(), 3u * (2 * 16 * 16 * 2 + 2 * 16 * 4));
  EXPECT_EQ(g.pages_for(0), 0);
  EXPECT_EQ(g.pages_for(1), 1);
  EXPECT_EQ(g.pages_for(16), 1);
  EXPECT_EQ(g.pages_for(17), 2);
}

TEST(KvCache, PagesOnDemandAndFreedWithTheSequence) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF32);
  KvCache kv(be, g, 100 * g.bytes_per_page());
  EXPECT_EQ(kv.pool().max_pages(), 100);
  EXPECT_EQ(kv.pool().capacity(), 0);  // nothing allocated before the first page

  const int32_t a = kv.add_sequence();
  const int32_t b = kv.add_sequence();
  EXPECT_EQ(kv.extend(a, 5), 0);
  EXPECT_EQ(kv.pages(a).size(), 1u);
  EXPECT_EQ(kv.extend(a, 11), 5);  // fills the first page exactly
  EXPECT_EQ(kv.pages(a).size(), 1u);
  EXPECT_EQ(kv.extend(a, 1), 16);
  EXPECT_EQ(kv.pages(a).size(), 2u);
  EXPECT_EQ(kv.length(a), 17);
  EXPECT_EQ(kv.extend(b, 40), 0);
  EXPECT_EQ(kv.pages(b).size(), 3u);
  EXPECT_EQ(kv.pool().n_used(), 5);
  EXPECT_EQ(kv.pool().peak_used(), 5);

  std::set<int32_t> all;
  for (int32_t p : kv.pages(a)) all.insert(p);
  for (int32_t p : kv.pages(b)) all.insert(p);
  EXPECT_EQ(all.size(), 5u) << "two tables share a page";

  kv.remove_sequence(a);
  EXPECT_EQ(kv.pool().n_used(), 3);
  EXPECT_EQ(kv.n_sequences(), 1);
  const int32_t c = kv.add_sequence();
  EXPECT_EQ(c, a) << "the id of a removed sequence is reused";
  EXPECT_EQ(kv.length(c), 0);
  kv.remove_sequence(b);
  kv.remove_sequence(c);
  EXPECT_EQ(kv.pool().n_used(), 0);
  EXPECT_EQ(kv.pool().peak_used(), 5);
  EXPECT_EQ(kv.pool().peak_bytes(), 5 * g.bytes_per_page());
}

// Speculative decoding takes back the slots of rejected draft tokens: the
// length drops, pages left empty return to the pool, the rest stay.
TEST(KvCache, TruncateFreesTheEmptiedPagesOnly) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF32, 4);
  KvCache kv(be, g, 100 * g.bytes_per_page());
  const int32_t a = kv.add_sequence();
  kv.extend(a, 6);  // pages 0 (full) and 1 (2 of 4)
  const std::vector<int32_t> first(kv.pages(a).begin(), kv.pages(a).end());
  kv.extend(a, 5, 1);  // 11 tokens: page 1 completed, page 2 opened
  ASSERT_EQ(kv.pages(a).size(), 3u);
  kv.truncate(a, 4);  // back to 7: page 2 is empty again
  EXPECT_EQ(kv.length(a), 7);
  EXPECT_EQ(std::vector<int32_t>(kv.pages(a).begin(), kv.pages(a).end()), first);
  EXPECT_EQ(kv.pool().n_used(), 2);
  kv.truncate(a, 0);
  EXPECT_EQ(kv.length(a), 7);
  EXPECT_EQ(kv.pool().n_used(), 2);
  kv.truncate(a, 3);  // 4 tokens: page 1 goes, page 0 stays full
  EXPECT_EQ(kv.pages(a).size(), 1u);
  EXPECT_EQ(kv.pool().n_used(), 1);
  EXPECT_EQ(kv.extend(a, 2, 2), 4) << "the next token goes where the first dropped one was";
  EXPECT_EQ(kv.pages(a).size(), 2u);
}

// A page completed on disk has its records stored in the step that completes
// it: taking its tokens back would leave a stale record, so it is refused.
TEST(KvCacheDeathTest, TruncateIntoACompletedDiskPageIsRefused) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF32, 4);
  Placement disk;
  disk.set(DataKind::kKv, 0, 0);
  KvCache kv(be, g, 100 * g.bytes_per_page(), disk);
  kv.set_disk_slots(4, 4);
  const int32_t a = kv.add_sequence();
  kv.extend(a, 3);
  kv.extend(a, 2, 1);  // completes page 0 on disk
  ASSERT_EQ(kv.completed(a).size(), 1u);
  kv.truncate(a, 1);  // within page 1: fine
  EXPECT_EQ(kv.length(a), 4);
  EXPECT_DEATH(kv.truncate(a, 1), "completed disk page");
}

// Prefix sharing: a page is freed exactly when the last table holding it
// lets it go, and a sharer writes only its own pages after the prefix.
TEST(KvCache, SharedPrefixPagesAreFreedWithTheLastSequenceHoldingThem) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF32, 4);
  KvCache kv(be, g, 100 * g.bytes_per_page());
  const int32_t a = kv.add_sequence();
  kv.extend(a, 10);  // pages 0, 1 full; page 2 holds 2 tokens
  const std::vector<int32_t> a_pages(kv.pages(a).begin(), kv.pages(a).end());
  const int32_t b = kv.add_sequence(), c = kv.add_sequence();
  kv.share_prefix(b, a, 2);
  kv.share_prefix(c, a, 1);
  EXPECT_EQ(kv.length(b), 8);
  EXPECT_EQ(kv.length(c), 4);
  EXPECT_EQ(kv.refs(a_pages[0]), 3);
  EXPECT_EQ(kv.refs(a_pages[1]), 2);
  EXPECT_EQ(kv.refs(a_pages[2]), 1);
  EXPECT_EQ(kv.pool().n_used(), 3) << "sharing allocates nothing";
  EXPECT_EQ(kv.extend(b, 3, 1), 8) << "b writes after its prefix";
  ASSERT_EQ(kv.pages(b).size(), 3u);
  EXPECT_EQ(kv.pages(b)[0], a_pages[0]);
  EXPECT_EQ(kv.pages(b)[1], a_pages[1]);
  EXPECT_NE(kv.pages(b)[2], a_pages[2]) << "the partial page is b's own";
  EXPECT_EQ(kv.pool().n_used(), 4);

  kv.remove_sequence(a);  // the sharers keep pages 0 and 1; a's own page 2 goes
  EXPECT_EQ(kv.pool().n_used(), 3);
  EXPECT_EQ(kv.refs(a_pages[0]), 2);
  EXPECT_EQ(kv.refs(a_pages[2]), 0);
  kv.remove_sequence(b);
  EXPECT_EQ(kv.pool().n_used(), 1);
  EXPECT_EQ(kv.refs(a_pages[1]), 0);
  kv.remove_sequence(c);
  EXPECT_EQ(kv.pool().n_used(), 0);
  EXPECT_EQ(kv.refs(a_pages[0]), 0);
}

// A shared disk page keeps its slot while any sequence holds it, though
// the sequence whose extent holds the slot is gone; then the extent is free.
TEST(KvCacheDisk, AnExtentOutlivesItsOwnerWhileItsPagesAreShared) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF32, 4);
  Placement disk;
  disk.set(DataKind::kKv, 0, 0);
  KvCache kv(be, g, 100 * g.bytes_per_page(), disk);
  kv.set_disk_slots(4, 2);  // two extents of two slots
  const int32_t a = kv.add_sequence();
  kv.extend(a, 8, 0);  // two disk pages: one extent
  const int32_t shared_slot = kv.disk_slot(kv.pages(a)[0]);
  ASSERT_GE(shared_slot, 0);
  const int32_t b = kv.add_sequence();
  kv.share_prefix(b, a, 2);
  kv.remove_sequence(a);
  EXPECT_EQ(kv.disk_slot(kv.pages(b)[0]), shared_slot) << "the record stays where it is";
  // One extent is free: a new sequence gets it, not the shared one.
  const int32_t c = kv.add_sequence();
  kv.extend(c, 8, 1);
  for (int32_t page : kv.pages(c)) EXPECT_NE(kv.disk_slot(page) / 2, shared_slot / 2);
  kv.remove_sequence(c);
  kv.remove_sequence(b);  // the last holder: both extents are free again
  const int32_t d = kv.add_sequence(), e = kv.add_sequence();
  kv.extend(d, 8, 2);
  kv.extend(e, 8, 2);  // needs the second extent too (the file would be full otherwise)
  EXPECT_NE(kv.disk_slot(kv.pages(d)[0]) / 2, kv.disk_slot(kv.pages(e)[0]) / 2);
}

// What a block needs counts a shared prefix's pages once: sequences that
// take their first pages from another (share_prefix) back and store only
// their own, and a cache sized by the needs holds the block, its pool at
// the counted peak with every page in RAM, for KV in RAM, on disk and split.
TEST(KvCache, NeedsCountSharedPrefixPagesOnce) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF32, 4);
  const std::vector<std::vector<int64_t>> lengths{{18, 15}, {13}}, shared{{0, 2}, {1}};
  Placement disk, half;
  disk.set(DataKind::kKv, 0, 0);
  half.set(DataKind::kKv, 0, 0.5);
  for (const Placement& pl : {Placement{}, disk, half}) {
    const KvNeeds without = kv_block_needs(g, pl, lengths);
    const KvNeeds n = kv_block_needs(g, pl, lengths, 1, shared);
    EXPECT_EQ(n.stage_records, without.stage_records) << "staging is counted per sequence";
    if (pl == Placement{}) {
      EXPECT_EQ(n.backed_pages, 5 + 2 + 3);
      EXPECT_EQ(without.backed_pages - n.backed_pages, 3);
    } else {
      // Whole extents per sequence: each of the three still takes one here.
      EXPECT_EQ(n.disk_pages, 3 * n.disk_extent);
      EXPECT_LE(n.disk_pages, without.disk_pages);
    }
    KvCache kv(be, g, static_cast<uint64_t>(n.backed_pages) * g.bytes_per_page(), pl);
    kv.set_disk_slots(n.disk_pages, n.disk_extent);
    const int32_t a = kv.add_sequence(), b = kv.add_sequence(), c = kv.add_sequence();
    kv.extend(a, 10, 0);
    kv.share_prefix(b, a, 2);
    kv.share_prefix(c, a, 1);
    kv.extend(b, 3, 1);
    kv.extend(c, 2, 1);
    for (int32_t step = 2; kv.length(a) < 18 || kv.length(b) < 15 || kv.length(c) < 13; ++step) {
      if (kv.length(a) < 18) kv.extend(a, 1, step);
      if (kv.length(b) < 15) kv.extend(b, 1, step);
      if (kv.length(c) < 13) kv.extend(c, 1, step);
      // The engine drops a completed disk page's storage once stored.
      for (const int32_t seq : {a, b, c}) {
        for (const int32_t page : kv.completed(seq)) {
          if (kv.pool().backed(page)) kv.mark_retiring(page, 0);
        }
      }
      kv.retire(0);
    }
    EXPECT_LE(kv.pool().peak_used(), n.backed_pages);
    if (pl == Placement{}) {
      EXPECT_EQ(kv.pool().peak_used(), n.backed_pages);
    }
  }
}

TEST(KvCacheDeathTest, TruncateIntoASharedPageIsRefused) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF32, 4);
  KvCache kv(be, g, 100 * g.bytes_per_page());
  const int32_t a = kv.add_sequence(), b = kv.add_sequence();
  kv.extend(a, 8);
  kv.share_prefix(b, a, 2);
  kv.extend(b, 1, 1);
  kv.truncate(b, 1);  // its own page: fine
  EXPECT_EQ(kv.length(b), 8);
  EXPECT_DEATH(kv.truncate(b, 1), "shared page");
}

TEST(KvCache, BudgetExhaustedIsAnErrorAndLeavesTheSequenceUnchanged) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kBF16);
  KvCache kv(be, g, 4 * g.bytes_per_page() + g.bytes_per_page() / 2);  // holds 4 pages
  EXPECT_EQ(kv.pool().max_pages(), 4);
  const int32_t a = kv.add_sequence();
  kv.extend(a, 20);  // 2 pages
  const int32_t b = kv.add_sequence();
  try {
    kv.extend(b, 16 * 3);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("KV cache budget"), std::string::npos) << msg;
    EXPECT_NE(msg.find("holds 4 pages"), std::string::npos) << msg;
    EXPECT_NE(msg.find("batch size"), std::string::npos) << msg;
  }
  EXPECT_EQ(kv.length(b), 0);
  EXPECT_TRUE(kv.pages(b).empty());
  EXPECT_EQ(kv.pool().n_used(), 2) << "pages of the failed extend were not returned";
  kv.extend(b, 32);  // exactly the rest
  EXPECT_EQ(kv.pool().n_free(), 0);
}

TEST(KvCache, BudgetBelowOnePageIsAnError) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF32);
  EXPECT_THROW(KvCache(be, g, g.bytes_per_page() - 1), Error);
  KvGeometry bad = g;
  bad.dtype = DType::kQ8S32;
  EXPECT_THROW(KvCache(be, bad, 1 << 20), Error);
}

// KV on disk in extents: a sequence's disk pages take consecutive slots of
// its own extents, whether a prefill completes them together or decode steps
// of several interleaved sequences complete them one at a time.
TEST(KvCacheDisk, DecodePagesOfInterleavedSequencesStayContiguous) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF16);
  Placement half;  // KV: every other page on disk
  half.set(DataKind::kKv, 0, 0.5);
  for (const Placement& pl : {Placement{}, half}) {
    Placement on_disk = pl;
    if (pl == Placement{}) on_disk.set(DataKind::kKv, 0, 0);
    KvCache kv(be, g, 100 * g.bytes_per_page(), on_disk);
    const std::vector<std::vector<int64_t>> lengths{{16 * 5 + 3, 16 * 9}, {16 * 7}};
    const KvNeeds n = kv.needs(lengths);
    const int64_t most =
        on_disk == half ? 5 : 9;     // disk pages of the longest sequence (0, 2, .. 8)
    EXPECT_EQ(n.disk_extent, most);  // below the 1 MiB target for these tiny pages
    EXPECT_EQ(n.disk_pages % n.disk_extent, 0);
    kv.set_disk_slots(n.disk_pages, n.disk_extent);
    std::vector<int32_t> seqs;
    for (int i = 0; i < 3; ++i) seqs.push_back(kv.add_sequence());
    const std::vector<int64_t> prompt{16 * 2, 16 * 3, 5};
    const std::vector<int64_t> total{16 * 5 + 3, 16 * 9, 16 * 7};
    int32_t step = 0;
    for (int i = 0; i < 3; ++i) kv.extend(seqs[i], prompt[i], step);
    for (step = 1; step < 16 * 9; ++step) {
      for (int i = 0; i < 3; ++i) {
        if (kv.length(seqs[i]) < total[i]) kv.extend(seqs[i], 1, step);
      }
    }
    std::set<int32_t> all;
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> slots;
      for (int32_t page : kv.pages(seqs[i])) {
        if (kv.disk_slot(page) >= 0) slots.push_back(kv.disk_slot(page));
      }
      ASSERT_FALSE(slots.empty());
      for (size_t j = 1; j < slots.size(); ++j) {
        EXPECT_EQ(slots[j], slots[j - 1] + 1) << "sequence " << i << " page " << j;
      }
      for (int32_t sl : slots) {
        EXPECT_TRUE(all.insert(sl).second) << "slot " << sl << " given twice";
        EXPECT_LT(sl, kv.disk_slots());
      }
    }
    // Removing a sequence frees its extents for the next one.
    kv.remove_sequence(seqs[1]);
    const int32_t again = kv.add_sequence();
    kv.extend(again, 16 * 9, step);
    int64_t n_disk = 0;
    for (int32_t page : kv.pages(again)) n_disk += kv.disk_slot(page) >= 0 ? 1 : 0;
    EXPECT_EQ(n_disk, most);
  }
}

TEST(KvCacheDisk, ExtentsAimAtAMegabyteAndShortSequencesReserveLittle) {
  KvGeometry g = geometry(DType::kF16);
  g.n_kv_head = 8;
  g.head_dim = 128;  // a page of K (or V): 16 x 8 x 128 x 2 = 32 KiB
  Placement disk;
  disk.set(DataKind::kKv, 0, 0);
  const KvNeeds long_ = kv_block_needs(g, disk, {{16 * 100, 16 * 40}});
  EXPECT_EQ(long_.disk_extent, 16);  // 16 records of 64 KiB
  EXPECT_EQ(long_.disk_pages, 112 + 48);
  const KvNeeds short_ = kv_block_needs(g, disk, {{16 * 2 + 1, 16 * 3}, {16}});
  EXPECT_EQ(short_.disk_extent, 3);
  EXPECT_EQ(short_.disk_pages, 3 + 3 + 3);
  EXPECT_EQ(short_.stage_records, 5);
}

TEST(PagePool, FreedPagesReturnToThePool) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF16);
  PagePool pool(be, g, 2 * g.bytes_per_page());
  const int32_t p = pool.allocate();
  const int32_t q = pool.allocate();
  EXPECT_EQ(pool.n_used(), 2);
  EXPECT_THROW(pool.allocate(), Error);  // the budget holds two
  pool.free(p);
  EXPECT_EQ(pool.n_used(), 1);
  EXPECT_EQ(pool.allocate(), p) << "a freed page is handed out again";
  pool.free(q);
  pool.free(p);
  EXPECT_EQ(pool.n_used(), 0);
  const int32_t u = pool.allocate_unbacked();
  EXPECT_FALSE(pool.backed(u));
  EXPECT_EQ(pool.n_unbacked(), 1);
  pool.free(u);
  EXPECT_EQ(pool.n_unbacked(), 0);
}

// Page storage: every page of every layer is its own aligned, non-overlapping
// block, and growing the pool keeps what earlier pages hold.
TEST(PagePool, GrowthKeepsPagesAndMinMax) {
  CpuBackend be(1);
  const KvGeometry g = geometry(DType::kF32);
  PagePool pool(be, g, 1000 * g.bytes_per_page());
  std::vector<int32_t> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(pool.allocate());
  const int64_t cap0 = pool.capacity();
  // Mark page contents and min/max.
  for (int64_t l = 0; l < g.n_layer; ++l) {
    const KvLayer v = pool.layer(l);
    for (int32_t p : ids) {
      auto* k = static_cast<float*>(v.k_pages[p]);
      auto* vv = static_cast<float*>(v.v_pages[p]);
      for (int64_t e = 0; e < g.page_size * g.row(); ++e) {
        k[e] = static_cast<float>(l * 1000 + p);
        vv[e] = -static_cast<float>(l * 1000 + p);
      }
      for (int64_t e = 0; e < g.row(); ++e) {
        v.k_min[p * g.row() + e] = static_cast<float>(p + e);
        v.k_max[p * g.row() + e] = static_cast<float>(p * e);
      }
    }
  }
  std::vector<int32_t> more;
  while (pool.capacity() == cap0) more.push_back(pool.allocate());
  EXPECT_GT(pool.capacity(), cap0);
  std::set<const void*> seen;
  for (int64_t l = 0; l < g.n_layer; ++l) {
    const KvLayer v = pool.layer(l);
    EXPECT_EQ(v.n_pages, pool.capacity());
    for (int32_t p : ids) {
      const auto* k = static_cast<const float*>(v.k_pages[p]);
      const auto* vv = static_cast<const float*>(v.v_pages[p]);
      for (int64_t e = 0; e < g.page_size * g.row(); ++e) {
        ASSERT_EQ(k[e], static_cast<float>(l * 1000 + p));
        ASSERT_EQ(vv[e], -static_cast<float>(l * 1000 + p));
      }
      for (int64_t e = 0; e < g.row(); ++e) {
        ASSERT_EQ(v.k_min[p * g.row() + e], static_cast<float>(p + e));
        ASSERT_EQ(v.k_max[p * g.row() + e], static_cast<float>(p * e));
      }
    }
    for (int64_t p = 0; p < pool.capacity(); ++p) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.k_pages[p]) % 64, 0u);
      EXPECT_TRUE(seen.insert(v.k_pages[p]).second);
      EXPECT_TRUE(seen.insert(v.v_pages[p]).second);
    }
  }
  // Distinct pointers at page_bytes granularity inside each slab: no overlap.
  std::vector<const char*> sorted;
  for (const void* p : seen) sorted.push_back(static_cast<const char*>(p));
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_GE(static_cast<uint64_t>(sorted[i] - sorted[i - 1]), g.page_bytes());
  }
}

// Keys appended through the backend, as the forward does: prefill of 21
// tokens then decode tokens one by one, across page boundaries and pool
// growth; after every append the min/max of every page of the sequence must
// equal the element-wise min/max of the keys it holds (as stored).
class KvMinMax : public ::testing::TestWithParam<DType> {};

TEST_P(KvMinMax, KeptUpToDateAsTokensAreAppended) {
  const DType dt = GetParam();
  CpuBackend be(1);
  KvGeometry g = geometry(dt, 4);
  g.n_layer = 2;
  g.n_kv_head = 3;  // rows of 120 elements: more than one chunk of the backend's update
  g.head_dim = 40;
  KvCache kv(be, g, 1000 * g.bytes_per_page());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  const int64_t row = g.row();
  std::vector<std::vector<float>> keys(2);  // [layer][len * row], as stored
  auto stored = [dt](float x) {
    if (dt == DType::kF16) return f16_to_f32(f32_to_f16(x));
    if (dt == DType::kBF16) return bf16_to_f32(f32_to_bf16(x));
    return x;
  };
  const int32_t other = kv.add_sequence();  // interleaves its pages with s's
  const int32_t s = kv.add_sequence();
  int64_t len = 0;
  for (int64_t n_new : {21, 1, 1, 1, 5, 1, 1, 1, 1, 1, 1, 9, 1}) {
    kv.extend(other, 3);
    const int64_t start = kv.extend(s, n_new);
    ASSERT_EQ(start, len);
    MicroBatchHost host;
    std::vector<int32_t> toks(static_cast<size_t>(n_new), 0);
    host.add_sequence(toks, start, kv.pages(s), g.page_size, false, -1);
    for (int64_t l = 0; l < g.n_layer; ++l) {
      std::vector<float> k(static_cast<size_t>(n_new * row)), v(k.size());
      for (auto& x : k) x = dist(rng);
      for (auto& x : v) x = dist(rng);
      for (float x : k) keys[static_cast<size_t>(l)].push_back(stored(x));
      const KvLayer view = kv.pool().layer(l);
      be.kv_append(view, k.data(), row, v.data(), row, host.slots.data(), n_new,
                   host.touched.data(), host.n_filled.data(),
                   static_cast<int64_t>(host.touched.size()));
    }
    len += n_new;
    for (int64_t l = 0; l < g.n_layer; ++l) {
      const KvLayer view = kv.pool().layer(l);
      const auto pages = kv.pages(s);
      for (size_t pi = 0; pi < pages.size(); ++pi) {
        const int64_t first = static_cast<int64_t>(pi) * g.page_size;
        const int64_t last = std::min(len, first + g.page_size);
        for (int64_t e = 0; e < row; ++e) {
          float mn = INFINITY, mx = -INFINITY;
          for (int64_t t = first; t < last; ++t) {
            const float x = keys[static_cast<size_t>(l)][static_cast<size_t>(t * row + e)];
            mn = std::min(mn, x);
            mx = std::max(mx, x);
            // The key itself sits at its slot.
            const char* page = static_cast<const char*>(view.k_pages[pages[pi]]);
            const int64_t off = ((t - first) * row + e);
            float got;
            if (dt == DType::kF32) {
              std::memcpy(&got, page + off * 4, 4);
            } else {
              uint16_t h;
              std::memcpy(&h, page + off * 2, 2);
              got = dt == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
            }
            ASSERT_EQ(got, x) << "layer " << l << " key " << t << " elem " << e;
          }
          ASSERT_EQ(view.k_min[pages[pi] * row + e], mn) << "layer " << l << " page " << pi;
          ASSERT_EQ(view.k_max[pages[pi] * row + e], mx) << "layer " << l << " page " << pi;
        }
      }
    }
  }
}

// A NaN key element makes that element's min and max NaN for as long as the
// key is in the page; the other elements are unaffected.
TEST(KvMinMaxNaN, PropagatesToItsElementOnly) {
  CpuBackend be(1);
  KvGeometry g = geometry(DType::kF16, 4);
  g.n_layer = 1;
  KvCache kv(be, g, 10 * g.bytes_per_page());
  const int32_t s = kv.add_sequence();
  const int64_t row = g.row();
  for (int64_t t = 0; t < 6; ++t) {
    const int64_t start = kv.extend(s, 1);
    MicroBatchHost host;
    host.add_sequence(std::vector<int32_t>{0}, start, kv.pages(s), g.page_size, false, -1);
    std::vector<float> k(static_cast<size_t>(row)), v(k.size(), 0.0f);
    for (int64_t e = 0; e < row; ++e) k[static_cast<size_t>(e)] = static_cast<float>(t - e);
    if (t == 1) k[3] = NAN;
    be.kv_append(kv.pool().layer(0), k.data(), row, v.data(), row, host.slots.data(), 1,
                 host.touched.data(), host.n_filled.data(), 1);
  }
  const KvLayer view = kv.pool().layer(0);
  const int32_t p0 = kv.pages(s)[0], p1 = kv.pages(s)[1];  // keys 0-3, keys 4-5
  for (int64_t e = 0; e < row; ++e) {
    if (e == 3) {
      EXPECT_TRUE(std::isnan(view.k_min[p0 * row + e]));
      EXPECT_TRUE(std::isnan(view.k_max[p0 * row + e]));
    } else {
      EXPECT_EQ(view.k_min[p0 * row + e], static_cast<float>(0 - e));
      EXPECT_EQ(view.k_max[p0 * row + e], static_cast<float>(3 - e));
    }
    EXPECT_EQ(view.k_min[p1 * row + e], static_cast<float>(4 - e));  // a fresh page
    EXPECT_EQ(view.k_max[p1 * row + e], static_cast<float>(5 - e));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KvMinMax,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace strata
