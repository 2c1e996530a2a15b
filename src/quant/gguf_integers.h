// The GGUF-only formats (gguf_blocks.h) as small unsigned integers u and
// per-group scales: the form the vector dequantizers and the int8 matmul
// (kernels/cpu/matmul_int8.h) read. Value e of a block, g = e / group:
//   symmetric formats:      x = dw[g] * float(u[e] - bias)
//   formats with a minimum: x = dw[g] * float(u[e]) + mw[g]
// with dw and mw the reference's own products (gguf_dequant_ref.cpp), mw the
// negated minimum product where the reference subtracts it, so for finite
// scales x is dequantize_gguf_row_ref's value bit for bit.
//
//   format  group  u        bias  dw             mw
//   Q5_0    32     0..31    16    d              -
//   Q5_1    32     0..31    -     d              m
//   Q2_K    16     0..3     -     d * sc         -(dmin * mn)
//   Q3_K    16     0..7     4     d * (sc - 32)  -
//   Q4_K    32     0..15    -     d * sc         -(dmin * mn)
//   Q5_K    32     0..31    -     d * sc         -(dmin * mn)
//   Q6_K    16     0..63    32    d * sc         -
//   Q8_K    256    0..255   128   d              -      (u = q + 128)
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace strata {

struct GgufIntegers {
  int64_t group = 0;  // values per scale
  int32_t bias = 0;   // symmetric formats: the integer is u - bias
  bool has_min = false;
};

// t: a GGUF-only format (dtype_info(t).dequant_only).
GgufIntegers gguf_integers(DType t);

// One block of t at any address: u [block_elems], dw and mw [block_elems /
// group] (mw all 0 for the symmetric formats).
void gguf_unpack_block_ref(DType t, const uint8_t* block, uint8_t* u, float* dw, float* mw);

// The same bytes and floats; 16 values per SSE2 instruction for Q5_0, Q5_1,
// Q4_K, Q5_K and Q6_K (what Q4_K_M / Q5_K_M / Q6_K files hold), the reference
// for the others.
void gguf_unpack_block(DType t, const uint8_t* block, uint8_t* u, float* dw, float* mw);

}  // namespace strata
