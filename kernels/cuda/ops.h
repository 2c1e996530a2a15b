// The CUDA ops: one launcher per kernels/cuda/<op>.cu, each queuing its
// kernel(s) on `stream` and returning a Status (kernels/status.h). Launchers
// are leaves: raw device pointers, sizes, strides (in elements) and
// a stream in; no allocation (workspaces come from the caller, sized by
// launch_plan.h), no exception, no log, no synchronisation.
//
// Two kinds of rejection:
//   - arguments visible on the host (sizes, strides, null pointers, dtypes,
//     head_dim) are checked before anything is queued: kInvalidArgument or
//     kUnsupported (dispatch.h records which value), outputs untouched;
//   - indices that live in device memory (token ids, gathered rows,
//     positions, slots, page ids, sequence layouts) are checked by the
//     kernels as they read them: a bad one leaves its output row unwritten
//     and is recorded in the DeviceError the op was given (the first error
//     wins; later ones are dropped). The caller reads it after synchronising
//     (CudaBackend does at every synchronize()). Other rows of that op may
//     have been written.
// A failed launch returns kBackendError; cudaGetLastError() then says why.
//
// Semantics are those of the CPU ops in kernels/cpu (the *_ref functions
// define them); the accuracy of each op relative to its reference is stated
// next to it and derived in tests/ops.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda/launch_plan.h"
#include "kernels/status.h"

namespace strata::cuda {

// ---- device-side argument errors ----

enum class DeviceErrorCode : uint32_t {
  kNone = 0,
  kTokenId,        // embedding: ids[row] = value outside [0, limit)
  kGatherRow,      // gather_rows: rows[row] = value < 0
  kPosition,       // rope: pos[row] = value < 0
  kSlot,           // kv_append: slots[row] = value outside [0, limit) or its page is null
  kPageId,         // page_key_minmax: page_ids[row] = value outside [0, limit) or null page
  kFill,           // page_key_minmax: n_filled[row] = value outside [1, limit]
  kSequence,       // attention: sequence `row` has an inconsistent q/page layout or kv_len
  kAttentionPage,  // attention: sequence `row` uses page id `value` outside [0, limit) or null
};

// Zero-initialised device memory (cudaMemset) of one op or of a whole
// backend; 32 bytes.
struct DeviceError {
  uint32_t code = 0;  // DeviceErrorCode
  uint32_t reserved = 0;
  int64_t row = 0;
  int64_t value = 0;
  int64_t limit = 0;
};
static_assert(sizeof(DeviceError) == 32);

// One line: "token id 50000 at row 3 is outside [0, 49152)".
std::string describe(const DeviceError& e);

// ---- element-wise and row ops (f32, [n_rows, d] with row strides) ----

// y = x / sqrt(mean(x^2) + eps) * w; w may be null; y may be x.
// Accuracy: relative (0.5 (d + 3) + 6) u, u = 2^-24 (the CPU op's bound).
Status rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                float eps, int64_t n_rows, int64_t d, cudaStream_t stream);
// y = (x - mean) / sqrt(var + eps) * w + b; w, b may be null; y may be x.
// The mean is x_0 + sum(x - x_0) / d, as on the CPU (same error bound).
Status layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                  const float* b, float eps, int64_t n_rows, int64_t d, cudaStream_t stream);

// In place on q [n_tokens, n_head, head_dim] and k [n_tokens, n_kv_head,
// head_dim]: the first rot_dim dims of every head rotated by pos[t] *
// inv_freq[i] (angle in f32, as transformers; sincosf, 2 ulp).
// pos: [n_tokens] (device, each >= 0); inv_freq: [rot_dim / 2] (device).
Status rope(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
            int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
            const float* inv_freq, int64_t rot_dim, RopePairs pairs, DeviceError* err,
            cudaStream_t stream);

// y = f(x) (ReLU exact; GELU by erfcf; GELU-tanh and SiLU as x * sigmoid by
// expf); y may be x.
Status activation(ActFn f, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                  int64_t n_rows, int64_t d, cudaStream_t stream);
// y = silu(gate) * up.
Status swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride, const float* up,
              int64_t up_stride, int64_t n_rows, int64_t d, cudaStream_t stream);
// y = a + b (exact).
Status add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
           int64_t b_stride, int64_t n_rows, int64_t d, cudaStream_t stream);
// y[r, :] += bias[:] (exact); bias: [d].
Status add_bias(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t d,
                cudaStream_t stream);
// Softmax of each row; a row with a NaN gives NaN (as softmax_ref).
Status softmax(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n_rows,
               int64_t d, cudaStream_t stream);

// ---- gathers ----

// y[i, :] = table[ids[i], :] as f32 (bit-exact with embedding_ref for every
// table dtype: f32, f16, bf16, quantized). ids: [n_ids] (device).
// table rows table_row_bytes apart (even for 16-bit and quantized tables).
Status embedding(float* y, int64_t y_stride, const void* table, DType dtype, size_t table_row_bytes,
                 int64_t n_vocab, int64_t d, const int32_t* ids, int64_t n_ids, DeviceError* err,
                 cudaStream_t stream);
// y[i, :] = x[rows[i], :]; rows: [n_rows] (device, each >= 0).
Status gather_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                   const int32_t* rows, int64_t n_rows, int64_t d, DeviceError* err,
                   cudaStream_t stream);

// ---- conversions and matrix products ----

// y[r, :] = x[r, :] converted to y_dtype (f32, f16 or bf16). x: rows of n
// elements in x_dtype (f32, f16, bf16 or any quantized format), x_row_bytes
// apart. The value is the exact f32 value (quant's dequantize_row_ref for
// quantized rows, bit for bit), then rounded to nearest even; for y bf16 this
// is dequantize_row_bf16_ref. y: [n_rows, n], row stride y_stride elements.
Status convert_rows(void* y, DType y_dtype, int64_t y_stride, const void* x, DType x_dtype,
                    size_t x_row_bytes, int64_t n_rows, int64_t n, cudaStream_t stream);

// Fused dequantize + product for few rows (m <= kGemvMaxM) and quantized W:
// y[m, n] = x[m, k] . W[n, k]^T (+ bias), operands as `compute` says (f32:
// exact dequantized weights and x; bf16: both rounded to bf16), f32
// accumulation. W rows w_row_bytes apart (even).
Status gemv_dequant(float* y, int64_t y_stride, const float* x, int64_t x_stride, const void* w,
                    DType w_dtype, size_t w_row_bytes, const float* bias, int64_t m, int64_t n,
                    int64_t k, DType compute, cudaStream_t stream);

// y[m, n] = x[m, k] . W[n, k]^T (+ bias) along the plan_matmul path (operand
// rules in launch_plan.h), f32 accumulation; `handle` is bound to `stream`
// by the caller. workspace: device memory of at least
// plan_matmul(...).workspace_bytes(), 256-byte aligned. W: f32/f16/bf16 rows
// must be aligned to their element and w_row_bytes a multiple of it;
// quantized rows even. k == 0 gives y = bias (or 0).
Status matmul(cublasHandle_t handle, void* workspace, size_t workspace_bytes, float* y,
              int64_t y_stride, const float* x, int64_t x_stride, const void* w, DType w_dtype,
              size_t w_row_bytes, const float* bias, int64_t m, int64_t n, int64_t k, DType compute,
              cudaStream_t stream);

// ---- paged KV cache ----

// Writes the k/v rows of n_tokens tokens at slots[t] (device, int64),
// converted to the page dtype exactly as kv_append_ref does (bit for bit).
// Pages as in KvLayer (kernels/backend.h): k_pages/v_pages are device arrays
// of device page pointers.
Status kv_append(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                 int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                 int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                 int64_t n_tokens, DeviceError* err, cudaStream_t stream);

// Recomputes k_min/k_max of the n_list listed pages over their first
// n_filled[i] keys, bit for bit as page_key_minmax_ref (a NaN key element
// makes that min and max NaN). page_ids, n_filled: [n_list] (device).
Status page_key_minmax(float* k_min, float* k_max, const void* const* k_pages, int64_t n_pages,
                       DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                       const int32_t* page_ids, const int32_t* n_filled, int64_t n_list,
                       DeviceError* err, cudaStream_t stream);

// Causal attention of every sequence's new tokens over its keys (layout and
// semantics of paged_attention_ref; GQA by n_head / kv.n_kv_head), split as
// `plan` (plan_attention for these n_seq, n_head, kv sizes) says; partials:
// plan.partial_bytes of device workspace (may be null when 0). Scores and the
// online softmax in f32 (expf), keys widened exactly from the page dtype.
// out, q: [q_indptr[n_seq], n_head, head_dim], token row strides.
Status attention(float* out, int64_t out_stride, const float* q, int64_t q_stride, int64_t n_head,
                 const KvLayer& kv, const AttentionSeqs& seqs, float scale,
                 const AttentionPlan& plan, float* partials, DeviceError* err, cudaStream_t stream);

}  // namespace strata::cuda
