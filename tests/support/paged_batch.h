// Paged-KV batches for the attention tests of every implementation (the CPU
// kernels, the CUDA launchers, every Backend): the host arrays of a batch in
// flashinfer's layout (the field names of cpu::AttentionBatch and
// AttentionSeqs), each sequence's pages drawn at random from a pool, the
// slots its keys occupy; the shapes every implementation is checked on; and
// the value of a stored (unquantized) KV element.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace strata::test {

struct PagedBatch {
  std::vector<int32_t> q_indptr{0}, kv_len, page_indptr{0}, page_ids;
  std::vector<int32_t> touched, n_filled;   // every page used, and the keys in it
  std::vector<std::vector<int64_t>> slots;  // [seq][key] page * page_size + offset

  int64_t n_seq() const { return static_cast<int64_t>(kv_len.size()); }
  int64_t n_tokens() const { return q_indptr.back(); }
  // The batch as an op sees it: a struct with the fields n_seq, q_indptr,
  // kv_len, page_indptr, page_ids pointing here.
  template <class View>
  View view() const {
    View v;
    v.n_seq = n_seq();
    v.q_indptr = q_indptr.data();
    v.kv_len = kv_len.data();
    v.page_indptr = page_indptr.data();
    v.page_ids = page_ids.data();
    return v;
  }
  std::vector<int64_t> all_slots() const {
    std::vector<int64_t> out;
    for (const auto& s : slots) out.insert(out.end(), s.begin(), s.end());
    return out;
  }
};

// Sequences (kv_len, n_new) on pages of `page_size` keys drawn at random
// (seeded) from a pool of `n_pages` pages.
inline PagedBatch layout_paged_batch(const std::vector<std::pair<int32_t, int32_t>>& seqs,
                                     int64_t page_size, int64_t n_pages, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> free_ids(static_cast<size_t>(n_pages));
  std::iota(free_ids.begin(), free_ids.end(), 0);
  std::shuffle(free_ids.begin(), free_ids.end(), rng);
  const int32_t ps = static_cast<int32_t>(page_size);
  PagedBatch b;
  size_t next = 0;
  for (auto [len, n_new] : seqs) {
    const size_t first = b.page_ids.size();
    for (int32_t i = 0; i < (len + ps - 1) / ps; ++i) {
      b.page_ids.push_back(free_ids.at(next++));
      b.touched.push_back(b.page_ids.back());
      b.n_filled.push_back(std::min(ps, len - i * ps));
    }
    b.page_indptr.push_back(static_cast<int32_t>(b.page_ids.size()));
    b.kv_len.push_back(len);
    b.q_indptr.push_back(b.q_indptr.back() + n_new);
    std::vector<int64_t> slots;
    for (int32_t j = 0; j < len; ++j) {
      slots.push_back(static_cast<int64_t>(b.page_ids[first + static_cast<size_t>(j / ps)]) * ps +
                      j % ps);
    }
    b.slots.push_back(std::move(slots));
  }
  return b;
}

// One attention shape: pages of `page_size` keys, n_kv_head heads of
// head_dim with `group` query heads each, sequences (kv_len, n_new).
struct AttnCase {
  const char* name;
  int64_t page_size, n_kv_head, group, head_dim;
  std::vector<std::pair<int32_t, int32_t>> seqs;
};
// The shapes every implementation is checked on (each adds its own: odd head
// dims on the CPU, long contexts and splits on a GPU, quantized groups).
inline const std::vector<AttnCase> kAttentionCases = {
    {"decode", 16, 3, 3, 64, {{1, 1}, {2, 1}, {17, 1}, {64, 1}, {150, 1}}},
    {"prefill", 16, 3, 3, 64, {{33, 33}, {100, 100}}},
    {"chunked prefill", 7, 2, 4, 80, {{70, 20}, {5, 5}, {40, 1}, {129, 65}}},
    {"gqa 8", 16, 4, 8, 128, {{45, 45}, {20, 1}}},
    {"no queries", 16, 1, 2, 64, {{8, 0}, {9, 1}}},
};

// Bytes of one stored element and its value, for f32, f16 and bf16 pages.
inline int64_t kv_elem_bytes(DType t) {
  return t == DType::kF32 ? 4 : 2;
}
inline double kv_stored(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
}

}  // namespace strata::test
