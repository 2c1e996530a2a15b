// Launch shapes and work plans of the CUDA kernels, as plain host code (no
// CUDA header) so that the CPU tests check them: grid sizes of the
// element-wise kernels, the path and workspace of a matrix product, and the
// split plan of paged attention with the key range of each split (the last
// is __host__ __device__: the kernels call the function the tests check).
//
// Invariant: a plan only depends on host-known sizes (never on device data
// such as sequence lengths), so the backend can queue an op without waiting.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/numeric.h"
#include "kernels/status.h"

namespace strata::cuda {

inline constexpr int kBlockThreads = 256;       // threads of an element-wise block
inline constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride kernels launch at most this many
inline constexpr size_t kWorkspaceAlign = 256;

constexpr size_t align_workspace(size_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// Blocks for n work items at per_block items a block, at most max_blocks
// (the kernels loop grid-stride over the rest); 0 when n <= 0.
int64_t grid_blocks(int64_t n, int64_t per_block, int64_t max_blocks = kMaxBlocks);

// ---- matrix product y[m, n] = x[m, k] . W[n, k]^T ----
//
// Operands. The GEMM multiplies two operands of one dtype with f32
// accumulation:
//   W f16 / bf16        operand = W's dtype (x rounded to it), whatever compute
//   W f32, compute f32  operand f32 (cuBLAS SGEMM, no TF32)
//   W f32, compute bf16 operand bf16 (x and W rounded to nearest even)
//   W quantized         operand = compute (f32: exact dequantized values;
//                       bf16: dequantized then rounded, as dequantize_row_bf16_ref)
enum class MatmulPath : uint8_t {
  kGemm,        // cuBLAS straight on the stored weights
  kGemmPanels,  // weights converted to the operand dtype a panel of rows at a
                // time into the workspace, each panel multiplied by cuBLAS
  kGemv,        // fused dequantize + product kernel for few rows of x
};

// Rows of x up to which quantized weights take the fused kernel: it reads W
// once at its stored size; at 8 rows it still does under 2 multiply-adds per
// weight byte, below the f32 rate per byte of memory bandwidth of the
// targeted GPUs, while dequantize + GEMM writes and reads the panel again.
inline constexpr int64_t kGemvMaxM = 8;
// Bytes of one converted weight panel.
inline constexpr size_t kPanelBytes = size_t{64} << 20;

struct MatmulPlan {
  MatmulPath path = MatmulPath::kGemm;
  DType operand = DType::kF32;  // f32, f16 or bf16
  bool convert_x = false;       // x rounded to `operand` into the workspace: [m, k], row stride k
  int64_t panel_rows = 0;       // kGemmPanels: weight rows per panel
  size_t x_bytes = 0;           // workspace of the converted x (aligned)
  size_t panel_bytes = 0;       // workspace of one panel (aligned)
  size_t workspace_bytes() const { return x_bytes + panel_bytes; }
};

// kUnsupported for a weight dtype that is not f32, f16, bf16 or quantized,
// or a compute dtype other than f32 / bf16; kInvalidArgument for negative
// sizes or k not a whole number of W's blocks.
Status plan_matmul(DType w_dtype, DType compute, int64_t m, int64_t n, int64_t k, MatmulPlan* plan);

// Fused kernel: warps per block; one warp computes one output column (one W row).
inline constexpr int kGemvWarps = 8;

// ---- paged attention ----
//
// Sequences with one new token (decode) are computed by
// attention_kernel in key-split mode: grid (n_seq, n_kv_head, decode_splits);
// split z covers split_keys(len, decode_splits, z) and its kAttnWarps warps
// take the key tiles of that range in turn, then merge their states; with
// more than one split each writes a partial (m, l, o) and
// attention_merge_kernel combines them. Sequences with several new tokens
// (prefill, chunked prefill) are computed in row mode: grid (n_seq,
// n_kv_head, prefill_splits); each warp owns chunks of
// attn_rows_per_warp(head_dim) query rows (row = token * group + head in
// group), chunk c going to warp c % kAttnWarps of block (c / kAttnWarps) %
// prefill_splits, and folds every key up to its last row's causal limit. No
// score matrix is stored.
inline constexpr int kAttnWarps = 4;
inline constexpr int kAttnKeyTile = 32;  // keys scored per online-softmax fold (one per lane)
inline constexpr int64_t kMaxDecodeSplits = 32;
inline constexpr int64_t kMaxPrefillSplits = 64;
// Blocks per SM the split counts aim for.
inline constexpr int64_t kAttnBlocksPerSm = 4;

constexpr int attn_rows_per_warp(int64_t head_dim) {
  return head_dim <= 128 ? 8 : 4;
}

struct AttentionPlan {
  int64_t n_seq = 0;
  int64_t n_head = 0;
  int64_t head_dim = 0;
  int64_t decode_splits = 1;
  int64_t prefill_splits = 1;
  // Decode partials when decode_splits > 1: (m, l) pairs
  // [n_seq, n_head, decode_splits, 2] then o [n_seq, n_head, decode_splits, head_dim], f32.
  size_t partial_bytes = 0;
  size_t partial_ml_floats() const {
    return static_cast<size_t>(n_seq * n_head * decode_splits * 2);
  }
};

// n_sm: multiprocessors of the device (>= 1).
AttentionPlan plan_attention(int64_t n_seq, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                             int n_sm);

// Keys [*begin, *end) of split z of n_splits over len keys: equal shares
// rounded up to whole tiles of `tile` keys, so trailing splits may be empty
// (*begin == *end == len). Splits are disjoint and cover [0, len).
STRATA_HD void split_keys(int64_t len, int64_t n_splits, int64_t z, int64_t tile, int64_t* begin,
                          int64_t* end) {
  const int64_t share = (len + n_splits - 1) / n_splits;
  const int64_t chunk = (share + tile - 1) / tile * tile;
  int64_t b = z * chunk;
  int64_t e = b + chunk;
  if (b > len) b = len;
  if (e > len) e = len;
  *begin = b;
  *end = e;
}

}  // namespace strata::cuda
