// Paged attention with one page list per kv head (AttentionBatch::lists, the
// form sparse attention's selections take): the query heads of kv head g get
// bit for bit what the same kernel gives over g's list taken as the whole
// page table, on the decode path, the general path (no AVX-512) and with
// quantized pages, and the references agree the same way; lists that all
// equal the table give the dense result bit for bit; a list count other than
// 1 or n_kv_head is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/kv_layout.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu_attention_check.h"
#include "support/random.h"

namespace strata::cpu {
namespace {

constexpr int64_t kPage = 16, kKvHeads = 3, kGroup = 4, kHeadDim = 64;
constexpr int64_t kHeads = kKvHeads * kGroup;

// Every page of the pool written with random keys and values.
test_support::HostPages random_pool(DType t, int64_t n_pages, uint32_t seed) {
  test_support::HostPages pool(t, kPage, kKvHeads, kHeadDim, n_pages,
                               kv_page_bytes(t, kPage, kKvHeads, kHeadDim), 0);
  const int64_t row = kKvHeads * kHeadDim, n = n_pages * kPage;
  const auto k = test::random_floats(static_cast<size_t>(n * row), -1.5f, 1.5f, seed);
  const auto v = test::random_floats(static_cast<size_t>(n * row), -1.0f, 1.0f, seed + 1);
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = i;
  EXPECT_EQ(kv_append(pool.k.data(), pool.v.data(), n_pages, t, kPage, kKvHeads, kHeadDim, k.data(),
                      row, v.data(), row, slots.data(), n),
            Status::kOk);
  return pool;
}

struct Lists {
  std::vector<int32_t> q_indptr{0}, kv_len, page_indptr{0}, page_ids;  // lists = kKvHeads
  std::vector<std::vector<int32_t>> per_head_ids;                      // [g] lists = 1 tables
  std::vector<int32_t> per_head_indptr{0};
  AttentionBatch batch(bool per_head, int64_t g = 0) const {
    AttentionBatch b;
    b.n_seq = static_cast<int64_t>(kv_len.size());
    b.q_indptr = q_indptr.data();
    b.kv_len = kv_len.data();
    b.page_indptr = per_head ? page_indptr.data() : per_head_indptr.data();
    b.page_ids = per_head ? page_ids.data() : per_head_ids[static_cast<size_t>(g)].data();
    b.lists = per_head ? kKvHeads : 1;
    return b;
  }
};

// Decode sequences whose kv head g reads m of their n pages (the last one
// always), chosen at random per head; same_lists: every head the table.
Lists random_lists(std::mt19937& rng, int64_t n_pages, bool same_lists) {
  Lists l;
  l.per_head_ids.resize(kKvHeads);
  std::vector<int32_t> perm(static_cast<size_t>(n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  size_t next = 0;
  for (const int64_t n : {40, 3, 17, 1, 90}) {  // pages of each sequence
    const int64_t m = same_lists ? n : std::min<int64_t>(n, 6);
    const int64_t last_keys = 1 + static_cast<int64_t>(rng() % kPage);
    std::vector<int32_t> table(perm.begin() + static_cast<ptrdiff_t>(next),
                               perm.begin() + static_cast<ptrdiff_t>(next + n));
    next += static_cast<size_t>(n);
    for (int64_t g = 0; g < kKvHeads; ++g) {
      std::vector<int64_t> pos(static_cast<size_t>(n - 1));
      std::iota(pos.begin(), pos.end(), 0);
      std::shuffle(pos.begin(), pos.end(), rng);
      pos.resize(static_cast<size_t>(m - 1));
      std::sort(pos.begin(), pos.end());
      pos.push_back(n - 1);
      for (int64_t p : pos) {
        l.page_ids.push_back(table[static_cast<size_t>(p)]);
        l.per_head_ids[static_cast<size_t>(g)].push_back(table[static_cast<size_t>(p)]);
      }
    }
    l.kv_len.push_back(static_cast<int32_t>((m - 1) * kPage + last_keys));
    l.q_indptr.push_back(l.q_indptr.back() + 1);
    l.page_indptr.push_back(static_cast<int32_t>(l.page_ids.size()));
    l.per_head_indptr.push_back(l.per_head_indptr.back() + static_cast<int32_t>(m));
  }
  EXPECT_LE(next, static_cast<size_t>(n_pages));
  return l;
}

using Attn = Status (*)(float*, int64_t, const float*, int64_t, int64_t, const KvPages&,
                        const AttentionBatch&, float);

// Runs `attn` with per-head lists and, per kv head, over that head's list as
// the table; the group's query heads must agree bit for bit.
void expect_lists_match(Attn attn, const test_support::HostPages& pool, const Lists& l,
                        const std::vector<float>& q, const char* what) {
  const int64_t n = static_cast<int64_t>(l.kv_len.size()), row = kHeads * kHeadDim;
  const float scale = 0.125f;
  std::vector<float> got(static_cast<size_t>(n * row), -7), want = got;
  ASSERT_EQ(attn(got.data(), row, q.data(), row, kHeads, pool.view(), l.batch(true), scale),
            Status::kOk);
  for (int64_t g = 0; g < kKvHeads; ++g) {
    ASSERT_EQ(attn(want.data(), row, q.data(), row, kHeads, pool.view(), l.batch(false, g), scale),
              Status::kOk);
    for (int64_t s = 0; s < n; ++s) {
      const size_t at = static_cast<size_t>(s * row + g * kGroup * kHeadDim);
      EXPECT_EQ(std::memcmp(&got[at], &want[at], kGroup * kHeadDim * sizeof(float)), 0)
          << what << ": sequence " << s << " kv head " << g;
    }
  }
}

Status ref_f32(float* out, int64_t os, const float* q, int64_t qs, int64_t nh, const KvPages& kv,
               const AttentionBatch& b, float scale) {
  return paged_attention_ref(out, os, q, qs, nh, kv, b, scale);
}

TEST(AttentionLists, EachKvHeadReadsItsOwnList) {
  std::mt19937 rng(21);
  for (const DType t : {DType::kF16, DType::kBF16, DType::kF32, DType::kQ8A32, DType::kQ4A64}) {
    for (const bool avx512 : {true, false}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << (avx512 ? " native" : " portable"));
      const CpuFeatures saved = restrict_cpu_features({avx512, true, true});
      const auto pool = random_pool(t, 160, 5);
      const Lists l = random_lists(rng, 160, false);
      const auto q = test::random_floats(l.kv_len.size() * kHeads * kHeadDim, -1, 1, 9);
      expect_lists_match(paged_attention, pool, l, q, "kernel");
      if (t == DType::kF16) expect_lists_match(ref_f32, pool, l, q, "reference");
      restrict_cpu_features(saved);
    }
  }
}

TEST(AttentionLists, ListsEqualToTheTableGiveTheDenseResult) {
  std::mt19937 rng(4);
  for (const DType t : {DType::kF16, DType::kQ8A32}) {
    const auto pool = random_pool(t, 160, 6);
    const Lists l = random_lists(rng, 160, true);
    const int64_t n = static_cast<int64_t>(l.kv_len.size()), row = kHeads * kHeadDim;
    const auto q = test::random_floats(static_cast<size_t>(n * row), -1, 1, 10);
    std::vector<float> sparse(static_cast<size_t>(n * row)), dense = sparse;
    ASSERT_EQ(paged_attention(sparse.data(), row, q.data(), row, kHeads, pool.view(), l.batch(true),
                              0.125f),
              Status::kOk);
    ASSERT_EQ(paged_attention(dense.data(), row, q.data(), row, kHeads, pool.view(),
                              l.batch(false, 0), 0.125f),
              Status::kOk);
    EXPECT_EQ(std::memcmp(sparse.data(), dense.data(), sparse.size() * sizeof(float)), 0)
        << dtype_name(t);
  }
}

TEST(AttentionLists, AListCountOtherThanOneOrTheKvHeadsIsRefused) {
  std::mt19937 rng(8);
  const auto pool = random_pool(DType::kF16, 160, 7);
  const Lists l = random_lists(rng, 160, false);
  const int64_t row = kHeads * kHeadDim;
  const auto q = test::random_floats(l.kv_len.size() * row, -1, 1, 11);
  std::vector<float> out(q.size());
  AttentionBatch b = l.batch(true);
  b.lists = 2;
  EXPECT_EQ(paged_attention(out.data(), row, q.data(), row, kHeads, pool.view(), b, 0.125f),
            Status::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cpu
