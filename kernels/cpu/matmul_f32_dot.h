// The CPU matmul for a few rows of x (decode at small batches) with AVX2 and
// FMA, in f32: strips of kF32DotRows weight rows are widened to f32 in
// L1-sized chunks by quant's own dequantizers (row_to_f32: every weight
// dtype, the same values every other path multiplies), then multiplied into
// every row of x by a register-blocked FMA micro-kernel (3 rows of x x 4
// weight rows, 8 lanes). Each weight row is read from memory once per call,
// nothing the size of a weight panel is written, and no GEMM library call is
// made: that is what the panel + oneDNN path costs most at m = 1..8 (measured
// 4.8x the memory bound at m = 1 on an AVX2 CPU).
//
// Arithmetic:
//   ComputeType::kF32: y[i, j] = bias[j] + sum_e x[i, e] * w[j, e], f32 with
//     fused multiply-adds, 8 partial sums (e mod 8) added up at the end of the
//     row. The order depends only on k, never on m, n, the threads or the
//     tiling, so a row of y has the same bits in any batch this kernel serves.
//   ComputeType::kBF16 on CPUs without bf16 products: x and the widened W
//     rounded to bf16 first (nearest even, as core's f32_to_bf16), then the
//     same f32 sums: the products are exact, as they are in vdpbf16ps.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/weight_parts.h"
#include "kernels/status.h"

namespace strata::cpu {

// Rows of x this kernel takes (more go to the GEMM paths). Measured on a
// 2-core AVX2 EPYC against the panel + oneDNN path: faster up to 24 rows on
// the demo model's decode products (m = 12: 30 against 40 ms, Q4_1), even at
// 28-32, and 10% faster at 16 and 32 on a 3.2 GB f16 model's decode step.
inline constexpr int64_t kF32DotMaxM = 32;
// Weight rows per strip (one unit of work).
inline constexpr int64_t kF32DotRows = 4;

// Whether the kernel runs here: AVX2 + FMA + F16C and 1 <= m <= kF32DotMaxM
// (every weight dtype row_to_f32 reads).
bool matmul_f32_dot_ok(int64_t m);

// Bytes of workspace: x copied with its rows padded to whole vectors (and
// rounded to bf16 when asked).
size_t matmul_f32_dot_ws_bytes(int64_t m, int64_t k);

// y: [m, sum of the parts' n] f32 (row stride y_stride), each part's
// columns after the previous part's (weight_parts.h); x: [m, k] f32 (row
// stride x_stride); each part's W: [n, k] in its dtype; round_bf16: the kBF16
// arithmetic above; ws: matmul_f32_dot_ws_bytes(m, k) bytes, 32-byte aligned.
// Arguments are checked by matmul.
Status matmul_f32_dot(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                      WeightParts parts, int64_t m, int64_t k, bool round_bf16, void* ws,
                      int n_threads);

}  // namespace strata::cpu
