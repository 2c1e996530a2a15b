// The CPU matmul in bf16 for a few rows of x (decode at small batches): a
// fused dequantize + dot kernel with AVX512_BF16. Each weight row is read
// once, widened 32 elements at a time in registers exactly as quant's
// reference dequantizer widens it (d * q, then + m, in f32), rounded to bf16
// with vcvtne2ps2bf16 and multiplied into every row of x (rounded to bf16
// once per call) with vdpbf16ps; 16 lanes of f32 partial sums per (row of x,
// weight row) are added up at the end of the weight row. Nothing the size of
// a weight panel is written, and no GEMM library call is made, which is what
// costs most at m = 1..8.
//
// The arithmetic is ComputeType::kBF16's (kernels/cpu/matmul.h): x and W
// rounded to bf16, products exact in f32, f32 sums (in another order than a
// GEMM's, covered by the same bound), subnormal products flushed as
// vdpbf16ps does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/weight_parts.h"
#include "kernels/status.h"

namespace strata::cpu {

// Rows of x this kernel takes (more go to the GEMM paths): up to
// kBf16DotNarrowM two weight rows at a time; beyond, the same for each tile
// of 8 rows of x, up to kBf16DotMaxM, or (K-quant weights) one weight row at
// a time against 12 or kBf16DotWideM rows of x (the missing ones zero), up to
// kBf16DotWideM. Each element gets the same products and sums either way, so
// a row of y has the same bits in any batch this kernel serves.
inline constexpr int64_t kBf16DotNarrowM = 8;
inline constexpr int64_t kBf16DotWideM = 16;
inline constexpr int64_t kBf16DotMaxM = 32;  // K-quant weights: kBf16DotWideM

// Whether the kernel runs here: AVX512_BF16, m <= kBf16DotMaxM, and W in
// f32, f16, bf16 or a quantized format.
bool matmul_bf16_dot_ok(DType w_dtype, int64_t m);

// Bytes of workspace: x rounded to bf16.
size_t matmul_bf16_dot_ws_bytes(int64_t m, int64_t k);

// y: [m, sum of the parts' n] f32 (row stride y_stride), each part's
// columns after the previous part's (weight_parts.h); x: [m, k] f32 (row
// stride x_stride); each part's W: [n, k] in its dtype; ws:
// matmul_bf16_dot_ws_bytes(m, k) bytes, 64-byte aligned. Arguments are
// checked by matmul.
Status matmul_bf16_dot(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                       WeightParts parts, int64_t m, int64_t k, void* ws, int n_threads);

}  // namespace strata::cpu
