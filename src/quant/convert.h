// Row converters between f32 and the 16-bit float formats, vectorised (F16C,
// AVX-512) and bit-identical to the scalar conversions of core/dtype.h for
// every input, NaN payloads included: f16 -> f32 exact (a signalling NaN stays
// signalling), f32 -> f16 and f32 -> bf16 round to nearest even, NaN -> a quiet
// NaN as core makes it. Also the widening of a row of any element type to f32
// or bf16, which the CPU kernels use to convert weights per layer.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace strata {

// x: [n] -> y: [n], any n >= 0.
void f16_to_f32_row(const uint16_t* x, float* y, int64_t n);
void f32_to_f16_row(const float* x, uint16_t* y, int64_t n);
void bf16_to_f32_row(const uint16_t* x, float* y, int64_t n);
void f32_to_bf16_row(const float* x, uint16_t* y, int64_t n);

// A row of n values of type t (f32, f16, bf16 or quantized; n a multiple of
// the group for quantized types) widened to f32 or rounded to bf16. f16 ->
// bf16 goes through f32 exactly, so it is rounded once. Other types are a
// broken invariant (asserted).
void row_to_f32(DType t, const void* x, float* y, int64_t n);
void row_to_bf16(DType t, const void* x, uint16_t* y, int64_t n);

}  // namespace strata
