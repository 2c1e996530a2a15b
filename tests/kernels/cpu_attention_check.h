// What the CPU attention tests share (tests/kernels/test_attention.cpp over
// stored pages, test_attention_quant.cpp over quantized ones): a pool of host
// pages allocated one by one (so they are not contiguous), each followed by
// guard bytes; and the check of paged_attention against paged_attention_ref
// on a batch, every element within a bound the caller derives.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/vec_math.h"
#include "support/all_close.h"
#include "support/attention_bound.h"
#include "support/guarded.h"
#include "support/paged_batch.h"
#include "support/random.h"

namespace strata::cpu::test_support {

struct HostPages {
  DType dtype;
  int64_t page_size, n_kv_head, head_dim, n_pages;
  size_t page_bytes;
  std::vector<std::vector<char>> k_mem, v_mem;
  std::vector<void*> k, v;

  HostPages(DType t, int64_t ps, int64_t nkv, int64_t hd, int64_t n, size_t bytes, char fill)
      : dtype(t), page_size(ps), n_kv_head(nkv), head_dim(hd), n_pages(n), page_bytes(bytes) {
    for (int64_t i = 0; i < n; ++i) {
      k_mem.emplace_back(bytes + 64, fill);
      v_mem.emplace_back(bytes + 64, fill);
    }
    for (int64_t i = 0; i < n; ++i) {
      k.push_back(k_mem[static_cast<size_t>(i)].data());
      v.push_back(v_mem[static_cast<size_t>(i)].data());
    }
  }
  KvPages view() const {
    KvPages p;
    p.k = const_cast<const void* const*>(k.data());
    p.v = const_cast<const void* const*>(v.data());
    p.n_pages = n_pages;
    p.dtype = dtype;
    p.page_size = page_size;
    p.n_kv_head = n_kv_head;
    p.head_dim = head_dim;
    return p;
  }
  int64_t row() const { return n_kv_head * head_dim; }
  test::AttentionHeads heads(int64_t group) const {
    return {n_kv_head * group, n_kv_head, head_dim, page_size};
  }
};

// paged_attention on `b` (random queries, a stride with gaps of NaN that
// must never be read, an output with guard columns) against
// paged_attention_ref; `bound(q, q_stride, ref)` gives each element's bound.
template <class Bound>
void check_paged_attention(const HostPages& pool, const test::PagedBatch& b, int64_t group,
                           uint32_t seed, Bound bound, const char* what) {
  const int64_t n_head = pool.n_kv_head * group;
  const int64_t row = n_head * pool.head_dim;
  const int64_t n_tok = b.n_tokens();
  const int64_t q_stride = row + 3;
  std::vector<float> q(static_cast<size_t>(n_tok * q_stride), NAN);
  const auto qv = test::random_floats(static_cast<size_t>(n_tok * row), -2.0f, 2.0f, seed + 99);
  for (int64_t t = 0; t < n_tok; ++t) std::copy_n(qv.begin() + t * row, row, q.begin() + t * q_stride);
  const float scale = 1.0f / std::sqrt(static_cast<float>(pool.head_dim));
  test::GuardedRows out(n_tok, row, row + 2);
  std::vector<float> ref_out(static_cast<size_t>(n_tok * row));
  ASSERT_EQ(paged_attention(out.data(), out.stride(), q.data(), q_stride, n_head, pool.view(),
                            b.view<AttentionBatch>(), scale),
            Status::kOk);
  ASSERT_EQ(paged_attention_ref(ref_out.data(), row, q.data(), q_stride, n_head, pool.view(),
                                b.view<AttentionBatch>(), scale),
            Status::kOk);
  EXPECT_TRUE(out.canaries_intact());
  const auto ref = test::to_double(ref_out);
  const std::vector<double> tol = bound(q.data(), q_stride, scale, ref);
  EXPECT_TRUE(test::all_close(out.rows(), ref, [&](size_t i) { return tol[i]; }, what));
}

// One case: a `Pool` (built from dtype, page size, kv heads, head dim and a
// page count) with room for c's sequences, the batch `make_batch(pool, seqs,
// seed)` writes into it, and the check with `bound(pool, b, group, q,
// q_stride, scale, ref)`.
template <class Pool, class MakeBatch, class Bound>
void check_attention_case(DType t, const test::AttnCase& c, uint32_t seed, MakeBatch make_batch,
                          Bound bound, const char* what) {
  SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(t));
  int64_t pages_needed = 0;
  for (auto [len, n_new] : c.seqs) pages_needed += (len + c.page_size - 1) / c.page_size;
  Pool pool(t, c.page_size, c.n_kv_head, c.head_dim, pages_needed + 5);
  const test::PagedBatch b = make_batch(pool, c.seqs, seed);
  check_paged_attention(
      pool, b, c.group, seed,
      [&](const float* q, int64_t q_stride, float scale, const std::vector<double>& ref) {
        return bound(pool, b, c.group, q, q_stride, scale, ref);
      },
      what);
}

// The relative part of the f32 kernel's bound (tests/kernels/test_attention.cpp's
// file comment): B + 2 exponentials per key (its key blocks and the merge of
// key chunks) and sums of n_keys + 4B + 6 terms.
inline double f32_attention_rel(int64_t n_keys, double e_max, double range) {
  const int64_t blocks = (n_keys + kAttentionKeyBlock - 1) / kAttentionKeyBlock;
  return 2 * e_max + 2 * static_cast<double>(blocks + 2) * (kExpRelErr + range * test::kU32) +
         static_cast<double>(n_keys + 4 * blocks + 6) * test::kU32;
}

// Decode sequences (kv_len, shares) on pages of `pool` (any of the tests'
// pools), written by `make_batch(pool, seqs, seed)`; those that share begin
// with the same n_shared pages (their keys written once, as one sequence's),
// the others have pages of their own.
template <class Pool, class MakeBatch>
test::PagedBatch make_shared_batch(Pool& pool, int32_t n_shared,
                                   const std::vector<std::pair<int32_t, bool>>& seqs, uint32_t seed,
                                   MakeBatch make_batch) {
  std::vector<std::pair<int32_t, int32_t>> layout = {
      {n_shared * static_cast<int32_t>(pool.page_size), 0}};
  for (auto [len, shares] : seqs) layout.push_back({len, 1});
  // The first "sequence" holds the shared pages (no query, not in the batch).
  const test::PagedBatch all = make_batch(pool, layout, seed);
  test::PagedBatch b;
  for (size_t s = 1; s < layout.size(); ++s) {
    const auto [len, shares] = seqs[s - 1];
    std::vector<int32_t> ids(all.page_ids.begin() + all.page_indptr[s],
                             all.page_ids.begin() + all.page_indptr[s + 1]);
    if (shares) std::copy_n(all.page_ids.begin(), n_shared, ids.begin());
    b.page_ids.insert(b.page_ids.end(), ids.begin(), ids.end());
    b.page_indptr.push_back(static_cast<int32_t>(b.page_ids.size()));
    b.kv_len.push_back(len);
    b.q_indptr.push_back(b.q_indptr.back() + 1);
  }
  return b;
}

// Parameters: the KV dtype, and whether the AVX-512 kernels may run (false:
// the portable ones, whatever the CPU).
class KvDtypeAndIsaTest : public ::testing::TestWithParam<std::tuple<DType, bool>> {
 protected:
  void SetUp() override { saved_ = restrict_cpu_features({std::get<1>(GetParam()), true, true}); }
  void TearDown() override { restrict_cpu_features(saved_); }
  CpuFeatures saved_;
};

}  // namespace strata::cpu::test_support
