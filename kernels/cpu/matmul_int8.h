// The int8 compute type of the CPU matmul (ComputeType::kInt8) for weights in
// a group-wise quantized format (quant/blocks.h, and the GGUF-only formats
// but Q8_K, quant/gguf_integers.h): integer dot products per group, as
// llama.cpp's q4_1 x q8_1 and q4_K x q8_K dots do, instead of dequantizing W.
//
// Arithmetic (the definition; matmul_int8_ref is it in scalar code):
//   1. Each row of x is quantized per group of G values, G the weight's group
//      size (quantize_row_int8_ref below): x ~ dx * qx, qx int8 in [-127, 127].
//   2. Each weight element is its stored integer c and its group's scale dw
//      and minimum mw, so that w = dw * c + mw exactly as quant dequantizes it
//      (int8_weight_format.h): Q8S c = q, Q4S c = q - 8 (mw = 0 for both), Q8A
//      and Q4A c = q; the K-quants' groups are their sub-blocks (G = 32 for
//      Q4_K / Q5_K, 16 for Q2_K / Q3_K / Q6_K) with dw = d * sc, mw the
//      negated dmin * mn where they have one.
//   3. Per group g: S_g = sum c * qx and T_g = sum qx, exact integers, and
//        y[i, j] = bias[j] + sum_g dx_g * (dw_g * S_g + mw_g * T_g)
//      The fast path evaluates the sum in f32, group by group in order:
//        f = float(S_g) * dw_g;  f = fma(mw_g, float(T_g), f)  (asymmetric only);
//        acc = fma(f, dx_g, acc);  y = acc + bias
//      so it is deterministic (independent of threads and tiling) and the
//      portable loops, the AVX2 kernel and the AVX512-VNNI kernel give the
//      same bits. The reference sums in double.
// The rounding of x to int8 (relative error up to 1/254 of the group's largest
// |x|) is what this mode trades for speed; the tests bound its effect.
//
// Kernel with AVX512-VNNI: panels of 32 weight rows are unpacked per call into
// an L2-resident buffer laid out for vpdpbusd ([k/4 steps][2 x 16 rows][4
// bytes] unsigned, Q8S shifted by 128, with the per-group scales beside), then
// multiplied by tiles of up to 6 rows of quantized x with 32-bit integer
// accumulation per group. With AVX2 only: strips of 8 weight rows, one per
// lane (matmul_int8_avx2.h). Nothing the size of W is written.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/weight_parts.h"
#include "kernels/status.h"

namespace strata::cpu {

// Activation quantization of one row, group by group, all in f32:
//   amax = max |x| of the group;
//   a group holding a NaN or an infinity: dx = NaN, every qx = 0 (its
//   products become NaN, as they are in f32 compute);
//   amax < kInt8TinyGroup: dx = 0, every qx = 0;
//   otherwise dx = amax / 127, id = 127 / amax, qx = nearbyint(x * id) (round
//   half to even), clamped to [-127, 127].
//   sum = sum of the group's qx.
// x: [k] f32, k a multiple of group; qx: [k]; dx, sum: [k / group]
void quantize_row_int8_ref(const float* x, int64_t k, int64_t group, int8_t* qx, float* dx,
                           int32_t* sum);
// The same, vectorised; bit for bit the reference.
void quantize_row_int8(const float* x, int64_t k, int64_t group, int8_t* qx, float* dx,
                       int32_t* sum);

// Activation groups with max |x| below this quantize to zero.
inline constexpr float kInt8TinyGroup = 0x1p-96f;

// Whether matmul_int8 reads weights of type t (every quantized type but Q8_K).
bool matmul_int8_ok(DType w_dtype);
// G for weights of type t: the values per weight scale, and per activation scale.
int64_t matmul_int8_group(DType w_dtype);

// Whether this CPU runs the int8 kernel with AVX512-VNNI (otherwise the AVX2
// kernel or the portable loops compute the same bits, more slowly).
bool matmul_int8_native();

// Workspace of one call: the quantized rows of x, and per thread one panel.
size_t matmul_int8_x_bytes(int64_t m, int64_t k, int64_t group);
size_t matmul_int8_panel_bytes(int64_t k, int64_t group);

// y: [m, sum of the parts' n] f32 (row stride y_stride), each part's
// columns after the previous part's (weight_parts.h); x: [m, k] f32 (row
// stride x_stride); each part's W: [n, k] quantized, all parts in one dtype
// (x is quantized once for its groups). x_ws: matmul_int8_x_bytes(m, k, G)
// bytes, 64-byte aligned; panels: n_threads buffers of
// matmul_int8_panel_bytes(k, G), 64-byte aligned. Arguments are checked by
// matmul (kernels/cpu/matmul.h).
Status matmul_int8(float* y, int64_t y_stride, const float* x, int64_t x_stride, WeightParts parts,
                   int64_t m, int64_t k, void* x_ws, void* const* panels, int n_threads);

// The definition in scalar code: quantize_row_int8_ref, exact integer group
// sums, the sum over groups in double.
void matmul_int8_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, const void* w,
                     DType w_dtype, size_t w_row_bytes, const float* bias, int64_t m, int64_t n,
                     int64_t k);

}  // namespace strata::cpu
