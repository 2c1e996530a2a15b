// A quantized weight row as the int8 matmul (matmul_int8.h) multiplies it:
// unsigned integers u, c = u - bias the stored integer, and per group of G
// values a scale dw and a minimum mw, so that w = dw * c + mw exactly as quant
// dequantizes it. Strata's block formats (quant/blocks.h) hold one group per
// block; the GGUF-only formats (quant/gguf_integers.h) a super-block of
// several: Q4_K / Q5_K eight groups of 32, Q2_K / Q3_K / Q6_K sixteen of 16.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

struct WeightFormat {
  DType dtype = DType::kCount;
  int64_t group = 0;        // G: values per scale, the activations' group too
  int64_t block_elems = 0;  // values per block: G, or 256 for the K-quants
  int64_t block_bytes = 0;
  bool gguf = false;      // a GGUF-only format: unpacked by quant/gguf_integers.h
  bool nibbles = false;   // Q4 and Q5_0 / Q5_1: low nibbles, then high nibbles
  int64_t qs_off = 0;     // Strata formats, Q5_0 / Q5_1: where the quantized bytes start
  int64_t qh_off = -1;    // Q5_0 / Q5_1: the 32 fifth bits (bit e of 4 bytes, value e)
  bool has_min = false;   // asymmetric: a minimum per group
  bool signed_q = false;  // Q8S: q int8
  int32_t bias = 0;       // c = u - bias for the unsigned u the kernel multiplies

  int64_t groups_per_block() const { return block_elems / group; }
};

// t: one matmul_int8_ok accepts (matmul_int8.h).
WeightFormat weight_format(DType t);

// One block: u [block_elems], dw and mw [groups_per_block()] (mw 0 when
// symmetric). Scalar code.
void unpack_block(const WeightFormat& f, const uint8_t* block, uint8_t* u, float* dw, float* mw);

// A row of k values with SSE2 and F16C (the x86 kernels' unpacker): its
// bytes into u [k], each group's scale and minimum into dw and mw, `stride`
// floats apart. minus_128: the 8-bit formats' bytes as u - 128 (int8 bits)
// instead of u; the 4- to 6-bit formats always give u.
void unpack_row_x86(const WeightFormat& f, const uint8_t* row, int64_t k, uint8_t* u, float* dw,
                    float* mw, int64_t stride, bool minus_128);

}  // namespace strata::cpu
