// The fast dequantization of the GGUF-only formats (gguf_blocks.h): AVX-512
// for Q4_K, Q5_K and Q6_K (what Q4_K_M / Q5_K_M / Q6_K files hold), 16
// values per register, each value's arithmetic the reference's (the
// sub-block scale and minimum products in scalar f32, then a multiply and a
// subtraction, never fused), so the floats are the same bit for bit. The
// other formats, and CPUs without AVX-512, use the reference.
#include <cstring>

#include "core/error.h"
#include "quant/gguf_blocks.h"
#include "quant/isa.h"

#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c")))
#endif

namespace strata {
namespace {

#if defined(__x86_64__)

// 16 unsigned bytes -> 16 floats.
STRATA_AVX512 inline __m512 bytes_to_ps(__m128i b) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
}

// y[0..16) = d * q - m for 16 byte values q.
STRATA_AVX512 inline void affine16(__m128i q, float d, float m, float* y) {
  const __m512 v = _mm512_mul_ps(_mm512_set1_ps(d), bytes_to_ps(q));
  _mm512_storeu_ps(y, _mm512_sub_ps(v, _mm512_set1_ps(m)));
}

STRATA_AVX512 void q4_k_block(const uint8_t* p, float* y) {
  BlockQ4_K b;
  std::memcpy(&b, p, sizeof b);
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const __m128i lo_mask = _mm_set1_epi8(0x0F);
  const uint8_t* q = b.qs;
  for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
    const auto [d1, m1] = kquant_sub_block(is, b.scales, d, dmin);
    const auto [d2, m2] = kquant_sub_block(is + 1, b.scales, d, dmin);
    for (int h = 0; h < 2; ++h) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h));
      affine16(_mm_and_si128(raw, lo_mask), d1, m1, y + 16 * h);
      affine16(_mm_and_si128(_mm_srli_epi16(raw, 4), lo_mask), d2, m2, y + 32 + 16 * h);
    }
  }
}

STRATA_AVX512 void q5_k_block(const uint8_t* p, float* y) {
  BlockQ5_K b;
  std::memcpy(&b, p, sizeof b);
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const __m128i lo_mask = _mm_set1_epi8(0x0F);
  const __m128i sixteen = _mm_set1_epi8(16);
  const uint8_t* ql = b.qs;
  int bit = 0;
  for (int is = 0; is < 8; is += 2, ql += 32, y += 64, bit += 2) {
    const auto [d1, m1] = kquant_sub_block(is, b.scales, d, dmin);
    const auto [d2, m2] = kquant_sub_block(is + 1, b.scales, d, dmin);
    const __m128i u1 = _mm_set1_epi8(static_cast<char>(1 << bit));
    const __m128i u2 = _mm_set1_epi8(static_cast<char>(2 << bit));
    for (int h = 0; h < 2; ++h) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 16 * h));
      const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh + 16 * h));
      // 16 where the bit is set: (qh & u) == u.
      const __m128i hi1 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(qh, u1), u1), sixteen);
      const __m128i hi2 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(qh, u2), u2), sixteen);
      affine16(_mm_add_epi8(_mm_and_si128(raw, lo_mask), hi1), d1, m1, y + 16 * h);
      affine16(_mm_add_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), lo_mask), hi2), d2, m2,
               y + 32 + 16 * h);
    }
  }
}

STRATA_AVX512 void q6_k_block(const uint8_t* p, float* y) {
  BlockQ6_K b;
  std::memcpy(&b, p, sizeof b);
  const float d = f16_to_f32(b.d);
  const __m128i lo_mask = _mm_set1_epi8(0x0F);
  const __m128i three = _mm_set1_epi8(3);
  const __m512i thirty_two = _mm512_set1_epi32(32);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  auto put = [&](__m128i q6, int scale, float* out) STRATA_AVX512 {
    const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(q6), thirty_two));
    const float ds = d * static_cast<float>(scale);
    _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_set1_ps(ds), v));
  };
  for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; l += 16) {
      const int is = l / 16;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + l));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + l + 32));
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + l));
      auto high = [&](int shift) STRATA_AVX512 {
        // ((h >> shift) & 3) << 4, per byte.
        return _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(h, shift), three), 4);
      };
      const __m128i q1 =
          _mm_or_si128(_mm_and_si128(a, lo_mask), _mm_and_si128(high(0), _mm_set1_epi8(0x30)));
      const __m128i q2 =
          _mm_or_si128(_mm_and_si128(c, lo_mask), _mm_and_si128(high(2), _mm_set1_epi8(0x30)));
      const __m128i q3 = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a, 4), lo_mask),
                                      _mm_and_si128(high(4), _mm_set1_epi8(0x30)));
      const __m128i q4 = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(c, 4), lo_mask),
                                      _mm_and_si128(high(6), _mm_set1_epi8(0x30)));
      put(q1, sc[is], y + l);
      put(q2, sc[is + 2], y + l + 32);
      put(q3, sc[is + 4], y + l + 64);
      put(q4, sc[is + 6], y + l + 96);
    }
  }
}

#endif

}  // namespace

void dequantize_gguf_row(DType t, const void* x, float* y, int64_t n) {
#if defined(__x86_64__)
  static const bool avx512 = quant_isa_supported(QuantIsa::kAvx512);  // asked once: it is not cheap
  if (avx512) {
    void (*block)(const uint8_t*, float*) = nullptr;
    if (t == DType::kQ4_K) block = q4_k_block;
    if (t == DType::kQ5_K) block = q5_k_block;
    if (t == DType::kQ6_K) block = q6_k_block;
    if (block) {
      STRATA_ASSERT(row_elems_ok(t, n));
      const auto* p = static_cast<const uint8_t*>(x);
      const size_t bytes = static_cast<size_t>(dtype_info(t).block_bytes);
      for (int64_t i = 0; i < n / kQK_K; ++i)
        block(p + static_cast<size_t>(i) * bytes, y + i * kQK_K);
      return;
    }
  }
#endif
  dequantize_gguf_row_ref(t, x, y, n);
}

}  // namespace strata
