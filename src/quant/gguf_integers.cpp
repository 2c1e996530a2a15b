// The GGUF-only formats as integers and scales (gguf_integers.h): the
// reference reads each value's bits as gguf_dequant_ref.cpp does; the fast
// path does the same with 16 bytes per SSE2 instruction (Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K).
#include "quant/gguf_integers.h"

#include <cstddef>
#include <cstring>

#include "core/error.h"
#include "quant/gguf_blocks.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace strata {
namespace {

// Q5_0 / Q5_1: value j is the low nibble of qs[j] (j < 16) or the high nibble
// of qs[j - 16], with bit j of qh as its fifth bit.
void q5_values(const uint8_t* qs, const uint8_t* qh_bytes, uint8_t* u) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    u[j] = static_cast<uint8_t>((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10));
    u[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
  }
}

// Q2_K / Q3_K: the two low bits of value e = 128 h + 32 j + l (h, j < 4,
// l < 32) are bits 2j, 2j + 1 of qs[32 h + l].
uint8_t low2(const uint8_t* qs, int e) {
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  return static_cast<uint8_t>((qs[32 * h + l] >> (2 * j)) & 3);
}

// Q4_K / Q5_K: the 8 groups' scales d * sc and negated minimums -(dmin * mn)
// from the block's d, dmin (f16) and 12 packed bytes.
void kquant_scales(uint16_t d16, uint16_t dmin16, const uint8_t* scales, float* dw, float* mw) {
  const float d = f16_to_f32(d16), dmin = f16_to_f32(dmin16);
  for (int g = 0; g < 8; ++g) {
    const auto [dg, mg] = kquant_sub_block(g, scales, d, dmin);
    dw[g] = dg;
    mw[g] = -mg;
  }
}

void unpack_ref(DType t, const uint8_t* p, uint8_t* u, float* dw, float* mw) {
  switch (t) {
    case DType::kQ5_0: {
      const auto b = load_block<BlockQ5_0>(p);
      q5_values(b.qs, b.qh, u);
      dw[0] = f16_to_f32(b.d);
      mw[0] = 0.0f;
      return;
    }
    case DType::kQ5_1: {
      const auto b = load_block<BlockQ5_1>(p);
      q5_values(b.qs, b.qh, u);
      dw[0] = f16_to_f32(b.d);
      mw[0] = f16_to_f32(b.m);
      return;
    }
    case DType::kQ2_K: {
      const auto b = load_block<BlockQ2_K>(p);
      const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
      for (int g = 0; g < 16; ++g) {
        dw[g] = d * static_cast<float>(b.scales[g] & 0xF);
        mw[g] = -(dmin * static_cast<float>(b.scales[g] >> 4));
      }
      for (int e = 0; e < kQK_K; ++e) u[e] = low2(b.qs, e);
      return;
    }
    case DType::kQ3_K: {
      const auto b = load_block<BlockQ3_K>(p);
      const float d = f16_to_f32(b.d);
      for (int g = 0; g < 16; ++g) {
        dw[g] = d * static_cast<float>(q3_k_scale(g, b.scales) - 32);
        mw[g] = 0.0f;
      }
      for (int e = 0; e < kQK_K; ++e) {
        // The third bit: bit (e / 32) of hmask[e % 32].
        const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
        u[e] = static_cast<uint8_t>(low2(b.qs, e) | (high << 2));
      }
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      // d dmin scales[12] [qh[32]] qs[128] (BlockQ4_K, BlockQ5_K).
      const bool five = t == DType::kQ5_K;
      const uint8_t* qs = p + (five ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
      const uint8_t* qh = p + offsetof(BlockQ5_K, qh);
      uint16_t d, dmin;
      std::memcpy(&d, p + offsetof(BlockQ4_K, d), 2);
      std::memcpy(&dmin, p + offsetof(BlockQ4_K, dmin), 2);
      kquant_scales(d, dmin, p + offsetof(BlockQ4_K, scales), dw, mw);
      // Sub-block 2c: the low nibbles of qs[32c ..], 2c + 1 the high ones;
      // Q5_K's fifth bit of sub-block g is bit g of qh[e % 32].
      for (int e = 0; e < kQK_K; ++e) {
        const int c = e / 64, hi = (e / 32) % 2, l = e % 32;
        const int q = (qs[32 * c + l] >> (4 * hi)) & 0xF;
        const int fifth = five ? ((qh[l] >> (e / 32)) & 1) << 4 : 0;
        u[e] = static_cast<uint8_t>(q | fifth);
      }
      return;
    }
    case DType::kQ6_K: {
      const auto b = load_block<BlockQ6_K>(p);
      const float d = f16_to_f32(b.d);
      for (int g = 0; g < 16; ++g) {
        dw[g] = d * static_cast<float>(b.scales[g]);
        mw[g] = 0.0f;
      }
      // Value 128 h + 32 i + l (i < 4, l < 32): nibble i / 2 of ql[64 h + 32 (i % 2) + l],
      // high bits 2i, 2i + 1 of qh[32 h + l].
      for (int e = 0; e < kQK_K; ++e) {
        const int h = e / 128, i = (e % 128) / 32, l = e % 32;
        const int lo = (b.ql[64 * h + 32 * (i % 2) + l] >> (4 * (i / 2))) & 0xF;
        const int hi = (b.qh[32 * h + l] >> (2 * i)) & 3;
        u[e] = static_cast<uint8_t>(lo | (hi << 4));
      }
      return;
    }
    case DType::kQ8_K: {
      const auto b = load_block<BlockQ8_K>(p);
      for (int e = 0; e < kQK_K; ++e) u[e] = static_cast<uint8_t>(b.qs[e] ^ 0x80);
      dw[0] = b.d;
      mw[0] = 0.0f;
      return;
    }
    default:
      break;
  }
  STRATA_ASSERT_MSG(false, "{} is not a GGUF-only format", dtype_name(t));
}

#if defined(__x86_64__)

__m128i load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
void store16(uint8_t* p, __m128i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
}

// 16 bits -> 16 bytes, 0x10 where the bit is set.
__m128i fifth_bits(uint32_t bits) {
  const __m128i rep =
      _mm_set_epi64x(static_cast<int64_t>(0x0101010101010101ull * ((bits >> 8) & 0xFF)),
                     static_cast<int64_t>(0x0101010101010101ull * (bits & 0xFF)));
  const __m128i m = _mm_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(rep, m), m), _mm_set1_epi8(0x10));
}

// Q5_0 / Q5_1 values (q5_values) 16 at a time.
void q5_fast(const uint8_t* qs, const uint8_t* qh_bytes, uint8_t* u) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m128i raw = load16(qs), lo4 = _mm_set1_epi8(0x0F);
  store16(u, _mm_or_si128(_mm_and_si128(raw, lo4), fifth_bits(qh)));
  store16(u + 16, _mm_or_si128(_mm_and_si128(_mm_srli_epi16(raw, 4), lo4), fifth_bits(qh >> 16)));
}

void q5_0_fast(const uint8_t* p, uint8_t* u, float* dw, float* mw) {
  const auto b = load_block<BlockQ5_0>(p);
  q5_fast(b.qs, b.qh, u);
  dw[0] = f16_to_f32(b.d);
  mw[0] = 0.0f;
}

void q5_1_fast(const uint8_t* p, uint8_t* u, float* dw, float* mw) {
  const auto b = load_block<BlockQ5_1>(p);
  q5_fast(b.qs, b.qh, u);
  dw[0] = f16_to_f32(b.d);
  mw[0] = f16_to_f32(b.m);
}

void q4_k_fast(const uint8_t* p, uint8_t* u, float* dw, float* mw) {
  const auto b = load_block<BlockQ4_K>(p);
  kquant_scales(b.d, b.dmin, b.scales, dw, mw);
  const __m128i lo4 = _mm_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    for (int h = 0; h < 2; ++h) {
      const __m128i raw = load16(b.qs + 32 * c + 16 * h);
      store16(u + 64 * c + 16 * h, _mm_and_si128(raw, lo4));
      store16(u + 64 * c + 32 + 16 * h, _mm_and_si128(_mm_srli_epi16(raw, 4), lo4));
    }
  }
}

void q5_k_fast(const uint8_t* p, uint8_t* u, float* dw, float* mw) {
  const auto b = load_block<BlockQ5_K>(p);
  kquant_scales(b.d, b.dmin, b.scales, dw, mw);
  const __m128i lo4 = _mm_set1_epi8(0x0F), sixteen = _mm_set1_epi8(16);
  for (int c = 0; c < 4; ++c) {
    const __m128i b1 = _mm_set1_epi8(static_cast<char>(1 << (2 * c)));
    const __m128i b2 = _mm_set1_epi8(static_cast<char>(2 << (2 * c)));
    for (int h = 0; h < 2; ++h) {
      const __m128i raw = load16(b.qs + 32 * c + 16 * h);
      const __m128i qh = load16(b.qh + 16 * h);
      // 16 where the bit is set: (qh & bit) == bit.
      const __m128i f1 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(qh, b1), b1), sixteen);
      const __m128i f2 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(qh, b2), b2), sixteen);
      store16(u + 64 * c + 16 * h, _mm_or_si128(_mm_and_si128(raw, lo4), f1));
      store16(u + 64 * c + 32 + 16 * h,
              _mm_or_si128(_mm_and_si128(_mm_srli_epi16(raw, 4), lo4), f2));
    }
  }
}

void q6_k_fast(const uint8_t* p, uint8_t* u, float* dw, float* mw) {
  const auto b = load_block<BlockQ6_K>(p);
  const float d = f16_to_f32(b.d);
  for (int g = 0; g < 16; ++g) {
    dw[g] = d * static_cast<float>(b.scales[g]);
    mw[g] = 0.0f;
  }
  const __m128i lo4 = _mm_set1_epi8(0x0F), top2 = _mm_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; l += 16) {
      const __m128i a = load16(b.ql + 64 * h + l);
      const __m128i c = load16(b.ql + 64 * h + 32 + l);
      const __m128i qh = load16(b.qh + 32 * h + l);
      // Bits 2i, 2i + 1 of qh moved to bits 4, 5.
      auto high = [&](int i) {
        const __m128i s =
            2 * i >= 4 ? _mm_srli_epi16(qh, 2 * i - 4) : _mm_slli_epi16(qh, 4 - 2 * i);
        return _mm_and_si128(s, top2);
      };
      uint8_t* out = u + 128 * h + l;
      store16(out, _mm_or_si128(_mm_and_si128(a, lo4), high(0)));
      store16(out + 32, _mm_or_si128(_mm_and_si128(c, lo4), high(1)));
      store16(out + 64, _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a, 4), lo4), high(2)));
      store16(out + 96, _mm_or_si128(_mm_and_si128(_mm_srli_epi16(c, 4), lo4), high(3)));
    }
  }
}

#endif

}  // namespace

GgufIntegers gguf_integers(DType t) {
  switch (t) {
    case DType::kQ5_0:
      return {32, 16, false};
    case DType::kQ5_1:
      return {32, 0, true};
    case DType::kQ2_K:
      return {16, 0, true};
    case DType::kQ3_K:
      return {16, 4, false};
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {32, 0, true};
    case DType::kQ6_K:
      return {16, 32, false};
    case DType::kQ8_K:
      return {kQK_K, 128, false};
    default:
      break;
  }
  STRATA_ASSERT_MSG(false, "{} is not a GGUF-only format", dtype_name(t));
  return {};
}

void gguf_unpack_block_ref(DType t, const uint8_t* block, uint8_t* u, float* dw, float* mw) {
  unpack_ref(t, block, u, dw, mw);
}

void gguf_unpack_block(DType t, const uint8_t* block, uint8_t* u, float* dw, float* mw) {
#if defined(__x86_64__)
  if (t == DType::kQ5_0) return q5_0_fast(block, u, dw, mw);
  if (t == DType::kQ5_1) return q5_1_fast(block, u, dw, mw);
  if (t == DType::kQ4_K) return q4_k_fast(block, u, dw, mw);
  if (t == DType::kQ5_K) return q5_k_fast(block, u, dw, mw);
  if (t == DType::kQ6_K) return q6_k_fast(block, u, dw, mw);
#endif
  unpack_ref(t, block, u, dw, mw);
}

}  // namespace strata
