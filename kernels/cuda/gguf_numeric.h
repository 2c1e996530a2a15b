// The GGUF-only formats (quant/gguf_blocks.h) for the CUDA kernels: the
// values of 16 consecutive elements of a block, and one element of a row,
// with the reference's operations in its order (quant/gguf_dequant_ref.cpp;
// every multiply, add and subtract rounded on its own, as mul_rn / add_rn /
// sub_rn keep them on the device), so the floats are dequantize_row_ref's
// bit for bit for every byte pattern. Blocks are read byte by byte: GGUF
// blocks of 22, 110 or 210 bytes leave their fields at any alignment.
//
// Plain C++ with STRATA_HD functions: tests/kernels/test_cuda_host.cpp runs
// them on the CPU against the reference.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/numeric.h"
#include "quant/gguf_blocks.h"

namespace strata::cuda {

inline constexpr int kGgufChunk = 16;  // every GGUF group is a multiple of 16 values

STRATA_HD constexpr bool is_gguf(DType t) {
  return dtype_info_constexpr(t).dequant_only;
}

STRATA_HD uint16_t gguf_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
STRATA_HD uint32_t gguf_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
STRATA_HD float gguf_f16(const uint8_t* p) {
  return f16_to_f32(gguf_u16(p));
}

// Values c * 16 .. c * 16 + 15 of the block at b into w.
template <DType T>
STRATA_HD void gguf_chunk(const uint8_t* b, int c, float* w) {
  const int e0 = c * kGgufChunk;
  if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1) {
    // d [m] qh[4] qs[16]: value e the nibble e % 16 of qs (high ones from
    // e = 16), bit e of qh its fifth bit.
    constexpr int kQh = T == DType::kQ5_0 ? 2 : 4;
    const float d = gguf_f16(b);
    const uint32_t qh = gguf_u32(b + kQh);
    const uint8_t* qs = b + kQh + 4;
    for (int i = 0; i < kGgufChunk; ++i) {
      const int e = e0 + i;
      const int q = (e < 16 ? qs[e] & 0x0F : qs[e - 16] >> 4) | (((qh >> e) & 1) << 4);
      if constexpr (T == DType::kQ5_0) {
        w[i] = mul_rn(static_cast<float>(q - 16), d);
      } else {
        w[i] = add_rn(mul_rn(static_cast<float>(q), d), gguf_f16(b + 2));
      }
    }
  } else if constexpr (T == DType::kQ2_K) {
    // scales[16] qs[64] d dmin; chunk c is sub-block c.
    const int sc = b[c];
    const float dl = mul_rn(gguf_f16(b + 80), static_cast<float>(sc & 0xF));
    const float ml = mul_rn(gguf_f16(b + 82), static_cast<float>(sc >> 4));
    for (int i = 0; i < kGgufChunk; ++i) {
      const int e = e0 + i;
      const int q = (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      w[i] = sub_rn(mul_rn(dl, static_cast<float>(q)), ml);
    }
  } else if constexpr (T == DType::kQ3_K) {
    // hmask[32] qs[64] scales[12] d; chunk c is sub-block c.
    const float dl = mul_rn(gguf_f16(b + 108), static_cast<float>(q3_k_scale(c, b + 96) - 32));
    for (int i = 0; i < kGgufChunk; ++i) {
      const int e = e0 + i;
      const int low = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const int v = low - (((b[e % 32] >> (e / 32)) & 1) ? 0 : 4);
      w[i] = mul_rn(dl, static_cast<float>(v));
    }
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    // d dmin scales[12] [qh[32]] qs[128]; sub-block g = c / 2 of 32 values:
    // nibble (g % 2) of qs[32 (g / 2) + l], Q5_K's fifth bit g of qh[l].
    constexpr int kQs = T == DType::kQ4_K ? 16 : 48;
    const int g = c / 2;
    uint8_t sc = 0, mn = 0;
    kquant_scale_min(g, b + 4, &sc, &mn);
    const float d1 = mul_rn(gguf_f16(b), static_cast<float>(sc));
    const float m1 = mul_rn(gguf_f16(b + 2), static_cast<float>(mn));
    for (int i = 0; i < kGgufChunk; ++i) {
      const int l = (e0 + i) % 32;
      int q = (b[kQs + 32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF;
      if constexpr (T == DType::kQ5_K) q += ((b[16 + l] >> g) & 1) ? 16 : 0;
      w[i] = sub_rn(mul_rn(d1, static_cast<float>(q)), m1);
    }
  } else if constexpr (T == DType::kQ6_K) {
    // ql[128] qh[64] scales[16] (int8) d; chunk c is sub-block c. Value
    // 128 h + 32 i + l: nibble i / 2 of ql[64 h + 32 (i % 2) + l], bits 2i,
    // 2i + 1 of qh[32 h + l].
    const float dl = mul_rn(gguf_f16(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + c])));
    for (int k = 0; k < kGgufChunk; ++k) {
      const int e = e0 + k, h = e / 128, i = (e % 128) / 32, l = e % 32;
      const int lo = (b[64 * h + 32 * (i % 2) + l] >> (4 * (i / 2))) & 0xF;
      const int hi = (b[128 + 32 * h + l] >> (2 * i)) & 3;
      w[k] = mul_rn(dl, static_cast<float>((lo | (hi << 4)) - 32));
    }
  } else {
    static_assert(T == DType::kQ8_K, "not a GGUF-only format");
    const float d = bits_to_f32(gguf_u32(b));
    for (int i = 0; i < kGgufChunk; ++i) {
      w[i] = mul_rn(d, static_cast<float>(static_cast<int8_t>(b[4 + e0 + i])));
    }
  }
}

// Element j of a row of format T (row: its first block).
template <DType T>
STRATA_HD float gguf_value(const void* row, int64_t j) {
  constexpr DTypeInfo kInfo = dtype_info_constexpr(T);
  const auto* b = static_cast<const uint8_t*>(row) + (j / kInfo.block_elems) * kInfo.block_bytes;
  const int e = static_cast<int>(j % kInfo.block_elems);
  float w[kGgufChunk];
  gguf_chunk<T>(b, e / kGgufChunk, w);
  return w[e % kGgufChunk];
}

template <DType T>
struct LoadGguf {
  static constexpr DType kDType = T;
  STRATA_HD float operator()(const void* row, int64_t j) const { return gguf_value<T>(row, j); }
};

}  // namespace strata::cuda
