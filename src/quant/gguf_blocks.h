// The GGUF-only formats (dtype_info(t).dequant_only): their block layouts,
// byte for byte GGUF's (ggml-common.h), and their dequantization, element
// for element gguf-py's (gguf.quants) and ggml's dequantize_row_* (scalar
// f32 arithmetic in the order written below, no fused multiply-adds).
// Strata reads these formats from model files and never writes them.
//
//   Q5_0  32 values: d (f16), qh (32 high bits), qs (low nibbles as Q4_0):
//         x = (q - 16) * d, q = nibble | high bit << 4
//   Q5_1  as Q5_0 with a minimum m (f16): x = q * d + m
//   Q2_K  256 values, 16 sub-blocks of 16: scales[16] (low nibble scale, high
//         nibble min), qs 2 bits each, d and dmin (f16):
//         x = (d * sc) * q - (dmin * mn)
//   Q3_K  256 values, 16 sub-blocks of 16: hmask (the third bit), qs (two
//         low bits), 6-bit scales packed in 12 bytes, d (f16):
//         x = (d * (sc - 32)) * (q - (high bit ? 0 : 4))
//   Q4_K  256 values, 8 sub-blocks of 32: d, dmin (f16), 6-bit scales and
//         mins packed in 12 bytes, qs nibbles: x = (d * sc) * q - (dmin * mn)
//   Q5_K  as Q4_K with a fifth bit per value in qh
//   Q6_K  256 values, 16 sub-blocks of 16: ql (low nibbles), qh (two high
//         bits), int8 scales[16], d (f16): x = (d * sc) * (q - 32)
//   Q8_K  256 values: d (f32), qs int8[256], bsums (unused here): x = d * q
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"

namespace strata {

inline constexpr int kQK_K = 256;

struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

namespace detail {
template <typename B>
constexpr bool gguf_block_ok(DType t) {
  return sizeof(B) == static_cast<size_t>(dtype_info_constexpr(t).block_bytes) &&
         std::is_trivially_copyable_v<B> && std::is_standard_layout_v<B>;
}
}  // namespace detail
static_assert(detail::gguf_block_ok<BlockQ5_0>(DType::kQ5_0), "q5_0 block layout");
static_assert(detail::gguf_block_ok<BlockQ5_1>(DType::kQ5_1), "q5_1 block layout");
static_assert(detail::gguf_block_ok<BlockQ2_K>(DType::kQ2_K), "q2_k block layout");
static_assert(detail::gguf_block_ok<BlockQ3_K>(DType::kQ3_K), "q3_k block layout");
static_assert(detail::gguf_block_ok<BlockQ4_K>(DType::kQ4_K), "q4_k block layout");
static_assert(detail::gguf_block_ok<BlockQ5_K>(DType::kQ5_K), "q5_k block layout");
static_assert(detail::gguf_block_ok<BlockQ6_K>(DType::kQ6_K), "q6_k block layout");
static_assert(detail::gguf_block_ok<BlockQ8_K>(DType::kQ8_K), "q8_k block layout");

// A block of type B copied from p (any alignment).
template <typename B>
B load_block(const uint8_t* p) {
  B b;
  std::memcpy(&b, p, sizeof(B));
  return b;
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12
// packed bytes (ggml's get_scale_min_k4).
// constexpr, so that the CUDA kernels (kernels/cuda/gguf_numeric.h, built
// with --expt-relaxed-constexpr) call it too.
constexpr void kquant_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K: the 6-bit scale of sub-block g (0..15) from the 12 packed bytes s:
// its low nibble from bytes 0..7, its two high bits from bytes 8..11.
// (constexpr: the CUDA kernels call it too.)
constexpr int q3_k_scale(int g, const uint8_t* s) {
  const int lo = g < 8 ? s[g] & 0xF : s[g - 8] >> 4;
  const int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
  return lo | (hi << 4);
}

// Q4_K / Q5_K: sub-block j's scale and minimum products, d * sc and dmin * mn
// (what every value of the sub-block is multiplied by and has subtracted).
struct KQuantSubBlock {
  float d, m;
};
inline KQuantSubBlock kquant_sub_block(int j, const uint8_t* scales, float d, float dmin) {
  uint8_t sc, mn;
  kquant_scale_min(j, scales, &sc, &mn);
  return {d * static_cast<float>(sc), dmin * static_cast<float>(mn)};
}

// Reference dequantization of a row of a GGUF-only format. x: row_bytes(t,
// n) bytes at any address; y: [n] floats; n a multiple of the block size.
void dequantize_gguf_row_ref(DType t, const void* x, float* y, int64_t n);

}  // namespace strata
