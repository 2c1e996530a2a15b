// Attention over a paged KV cache, and the two writes that keep the pages:
// appending new key/value rows and the per-page key min/max that sparse
// attention scores pages with.
//
// Page layout (the KV cache's): K and V pages are separate; each page is
// [page_size, n_kv_head, head_dim] contiguous in the kv dtype (f32, f16 or
// bf16), and pages are reached through arrays of base pointers, so they can
// live anywhere. A slot is page_id * page_size + offset in page. Pages in a
// quantized dtype are forwarded by paged_attention(_ref) and kv_append(_ref)
// to kernels/cpu/attention_quant.h (page_key_minmax does not take them).
//
// Batches are described as in flashinfer: sequence s owns query rows
// [q_indptr[s], q_indptr[s+1]) of q and pages page_ids[page_indptr[s] ..
// page_indptr[s+1]) (in order: key j of s is at offset j % page_size of its
// (j / page_size)-th page). kv_len[s] counts every key of s, including the
// n_new = q_indptr[s+1] - q_indptr[s] new tokens the caller has already
// appended. Causal: query i of s sits at position kv_len[s] - n_new + i and
// sees keys 0 .. that position. GQA: query head h reads kv head
// h / (n_head / n_kv_head). Prefill (many queries) and decode (one) are the
// same call. Every index is checked before anything is written.
//
// Work is split over (sequence, kv head, tile of query tokens): the query
// heads that share a kv head read each key and value once. Within an item the
// keys are folded kAttentionKeyBlock at a time into an online softmax (flash
// attention) in f32; with AVX-512 each block of K is transposed in registers
// so that a query row scores all its keys with plain multiply-adds. An item
// keeps about 100 KB of tiles on its thread's stack.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/status.h"

namespace strata::cpu {

struct KvPages {
  const void* const* k = nullptr;  // [n_pages] K page base pointers
  const void* const* v = nullptr;  // [n_pages] V page base pointers
  int64_t n_pages = 0;             // page ids are in [0, n_pages)
  DType dtype = DType::kF32;       // f32, f16 or bf16 (quantized: attention_quant.h)
  int64_t page_size = 16;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;  // <= kMaxHeadDim
};

struct AttentionBatch {
  int64_t n_seq = 0;
  const int32_t* q_indptr = nullptr;     // [n_seq + 1], q_indptr[0] == 0
  const int32_t* kv_len = nullptr;       // [n_seq]
  const int32_t* page_indptr = nullptr;  // [n_seq + 1], page_indptr[0] == 0
  const int32_t* page_ids = nullptr;     // [page_indptr[n_seq]]
  // Page lists per sequence: 1 (every kv head reads the sequence's pages),
  // or n_kv_head (sparse attention's selections, kernels/cpu/page_select.h):
  // the span page_indptr[s] .. page_indptr[s+1] then holds n_kv_head lists
  // of equal length, kv head g's at g * span / n_kv_head into it.
  int64_t lists = 1;
};

// The pages kv head g of sequence s reads (in key order).
inline const int32_t* seq_pages(const AttentionBatch& b, int64_t s, int64_t g) {
  const int64_t span = static_cast<int64_t>(b.page_indptr[s + 1]) - b.page_indptr[s];
  return b.page_ids + b.page_indptr[s] + (b.lists > 1 ? g * (span / b.lists) : 0);
}

inline constexpr int64_t kMaxHeadDim = 256;
// Keys folded into the online softmax at a time; each fold rescales the
// running sums once (the accuracy bound of the tests counts the folds).
inline constexpr int64_t kAttentionKeyBlock = 16;

// The shape checks every paged attention kernel makes on its arguments
// (the dtype is the caller's to check): kUnsupported for head_dim above
// kMaxHeadDim, kInvalidArgument for a malformed batch, page table or stride.
// On success *n_tokens is the number of query rows, *max_new the most new
// tokens of one sequence and *work a rough cost (multiply-adds).
Status check_attention_batch(const float* out, int64_t out_stride, const float* q,
                             int64_t q_stride, int64_t n_head, const KvPages& kv,
                             const AttentionBatch& b, int64_t* n_tokens, int64_t* max_new,
                             int64_t* work);

// out: [n_tokens, n_head, head_dim] f32, token row stride out_stride
// q:   [n_tokens, n_head, head_dim] f32, token row stride q_stride
// n_tokens = batch.q_indptr[n_seq]; scale is usually 1/sqrt(head_dim).
Status paged_attention(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                       int64_t n_head, const KvPages& kv, const AttentionBatch& batch, float scale);
Status paged_attention_ref(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                           int64_t n_head, const KvPages& kv, const AttentionBatch& batch,
                           float scale);

// Writes k/v rows of n_tokens new tokens at slots[t], converting to the kv dtype
// (round to nearest even).
// k_pages, v_pages: [n_pages] writable page base pointers (layout as KvPages)
// k, v: [n_tokens, n_kv_head, head_dim] f32, token row strides k_stride, v_stride
// slots: [n_tokens], distinct, each in [0, n_pages * page_size)
Status kv_append(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                 int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                 int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                 int64_t n_tokens);
Status kv_append_ref(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                     int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                     int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                     int64_t n_tokens);

// Recomputes, for each listed page, the element-wise min and max of its first
// n_filled[i] keys (as stored, converted to f32). A NaN key element makes that
// min and max element NaN.
// k_min, k_max: [n_pages, n_kv_head, head_dim] f32, indexed by page id
// page_ids, n_filled: [n_list]; ids distinct, 1 <= n_filled[i] <= page_size
Status page_key_minmax(float* k_min, float* k_max, const void* const* k_pages, int64_t n_pages,
                       DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                       const int32_t* page_ids, const int32_t* n_filled, int64_t n_list);
Status page_key_minmax_ref(float* k_min, float* k_max, const void* const* k_pages, int64_t n_pages,
                           DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                           const int32_t* page_ids, const int32_t* n_filled, int64_t n_list);

}  // namespace strata::cpu
