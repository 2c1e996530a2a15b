// Paged attention and KV append over quantized KV pages (DESIGN §6): each
// token's row of each kv head (head_dim values) is stored as head_dim / G
// consecutive blocks of a group-wise format of quant/blocks.h (Q8S, Q8A,
// Q4S32, Q4A; G = 32, 64 or 128 must divide head_dim). A page is
// [page_size, n_kv_head, head_dim / G blocks], i.e. page_size * n_kv_head *
// row_bytes(dtype, head_dim) bytes; slots, page tables and batches are as in
// kernels/cpu/attention.h, whose entry points forward quantized pages here.
//
// Keys are stored rotated: each group of G values of a key row is multiplied
// by the orthonormal Hadamard matrix H_G (Sylvester order, entries
// +-1/sqrt(G); kv_rotate_groups) before it is quantized, and attention
// multiplies every query's groups by the same H_G. H_G is symmetric and
// orthogonal, so (H q).(H k) = q.k: the scores are unchanged up to rounding,
// and the quantization error keeps its size (an orthogonal map preserves the
// norm of the error). What changes is the range a group is quantized over:
// keys carry a few channels far larger than the rest, which set the range of
// their group and leave the other channels a level or two; rotated, every
// element is a mix of all of the group's channels and the range follows the
// group's norm. Values are not rotated. This is what makes q4 keys usable
// (README, compression).
//
// Appending quantizes each new k/v row with quant's fast quantizer (bit for
// bit quantize_row_ref). Attention dequantizes on the fly, one block of
// kAttentionKeyBlock keys of one kv head at a time into an L1 tile (exactly
// dequantize_row_ref's values: d*q (+ m), multiply then add in f32), and runs
// the same online softmax in f32 as the f16/bf16 path; no dequantized copy of
// the cache is ever made.
//
// The page key min/max (sparse attention's page scores) are kept from the f32
// keys before quantization, not from the stored values: they bound the keys
// the model computed, which is what a page score estimates, and they need no
// dequantization. kv_append_quant folds each new key into its page's min/max
// in token order (a key at offset 0 starts its page afresh), so pages must be
// filled in order, as the KV cache does.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/status.h"

namespace strata::cpu {

// y = the rotation of x (n values, a multiple of group, group a power of 2):
// each group of `group` values multiplied by H_group / sqrt(group) with the
// butterflies of a fast Walsh-Hadamard transform, in a fixed order (the one
// definition: append, attention and their references all call it). x and y
// must not overlap.
void kv_rotate_groups(const float* x, float* y, int64_t n, int64_t group);

// True when pages of `dtype` can hold rows of head_dim values: a quantized
// format whose group divides head_dim.
bool kv_quant_ok(DType dtype, int64_t head_dim);

// As paged_attention / paged_attention_ref (kernels/cpu/attention.h) with
// kv.dtype quantized. kUnsupported when !kv_quant_ok(kv.dtype, kv.head_dim)
// or head_dim > kMaxHeadDim.
// out: [n_tokens, n_head, head_dim] f32; q: [n_tokens, n_head, head_dim] f32
Status paged_attention_quant(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                             int64_t n_head, const KvPages& kv, const AttentionBatch& batch,
                             float scale);
// Reference: every key and value row dequantized with dequantize_row_ref,
// scores, softmax and sums in double.
Status paged_attention_quant_ref(float* out, int64_t out_stride, const float* q,
                                 int64_t q_stride, int64_t n_head, const KvPages& kv,
                                 const AttentionBatch& batch, float scale);

// Quantizes the k/v rows of n_tokens new tokens into slots[t] and, when
// k_min/k_max are not null, folds the f32 keys into the min/max of their
// pages (a NaN key element makes that min and max element NaN).
// k, v: [n_tokens, n_kv_head, head_dim] f32, token row strides k_stride, v_stride
// slots: [n_tokens], distinct, each in [0, n_pages * page_size), in key order per page
// k_min, k_max: [n_pages, n_kv_head, head_dim] f32 or null
Status kv_append_quant(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                       int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                       int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                       int64_t n_tokens, float* k_min, float* k_max);
// Reference: quantize_row_ref per row, min/max element by element.
Status kv_append_quant_ref(void* const* k_pages, void* const* v_pages, int64_t n_pages,
                           DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                           const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                           const int64_t* slots, int64_t n_tokens, float* k_min, float* k_max);

}  // namespace strata::cpu
