// Reference (scalar, element by element) quantizers and dequantizers of the
// group-wise formats of quant/blocks.h. These functions are the definition of
// the formats' arithmetic: the fast paths in quant/quant.h must produce the
// same bytes and the same floats, bit for bit. Rows are n values, n a multiple
// of the format's group size G; each group of G consecutive values is one block.
//
// Quantizing one group x[0..G) (all arithmetic in f32, no fused multiply-add;
// f16(v) is f32_to_f16 of core/dtype.h, round to nearest even):
//
//   Q8S<G> (== ggml quantize_row_q8_0_ref for G = 32):
//     amax = max |x|; d = amax / 127; id = 1/d; q = roundf(x*id) (half away
//     from zero), clamped to [-127, 127]; stored d = f16(d).
//   Q4S32 (== ggml quantize_row_q4_0_ref):
//     max = the first x of largest |x| (+0 when all are zero); d = max / -8;
//     id = 1/d; q = trunc(x*id + 8.5), clamped to [0, 15]; stored d = f16(d).
//   Q8A<G>, Q4A<G> (L = 255 or 15; == ggml quantize_row_q4_1_ref for Q4A32):
//     min, max of the group (a zero of either sign counts as +0); d =
//     (max - min) / L; id = 1/d; q = trunc((x - min)*id + 0.5), clamped to
//     [0, L]; stored d = f16(d), m = f16(min).
//   id is 0 when d is 0 or when 1/d overflows (d is then far below the
//   smallest f16 and is stored as 0).
//
// Special groups (the only places where bytes may differ from ggml's):
//   - Constant groups. A group whose values all equal v dequantizes to exactly
//     f16(v): v itself when v is an f16 value, else the f16 nearest to v (the
//     precision of the stored scale and minimum; no format here can do better
//     for every v). Asymmetric formats get this from the rule above (d = 0,
//     q = 0, m = f16(v)); symmetric formats store d = f16(v) with q = 1 (Q8S)
//     or q - 8 = 1 (Q4S) when v != 0 and f16(v) is finite. All-zero groups are
//     d = 0, q = 0 (+ m = 0) in every format.
//   - Non-finite input. A group containing a NaN or an infinity is stored with
//     d = m = f16 NaN and q = 0, so every value of that group dequantizes to
//     NaN: a non-finite input is never turned into a plausible finite number.
//   - Large magnitudes. The scale and minimum are f16, so a format reaches
//     |x| <= 127*65504 (Q8S), 8*65504 (Q4S), and [-65504, 65504 + L*65504]
//     (asymmetric). When f16(d) or f16(min) would overflow, the stored value
//     saturates to +-65504 and q is computed against the stored values
//     (asymmetric: base = stored m, d = (max - base)/L, saturated too), so
//     finite input always dequantizes to finite output, clipped to the
//     format's range.
//
// Dequantizing is x = d*q (Q8S), d*(q-8) (Q4S), d*q + m (asymmetric), as a
// multiply then an add in f32, with d and m widened from f16 exactly. Any
// block bytes are valid input (a NaN or Inf scale simply propagates).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace strata {

// x: [n] floats; y: row_bytes(t, n) bytes. t quantized, n % G == 0 (asserted).
void quantize_row_ref(DType t, const float* x, void* y, int64_t n);

// x: row_bytes(t, n) bytes; y: [n] floats.
void dequantize_row_ref(DType t, const void* x, float* y, int64_t n);

// As dequantize_row_ref, each value then rounded to bf16 (f32_to_bf16, round
// to nearest even). y: [n] bf16 bit patterns.
void dequantize_row_bf16_ref(DType t, const void* x, uint16_t* y, int64_t n);

}  // namespace strata
