// Paged attention against its double-precision reference on decode, prefill
// and chunked-prefill batches, GQA/MQA/MHA, odd head dims and page sizes,
// pages scattered through a pool; kv_append and page_key_minmax against
// theirs bit for bit; bad batches rejected before anything is written.
//
// Attention bound (first order, u = 2^-24, e = kExpRelErr), per output
// element: a score s_j = scale q.k_j is computed within E_j = (hd + 2) u scale
// sum_d |q_d k_jd|; exp of a shifted score (argument within R = the range of
// the scores) is within e + R u, and the online softmax applies at most B + 1
// of them per key (B = blocks of kAttentionKeyBlock keys), plus one more where
// the decode path merges the partial states of a sequence cut into key chunks
// (at most B chunks); the sums over keys, blocks and chunks add
// (n_keys + 4B + 4) u. With p_j the exact probabilities:
//   |out_d - ref_d| <= (2 E_max + 2 (B + 2)(e + R u) + (n_keys + 4B + 6) u)
//                      * sum_j p_j |v_jd|  + u |ref_d|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/shared_pages.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/cpu_attention_check.h"
#include "support/all_close.h"
#include "support/guarded.h"
#include "support/paged_batch.h"
#include "support/random.h"

namespace strata::cpu {
namespace {

using test::GuardedRows;
using test::kTiny;
using test::kU32;

using test::AttnCase;
using test::kAttentionCases;
using test::PagedBatch;
const auto elem_bytes = test::kv_elem_bytes;

// Pages of stored elements, each with guard bytes after it.
struct Pool : test_support::HostPages {
  Pool(DType t, int64_t ps, int64_t nkv, int64_t hd, int64_t n)
      : HostPages(t, ps, nkv, hd, n, static_cast<size_t>(ps * nkv * hd * elem_bytes(t)),
                  static_cast<char>(0x7b)) {}
};

// Sequences (kv_len, n_new) on pages drawn at random from the pool; every key
// and value of every sequence written with kv_append from random rows.
PagedBatch make_batch(Pool& pool, const std::vector<std::pair<int32_t, int32_t>>& seqs,
                      uint32_t seed) {
  PagedBatch b = test::layout_paged_batch(seqs, pool.page_size, pool.n_pages, seed);
  const int64_t row = static_cast<int64_t>(pool.row());
  for (const std::vector<int64_t>& slots : b.slots) {
    const int64_t len = static_cast<int64_t>(slots.size());
    auto kr = test::random_floats(static_cast<size_t>(len * row), -1.5f, 1.5f, seed++);
    auto vr = test::random_floats(static_cast<size_t>(len * row), -1.0f, 1.0f, seed++);
    EXPECT_EQ(
        kv_append(pool.k.data(), pool.v.data(), pool.n_pages, pool.dtype, pool.page_size,
                  pool.n_kv_head, pool.head_dim, kr.data(), row, vr.data(), row, slots.data(), len),
        Status::kOk);
  }
  return b;
}

// Tolerances of every output element (see the file comment).
std::vector<double> attention_bound(const Pool& pool, const PagedBatch& b, int64_t group,
                                    const float* q, int64_t q_stride, float scale,
                                    const std::vector<double>& ref) {
  const test::AttentionHeads a = pool.heads(group);
  return test::attention_bound(
      b, a, q, q_stride, scale, ref, test::stored_rows(pool.dtype, pool.k, a),
      test::stored_rows(pool.dtype, pool.v, a), test_support::f32_attention_rel);
}

void run_attention(DType t, const AttnCase& c, uint32_t seed) {
  test_support::check_attention_case<Pool>(t, c, seed, make_batch, attention_bound, "attention");
}

using AttentionTest = test_support::KvDtypeAndIsaTest;

TEST_P(AttentionTest, MatchesReference) {
  const DType t = std::get<0>(GetParam());
  std::vector<AttnCase> cases = kAttentionCases;
  const std::vector<AttnCase> more = {
      {"mha odd head dim", 1, 4, 1, 7, {{3, 3}, {10, 2}}},
      {"mqa 40 heads", 5, 1, 40, 17, {{12, 4}, {3, 1}}},
      {"no queries, head dim 16", 16, 1, 2, 16, {{8, 0}, {9, 1}}},
      // Decode batches (one new token each) take the decode path: head dims
      // 64 and 128 (unrolled) and others, groups of 1 to 40 query heads, kv
      // heads split over several head ranges, long sequences cut into key
      // chunks and merged, pages not a multiple of 16 keys.
      {"decode hd128 gqa4", 16, 2, 4, 128, {{300, 1}, {7, 1}, {33, 1}}},
      {"decode hd128 gqa2", 16, 4, 2, 128, {{90, 1}, {16, 1}}},
      {"decode mha 40 kv heads", 16, 40, 1, 8, {{20, 1}, {45, 1}}},
      {"decode group 40", 5, 2, 40, 24, {{71, 1}, {2, 1}}},
      {"decode long (key chunks)", 16, 3, 3, 64, {{5000, 1}, {2100, 1}, {40, 1}}},
      {"decode page 7", 7, 3, 5, 48, {{100, 1}, {1, 1}, {29, 1}}},
  };
  cases.insert(cases.end(), more.begin(), more.end());
  uint32_t seed = 1000;
  for (const auto& c : cases) run_attention(t, c, seed += 17);
}

INSTANTIATE_TEST_SUITE_P(KvDtype, AttentionTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kF16,
                                                              DType::kBF16),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_native" : "_portable");
                         });

TEST_P(AttentionTest, SharedPagesMatchReference) {
  // Decode sequences whose tables begin with the same pages read them once
  // per group (kernels/cpu/shared_pages.h): query rows in 1, 2 and 3 lane
  // vectors, groups too large for one unit, shared keys cut into chunks,
  // members with short and long tails, sequences outside the group, groups
  // of few rows or head dims that lane units do not take, and a group size
  // too large for any (group 40).
  const DType t = std::get<0>(GetParam());
  struct SharedCase {
    const char* name;
    int64_t page_size, n_kv_head, group, head_dim;
    int32_t n_shared;
    std::vector<std::pair<int32_t, bool>> seqs;
  };
  std::vector<std::pair<int32_t, bool>> sixteen;
  for (int32_t i = 0; i < 16; ++i) sixteen.push_back({641 + 37 * i, i != 5});
  const std::vector<SharedCase> cases = {
      {"demo shape, 15 of 16 share 40 pages", 16, 3, 3, 64, 40, sixteen},
      {"long shared keys (chunks)", 16, 3, 3, 64, 190, {{3100, true}, {3041, true}, {3050, true}}},
      {"hd128 gqa4",
       16,
       2,
       4,
       128,
       6,
       {{97, true},
        {120, false},
        {98, true},
        {300, true},
        {99, true},
        {140, true},
        {97, true},
        {110, true}}},
      {"head dim 7 (not in lanes), 12 share",
       16,
       2,
       3,
       7,
       5,
       {{81, true},
        {82, true},
        {90, true},
        {81, true},
        {100, true},
        {85, true},
        {81, true},
        {95, true},
        {81, true},
        {83, true},
        {200, true},
        {81, true}}},
      {"mha 8 kv heads", 16, 8, 1, 32, 3, {{49, true}, {60, true}, {49, true}}},
      {"page 7, odd head dim", 7, 3, 5, 48, 9, {{64, true}, {70, true}, {200, true}, {3, false}}},
      {"group 40", 5, 2, 40, 24, 4, {{21, true}, {30, true}}},
  };
  uint32_t seed = 7000;
  for (const SharedCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(t));
    int64_t pages = c.n_shared;
    for (auto [len, shares] : c.seqs) pages += (len + c.page_size - 1) / c.page_size;
    Pool pool(t, c.page_size, c.n_kv_head, c.head_dim, pages + 3);
    const PagedBatch b =
        test_support::make_shared_batch(pool, c.n_shared, c.seqs, seed += 31, make_batch);
    ASSERT_FALSE(shared_page_groups(b.view<AttentionBatch>(), c.page_size).empty());
    test_support::check_paged_attention(
        pool, b, c.group, seed,
        [&](const float* q, int64_t q_stride, float scale, const std::vector<double>& ref) {
          return attention_bound(pool, b, c.group, q, q_stride, scale, ref);
        },
        "shared pages");
  }
}

TEST(Attention, NonFiniteStaysWhereTheReferencePutsItOnSharedPages) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(t));
    // Six sequences of 2 kv heads x 4 query heads share 5 pages (rows in
    // lanes); a NaN in one value of a shared key, and in one query of
    // sequence 4.
    Pool pool(t, 16, 2, 16, 60);
    const PagedBatch b = test_support::make_shared_batch(
        pool, 5, {{90, true}, {81, true}, {100, true}, {85, true}, {96, true}, {81, true}}, 11,
        make_batch);
    ASSERT_FALSE(shared_page_groups(b.view<AttentionBatch>(), 16).empty());
    const size_t e = 3 * 2 * 16 + 16 + 5;  // key 3, kv head 1, dim 5
    if (t == DType::kF32) {
      static_cast<float*>(pool.v[static_cast<size_t>(b.page_ids[0])])[e] = NAN;
    } else {
      static_cast<uint16_t*>(pool.v[static_cast<size_t>(b.page_ids[0])])[e] =
          t == DType::kF16 ? 0x7e00 : 0x7fc0;  // a quiet NaN
    }
    const int64_t row = 8 * 16;
    std::vector<float> q = test::random_floats(static_cast<size_t>(6 * row), -1, 1, 4);
    q[4 * row + 2 * 16 + 9] = NAN;  // sequence 4, head 2 (kv head 0)
    std::vector<float> out(q.size()), ref(q.size());
    ASSERT_EQ(paged_attention(out.data(), row, q.data(), row, 8, pool.view(),
                              b.view<AttentionBatch>(), 0.25f),
              Status::kOk);
    ASSERT_EQ(paged_attention_ref(ref.data(), row, q.data(), row, 8, pool.view(),
                                  b.view<AttentionBatch>(), 0.25f),
              Status::kOk);
    int n_nan = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(std::isnan(out[i]), std::isnan(ref[i])) << i;
      n_nan += std::isnan(ref[i]);
    }
    EXPECT_EQ(n_nan, 6 * 4 + 16);  // dim 5 of kv head 1's heads everywhere; head 2 of seq 4
  }
}

TEST(SharedPageGroups, GroupsDecodeSequencesByTheirCommonFirstPages) {
  // Sequences 0, 2 and 4 begin with pages 0, 1 (4 diverges after them, 0
  // and 2 share page 2 too); 1 owns its pages; 3 begins with page 0 but is a
  // prefill; 5 and 6 begin with page 9, but 6's last key is on it, so 6
  // shares no page and 5 is alone.
  PagedBatch b;
  auto add = [&](std::vector<int32_t> ids, int32_t len, int32_t n_new) {
    b.page_ids.insert(b.page_ids.end(), ids.begin(), ids.end());
    b.page_indptr.push_back(static_cast<int32_t>(b.page_ids.size()));
    b.kv_len.push_back(len);
    b.q_indptr.push_back(b.q_indptr.back() + n_new);
  };
  add({0, 1, 2, 3}, 60, 1);
  add({4, 5}, 20, 1);
  add({0, 1, 2, 6}, 50, 1);
  add({0, 1, 2, 7}, 50, 4);
  add({0, 1, 8, 11}, 40, 1);
  add({9, 10}, 30, 1);
  add({9}, 16, 1);
  std::vector<SharedPages> g = shared_page_groups(b.view<AttentionBatch>(), 16);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].seqs, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(g[0].n_pages, 2);
  // Sequence 4 on page 2 as well: while its last key is on page 2, it keeps
  // that page to itself; once past it, the group shares the three pages.
  b.page_ids[b.page_indptr[4] + 2] = 2;
  b.kv_len[4] = 33;
  g = shared_page_groups(b.view<AttentionBatch>(), 16);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].n_pages, 2);
  b.kv_len[4] = 49;
  g = shared_page_groups(b.view<AttentionBatch>(), 16);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].n_pages, 3);
  // Sparse attention's per-head lists are never grouped.
  AttentionBatch lists = b.view<AttentionBatch>();
  lists.lists = 3;
  EXPECT_TRUE(shared_page_groups(lists, 16).empty());
}

TEST(Attention, NonFiniteStaysWhereTheReferencePutsIt) {
  Pool pool(DType::kF32, 4, 1, 8, 8);
  const PagedBatch b = make_batch(pool, {{6, 2}, {5, 1}}, 3);
  // A NaN in one value of key 2 of sequence 0, and in one query of sequence 1.
  static_cast<float*>(pool.v[static_cast<size_t>(b.page_ids[0])])[2 * 8 + 5] = NAN;
  std::vector<float> q = test::random_floats(3 * 2 * 8, -1, 1, 4);
  q[2 * 16 + 8 + 3] = NAN;
  std::vector<float> out(q.size()), ref(q.size());
  ASSERT_EQ(paged_attention(out.data(), 16, q.data(), 16, 2, pool.view(), b.view<AttentionBatch>(), 0.35f),
            Status::kOk);
  ASSERT_EQ(paged_attention_ref(ref.data(), 16, q.data(), 16, 2, pool.view(), b.view<AttentionBatch>(), 0.35f),
            Status::kOk);
  int n_nan = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(std::isnan(out[i]), std::isnan(ref[i])) << i;
    n_nan += std::isnan(ref[i]);
  }
  EXPECT_EQ(n_nan, 2 * 2 + 8);  // dim 5 of both heads of both queries of seq 0; head 1 of seq 1
}

TEST(Attention, NonFiniteStaysWhereTheReferencePutsItInDecode) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(t));
    Pool pool(t, 16, 1, 8, 12);
    // Sequence 0 long enough to be cut into key chunks.
    const PagedBatch b = make_batch(pool, {{150, 1}, {5, 1}}, 3);
    // A NaN in one value of key 2 of sequence 0, and in one query of sequence 1.
    const size_t e = 2 * 8 + 5;
    if (t == DType::kF32) {
      static_cast<float*>(pool.v[static_cast<size_t>(b.page_ids[0])])[e] = NAN;
    } else {
      static_cast<uint16_t*>(pool.v[static_cast<size_t>(b.page_ids[0])])[e] =
          t == DType::kF16 ? 0x7e00 : 0x7fc0;  // a quiet NaN
    }
    std::vector<float> q = test::random_floats(2 * 2 * 8, -1, 1, 4);
    q[16 + 8 + 3] = NAN;
    std::vector<float> out(q.size()), ref(q.size());
    ASSERT_EQ(paged_attention(out.data(), 16, q.data(), 16, 2, pool.view(), b.view<AttentionBatch>(), 0.35f),
              Status::kOk);
    ASSERT_EQ(paged_attention_ref(ref.data(), 16, q.data(), 16, 2, pool.view(), b.view<AttentionBatch>(), 0.35f),
              Status::kOk);
    int n_nan = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(std::isnan(out[i]), std::isnan(ref[i])) << i;
      n_nan += std::isnan(ref[i]);
    }
    EXPECT_EQ(n_nan, 2 + 8);  // dim 5 of both heads of seq 0; head 1 of seq 1
  }
}

TEST(Attention, RejectsBadBatchesAndWritesNothing) {
  Pool pool(DType::kBF16, 4, 2, 8, 6);
  PagedBatch good = make_batch(pool, {{6, 2}, {3, 3}}, 5);
  std::vector<float> q(5 * 4 * 8, 0.5f);
  auto expect = [&](PagedBatch b, int64_t n_head, Status want, const char* what) {
    GuardedRows out(5, 32, 32);
    EXPECT_EQ(paged_attention(out.data(), 32, q.data(), 32, n_head, pool.view(), b.view<AttentionBatch>(), 1.0f),
              want)
        << what;
    if (want != Status::kOk) {
      GuardedRows fresh(5, 32, 32);
      EXPECT_EQ(std::memcmp(out.data(), fresh.data(), 5 * 32 * 4), 0) << what << ": output written";
    }
  };
  expect(good, 4, Status::kOk, "good");
  PagedBatch b = good;
  b.kv_len[0] = 1;  // fewer keys than new tokens
  expect(b, 4, Status::kInvalidArgument, "kv_len < n_new");
  b = good;
  b.kv_len[1] = 5;  // needs 2 pages, has 1
  expect(b, 4, Status::kInvalidArgument, "too few pages");
  b = good;
  b.page_ids[1] = 6;  // outside the pool
  expect(b, 4, Status::kInvalidArgument, "page id");
  b = good;
  b.page_ids[0] = -1;
  expect(b, 4, Status::kInvalidArgument, "negative page id");
  b = good;
  b.q_indptr[1] = 3;
  b.q_indptr[2] = 2;  // decreasing
  expect(b, 4, Status::kInvalidArgument, "q_indptr");
  expect(good, 3, Status::kInvalidArgument, "heads not a multiple of kv heads");
  Pool big(DType::kF32, 4, 1, kMaxHeadDim + 1, 2);
  PagedBatch bb = make_batch(big, {{2, 1}}, 6);
  std::vector<float> o(kMaxHeadDim + 1), qq(kMaxHeadDim + 1);
  EXPECT_EQ(paged_attention(o.data(), kMaxHeadDim + 1, qq.data(), kMaxHeadDim + 1, 1, big.view(),
                            bb.view<AttentionBatch>(), 1.0f),
            Status::kUnsupported);
}

TEST(KvAppend, MatchesReferenceBitForBitAndTouchesOnlyItsSlots) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(t));
    Pool a(t, 5, 3, 24, 7), r(t, 5, 3, 24, 7);
    const int64_t row = 3 * 24;
    const std::vector<int64_t> slots = {0, 4, 5, 17, 34, 12, 30};
    auto k = test::random_floats(slots.size() * (row + 2), -3, 3, 1);
    auto v = test::random_floats(slots.size() * (row + 2), -3, 3, 2);
    k[5] = NAN;
    v[7] = -INFINITY;
    v[9] = 1e-41f;     // subnormal in f32
    v[10] = 70000.0f;  // overflows f16
    ASSERT_EQ(kv_append(a.k.data(), a.v.data(), 7, t, 5, 3, 24, k.data(), row + 2, v.data(),
                        row + 2, slots.data(), static_cast<int64_t>(slots.size())),
              Status::kOk);
    ASSERT_EQ(kv_append_ref(r.k.data(), r.v.data(), 7, t, 5, 3, 24, k.data(), row + 2, v.data(),
                            row + 2, slots.data(), static_cast<int64_t>(slots.size())),
              Status::kOk);
    for (size_t p = 0; p < 7; ++p) {
      EXPECT_EQ(a.k_mem[p], r.k_mem[p]) << "K page " << p;
      EXPECT_EQ(a.v_mem[p], r.v_mem[p]) << "V page " << p;
    }
    const std::vector<int64_t> bad = {3, 35};  // 35 / 5 = page 7: outside
    const auto before = a.k_mem;
    EXPECT_EQ(kv_append(a.k.data(), a.v.data(), 7, t, 5, 3, 24, k.data(), row, v.data(), row,
                        bad.data(), 2),
              Status::kInvalidArgument);
    EXPECT_EQ(a.k_mem, before);
  }
}

TEST(PageKeyMinMax, MatchesReferenceExactly) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t ps = 6, nkv = 2, hd = 19, n_pages = 9, row = nkv * hd;
    Pool pool(t, ps, nkv, hd, n_pages);
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < n_pages * ps; ++i) slots.push_back(i);
    auto kv = test::random_floats(static_cast<size_t>(n_pages * ps * row), -4, 4, 11);
    kv[static_cast<size_t>((3 * ps + 1) * row + 5)] = NAN;  // page 3, token 1
    kv[static_cast<size_t>((5 * ps + 4) * row + 2)] = NAN;  // page 5, token 4: beyond its fill
    ASSERT_EQ(kv_append(pool.k.data(), pool.v.data(), n_pages, t, ps, nkv, hd, kv.data(), row,
                        kv.data(), row, slots.data(), n_pages * ps),
              Status::kOk);
    const std::vector<int32_t> ids = {3, 0, 8, 5, 2};
    const std::vector<int32_t> filled = {6, 1, 3, 4, 6};
    const float canary = -12345.0f;
    std::vector<float> mn(static_cast<size_t>(n_pages * row), canary), mx = mn, mn_ref = mn,
                                                                       mx_ref = mn;
    std::vector<const void*> kp(pool.k.begin(), pool.k.end());
    ASSERT_EQ(page_key_minmax(mn.data(), mx.data(), kp.data(), n_pages, t, ps, nkv, hd, ids.data(),
                              filled.data(), 5),
              Status::kOk);
    ASSERT_EQ(page_key_minmax_ref(mn_ref.data(), mx_ref.data(), kp.data(), n_pages, t, ps, nkv, hd,
                                  ids.data(), filled.data(), 5),
              Status::kOk);
    for (size_t i = 0; i < mn.size(); ++i) {
      const bool listed =
          std::find(ids.begin(), ids.end(), static_cast<int32_t>(i / row)) != ids.end();
      if (!listed) {
        EXPECT_EQ(mn[i], canary) << i;
        EXPECT_EQ(mx[i], canary) << i;
        continue;
      }
      EXPECT_EQ(std::isnan(mn[i]), std::isnan(mn_ref[i])) << i;
      if (!std::isnan(mn_ref[i])) {
        EXPECT_EQ(mn[i], mn_ref[i]) << i;
        EXPECT_EQ(mx[i], mx_ref[i]) << i;
        EXPECT_LE(mn[i], mx[i]) << i;
      }
    }
    EXPECT_TRUE(std::isnan(mn[static_cast<size_t>(3 * row + 5)]));
    EXPECT_FALSE(std::isnan(mn[static_cast<size_t>(5 * row + 2)]));  // NaN key not yet filled
    const std::vector<int32_t> bad_fill = {7};
    EXPECT_EQ(page_key_minmax(mn.data(), mx.data(), kp.data(), n_pages, t, ps, nkv, hd, ids.data(),
                              bad_fill.data(), 1),
              Status::kInvalidArgument);
  }
}

}  // namespace
}  // namespace strata::cpu
