// Paged attention and KV append over quantized KV pages (docs/DESIGN.md §6).
//
// Values: each token's row of each kv head (head_dim values) is stored as
// head_dim / G consecutive blocks of a group-wise format of quant/blocks.h
// (Q8S, Q8A, Q4S32, Q4A; G = 32, 64 or 128 must divide head_dim), at
// [page_size, n_kv_head, head_dim / G blocks] in the V page, quantized with
// quant's fast quantizer (bit for bit quantize_row_ref).
//
// Keys: per channel over the page's tokens, asymmetric, with the format's
// bits (4 or 8; the group G does not apply), as KIVI does: keys carry a few
// channels far larger than the rest, so a per-token group's range is set by
// them and the other channels get a level or two, while along one channel
// the values of 16 neighbouring tokens are of one size. A K page is
//   [n_kv_head][head_dim] grids {f16 d, f16 m} (4 bytes each), then
//   [n_kv_head][head_dim][page_size] codes c in [0, L], L = 2^bits - 1:
//   8-bit one byte each; 4-bit two per byte, token 2i in the low nibble;
// and key element = d * c + m (multiply, then add, in f32). A grid covers
// every key appended to its page so far: m is f16(lo) rounded down and d
// f16((hi - m) / L) rounded up, lo and hi the channel's extremes. An append
// whose keys stay inside the grid only writes their codes; one that widens
// it re-grids the channel, mapping the old codes' values onto the new grid
// (each such re-grid rounds the older keys once more, to half a new step).
// All the keys of a page appended in one call (a prefill) are gridded
// together, so prompt pages are quantized once, exactly over their own
// range; a page filled by decode steps is re-gridded when a new key lies
// outside its range. A non-finite key makes its channel's grid NaN for the
// page. Pages must be filled in token order, as the KV cache does.
//
// Page bytes are the larger of the K and V layouts (core/kv_layout.h), so
// K and V pages have one size. Attention: decode (one new token per
// sequence) with AVX-512 reads the quantized pages directly, 16 keys of a
// channel per register and the value rows dequantized a block at a time;
// everything else (prefill, where many query tiles read the same keys, or a
// CPU without AVX-512) dequantizes the pages the batch reads once into f32
// pages (keys as above, values exactly as dequantize_row_ref), a run of
// sequences at a time within a byte cap, and runs the f32 kernel on them.
//
// The page key min/max (sparse attention's page scores) are kept from the f32
// keys before quantization, not from the stored values: they bound the keys
// the model computed, which is what a page score estimates, and they need no
// dequantization. kv_append_quant folds each new key into its page's min/max
// in token order (a key at offset 0 starts its page afresh).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/kv_layout.h"  // kv_key_bits, kv_quant_page_bytes: the page sizes
#include "kernels/cpu/attention.h"
#include "kernels/status.h"

namespace strata::cpu {

// Key `t` (a page offset) of kv head g of a K page, dequantized: [head_dim] f32.
void kv_key_dequant(const void* k_page, DType dtype, int64_t page_size, int64_t n_kv_head,
                    int64_t head_dim, int64_t g, int64_t t, float* out);

// True when pages of `dtype` can hold rows of head_dim values: a quantized
// format whose group divides head_dim.
bool kv_quant_ok(DType dtype, int64_t head_dim);

// Attention outside the AVX-512 decode kernel dequantizes the pages it reads
// into f32 pages, at most this many bytes at a time (one sequence at least),
// into a buffer the calling thread keeps from one call to the next (and
// gives back when one sequence needed more). A buffer allocated afresh per
// call was mapped and faulted in page by page each time once it passed the
// allocator's 32 MiB mapping threshold: a decode step over q8 KV of 32
// sequences x 1024 keys (the demo model's shape, 30 layers, AVX2) took
// 2745 ms with 50 MB buffers, 730-900 ms reused, 8 MiB or 256 MiB at a time
// alike within this machine's noise; 8 sequences x 256 keys 30-60 ms either way.
// The buffer holds a run of sequences of at most this many bytes, or one
// sequence's pages alone when they are more (kv_dequant_bytes in
// offload/block_budget.h bounds it for a block).
inline constexpr uint64_t kKvDequantBytes = uint64_t{8} << 20;

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

// Quantizes the k/v rows of n_tokens new tokens into slots[t] (keys per
// channel and page, values per token; see above) and, when
// k_min/k_max are not null, folds the f32 keys into the min/max of their
// pages (a NaN key element makes that min and max element NaN).
// k, v: [n_tokens, n_kv_head, head_dim] f32, token row strides k_stride, v_stride
// slots: [n_tokens], distinct, each in [0, n_pages * page_size), in key order per page,
//   and a page's first slot in the call follows the keys it already holds
//   (page_size must be even for 4-bit keys: kUnsupported otherwise)
// k_min, k_max: [n_pages, n_kv_head, head_dim] f32 or null
Status kv_append_quant(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                       int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                       int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                       int64_t n_tokens, float* k_min, float* k_max);
// Reference: keys page by page and channel by channel in plain loops (the
// same arithmetic), values by quantize_row_ref per row, min/max element by
// element.
Status kv_append_quant_ref(void* const* k_pages, void* const* v_pages, int64_t n_pages,
                           DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                           const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                           const int64_t* slots, int64_t n_tokens, float* k_min, float* k_max);

}  // namespace strata::cpu
