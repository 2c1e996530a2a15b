// The int8 matmul (matmul_int8.h) on CPUs with AVX2 but without
// AVX512-VNNI. Internal to kernels/cpu.
//
// The integers and the float steps are the portable loops': per group the
// exact sums S = sum u * qx (vpmaddubsw + vpmaddwd, which cannot saturate on
// these operands, see below) and T (from the quantized x), then
//   f = float(S) * dw;  f = fma(mw, float(T), f)  (asymmetric),
//   f = float(S - bias * T) * dw                  (symmetric),
//   acc = fma(f, dx, acc) group by group;  y = acc (+ bias),
// one weight row per lane, so every element has the portable loops' bits.
//
// Work: strips of 8 weight rows, split statically over the threads. Each
// strip's rows are unpacked once per call into a small buffer (8 rows of k
// bytes and the groups' scales, L1/L2), read once per row of x. vpmaddubsw
// multiplies unsigned by signed bytes and adds pairs into 16 bits: exact for
// the unsigned integers below 128 (every 4- to 6-bit format: 2 x 63 x 127 <
// 2^15); the 8-bit formats are stored as u - 128 (signed) and multiplied as
// |u - 128| by qx with u - 128's sign (2 x 128 x 127 < 2^15), and 128 T is
// added back.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/weight_parts.h"

namespace strata::cpu {

struct WeightFormat;

// Whether the kernel runs here: AVX2 + FMA + F16C.
bool matmul_int8_avx2_ok();

// Bytes of one thread's workspace for rows of k values in groups of `group`.
size_t matmul_int8_avx2_ws_bytes(int64_t k, int64_t group);

// y: [m, sum of the parts' n] f32, row stride y_stride, each part's columns
// after the previous part's; each part's W: [n, k] in format f; qx, dx, t: x
// quantized by quantize_row_int8 ([m, k], [m, k / G], [m, k / G]: t the plain
// sums); ws: n_threads buffers of matmul_int8_avx2_ws_bytes(k, G), 32-byte
// aligned.
void matmul_int8_avx2(float* y, int64_t y_stride, const WeightFormat& f, WeightParts parts,
                      int64_t m, int64_t k, const int8_t* qx, const float* dx, const int32_t* t,
                      void* const* ws, int n_threads);

}  // namespace strata::cpu
