// The matrix product of a linear layer on the CPU: y = x . W^T (+ bias), with
// x and y in f32 and W stored as f32, f16, bf16 or any quantized DType. The
// product is computed in f32 or in bf16 (x and W rounded to bf16, f32
// accumulation); the GEMM itself is oneDNN's.
//
// W is never converted as a whole: each thread converts (or dequantizes) a
// panel of W rows small enough to stay in its L2 cache and multiplies it
// right away, so a decode step reads every weight byte once from memory and
// writes no full-size converted copy. Two shapes of call:
//   m >= swap_min_m the panel is the GEMM's left operand ([pn, k] row-major,
//                   as dequantized) and x the right one, packed once per call
//                   into oneDNN's blocked layout; the [pn, m] result is
//                   transposed into y. No repacking of weights at all.
//   m <  swap_min_m x is the left operand and the panel the right one of an
//                   m-agnostic (runtime-M) oneDNN primitive writing y directly.
// Primitives and workspaces live in a MatmulCache the caller owns and keeps
// across calls (one per host thread that calls matmul concurrently). The
// swapped path's primitives have fixed sizes, because oneDNN 2.6 serves a
// runtime M only with its generic gemm, not with the faster brgemm: tokens go
// in tiles of at most 64, so a weight shape needs at most 64 tile widths x 2
// panel heights, each created once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "kernels/cpu/weight_parts.h"
#include "kernels/status.h"

namespace strata::cpu {

enum class ComputeType : uint8_t {
  kF32,   // x and W in f32
  kBF16,  // x and W rounded to bf16 (nearest even), products accumulated in f32
  kInt8,  // quantized W: x quantized to int8 per weight group, integer products per
          // group (kernels/cpu/matmul_int8.h); W in f32/f16/bf16 or Q8_K: as kBF16
};

// Token count from which the weight panel becomes the GEMM's left operand
// (measured crossover of the two paths on Zen 4: about 8 tokens in bf16, 12
// in f32; below it the runtime-M path is faster).
inline constexpr int64_t swap_min_m(ComputeType c) {
  return c == ComputeType::kF32 ? 12 : 8;
}

// Whether this CPU multiplies bf16 operands natively (AVX-512, through
// oneDNN or vdpbf16ps); elsewhere ComputeType::kBF16 rounds x and W to bf16
// and multiplies in f32, the same arithmetic up to the order of the sums.
bool native_bf16_products();

class MatmulCache {
 public:
  MatmulCache();
  ~MatmulCache();
  MatmulCache(const MatmulCache&) = delete;
  MatmulCache& operator=(const MatmulCache&) = delete;

  // Grows the workspaces for products up to [max_m, k] x [n, k]^T. Optional:
  // matmul grows them on demand. Either way a call allocates only on the
  // first use of a shape (its oneDNN primitives and their scratchpads);
  // repeating a shape allocates nothing.
  Status reserve(int64_t max_m, int64_t n, int64_t k, ComputeType compute);

  size_t workspace_bytes() const;  // bytes held by the workspaces
  size_t n_primitives() const;     // oneDNN primitives created so far

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// y: [m, n] f32, row stride y_stride (>= n); not overlapping x or W
// x: [m, k] f32, row stride x_stride (>= k)
// w: [n, k] in w_dtype, row stride w_row_bytes (>= row_bytes(w_dtype, k));
//    k a multiple of w_dtype's block size
// bias: [n] f32 or null
Status matmul(MatmulCache& cache, float* y, int64_t y_stride, const float* x, int64_t x_stride,
              const void* w, DType w_dtype, size_t w_row_bytes, const float* bias, int64_t m,
              int64_t n, int64_t k, ComputeType compute);

// Several weights against the same x in one call (kernels/cpu/weight_parts.h):
// part p's products in y's columns from the sum of the earlier parts' n on,
// each part's y, W and bias as in matmul. The same bits as one matmul per
// part; the decode kernels split the rows of all parts over one team when
// the parts share a dtype.
Status matmul_parts(MatmulCache& cache, float* y, int64_t y_stride, const float* x,
                    int64_t x_stride, WeightParts parts, int64_t m, int64_t k, ComputeType compute);

// Scalar definition: W dequantized by quant's reference dequantizer, operands
// rounded as `compute` says, products summed in double; kInt8 with W of a type
// matmul_int8_ok accepts: matmul_int8_ref.
Status matmul_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, const void* w,
                  DType w_dtype, size_t w_row_bytes, const float* bias, int64_t m, int64_t n,
                  int64_t k, ComputeType compute);

}  // namespace strata::cpu
