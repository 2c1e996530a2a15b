// The AVX-512 (F, BW, VL, DQ + F16C) variant of the (de)quantizers and row
// converters. One group at a time, held in G/16 registers of 16 floats. Every
// function repeats the reference's arithmetic operation by operation (multiply
// then add, never fused; the same clamps and roundings), so the results are
// the reference's bit for bit. Compiled for the baseline ISA with per-function
// target attributes: nothing here runs unless isa.cpp found the features.
#if defined(__x86_64__)

// GCC 12's avx512fintrin.h initialises its "undefined" vectors from
// themselves, which -Wall reports at every inlined use; the code is fine.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/gguf_integers.h"
#include "quant/group_params.h"
#include "quant/isa.h"

#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c")))

namespace strata::quant_detail {

namespace {

// ---- vector helpers ----

STRATA_AVX512 inline float f16_scalar(uint16_t h) {
  return _cvtsh_ss(h);
}

// f32 -> bf16 as core's f32_to_bf16: round to nearest even; NaN -> quiet NaN.
// The 16 results sit in the low 16 bits of each 32-bit lane.
STRATA_AVX512 inline __m512i f32_to_bf16_lanes(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
}

STRATA_AVX512 inline __m256i f32_to_bf16_x16(__m512 v) {
  return _mm512_cvtepi32_epi16(f32_to_bf16_lanes(v));
}

// 32 bf16 of a then b in one register: one pack and one permute instead of
// two narrowing moves.
STRATA_AVX512 inline __m512i f32_to_bf16_x32(__m512 a, __m512 b) {
  const __m512i p = _mm512_packus_epi32(f32_to_bf16_lanes(a), f32_to_bf16_lanes(b));
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), p);
}

// Stores 32 consecutive outputs: a = the first 16, b = the next 16.
STRATA_AVX512 inline void store32(float* p, __m512 a, __m512 b) {
  _mm512_storeu_ps(p, a);
  _mm512_storeu_ps(p + 16, b);
}
STRATA_AVX512 inline void store32(uint16_t* p, __m512 a, __m512 b) {
  _mm512_storeu_si512(p, f32_to_bf16_x32(a, b));
}

// Lanes holding NaN or +-Inf (exponent all ones).
STRATA_AVX512 inline __mmask16 nonfinite_mask(__m512 v) {
  const __m512i e = _mm512_set1_epi32(0x7f800000);
  return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), e), e);
}

// roundf: to nearest, halfway cases away from zero (|v| < 2^23 here).
STRATA_AVX512 inline __m512 round_half_away(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
  return _mm512_mask_add_ps(t, up, t, one);
}

STRATA_AVX512 inline __m512 clamp(__m512 v, float lo, float hi) {
  return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
}

// Statistics of one group held in V registers.
template <int V>
struct Group {
  __m512 v[V];
  STRATA_AVX512 void load(const float* x) {
    for (int k = 0; k < V; ++k) v[k] = _mm512_loadu_ps(x + 16 * k);
  }
  STRATA_AVX512 bool nonfinite() const {
    __mmask16 m = 0;
    for (int k = 0; k < V; ++k) m |= nonfinite_mask(v[k]);
    return m != 0;
  }
  STRATA_AVX512 bool constant(float x0) const {
    const __m512 b = _mm512_set1_ps(x0);
    __mmask16 m = 0xffff;
    for (int k = 0; k < V; ++k) m &= _mm512_cmp_ps_mask(v[k], b, _CMP_EQ_OQ);
    return m == 0xffff;
  }
  STRATA_AVX512 float amax() const {
    __m512 a = _mm512_abs_ps(v[0]);
    for (int k = 1; k < V; ++k) a = _mm512_max_ps(a, _mm512_abs_ps(v[k]));
    return _mm512_reduce_max_ps(a);
  }
  STRATA_AVX512 float min() const {
    __m512 a = v[0];
    for (int k = 1; k < V; ++k) a = _mm512_min_ps(a, v[k]);
    return _mm512_reduce_min_ps(a);
  }
  STRATA_AVX512 float max() const {
    __m512 a = v[0];
    for (int k = 1; k < V; ++k) a = _mm512_max_ps(a, v[k]);
    return _mm512_reduce_max_ps(a);
  }
};

// ---- Q8S<G> ----

template <int G>
STRATA_AVX512 void quantize_blocks(const float* x, BlockQ8S<G>* y, int64_t nb) {
  constexpr int V = G / 16;
  for (int64_t i = 0; i < nb; ++i, x += G) {
    Group<V> g;
    g.load(x);
    const GroupParams p = params_q8s(g.nonfinite(), g.amax(), g.constant(x[0]), x[0]);
    y[i].d = p.d;
    if (p.fixed) {
      std::memset(y[i].qs, p.q_fixed, G);
      continue;
    }
    const __m512 id = _mm512_set1_ps(p.id);
    for (int k = 0; k < V; ++k) {
      const __m512 r = round_half_away(clamp(_mm512_mul_ps(g.v[k], id), -127.0f, 127.0f));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * k),
                       _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
    }
  }
}

template <int G, typename Out>
STRATA_AVX512 void dequantize_blocks(const BlockQ8S<G>* x, Out* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const __m512 d = _mm512_set1_ps(f16_scalar(x[i].d));
    for (int k = 0; k < G; k += 32) {
      const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs + k));
      const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs + k + 16));
      store32(y + k, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b0)), d),
              _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b1)), d));
    }
  }
}

// ---- Q4S32 ----

STRATA_AVX512 void quantize_blocks(const float* x, BlockQ4S32* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    Group<2> g;
    g.load(x);
    const float amax = g.amax();
    float max = 0.0f;
    if (amax > 0.0f) {  // the first value of largest magnitude
      const __m512 a = _mm512_set1_ps(amax);
      const uint32_t m =
          static_cast<uint32_t>(_mm512_cmp_ps_mask(_mm512_abs_ps(g.v[0]), a, _CMP_EQ_OQ)) |
          static_cast<uint32_t>(_mm512_cmp_ps_mask(_mm512_abs_ps(g.v[1]), a, _CMP_EQ_OQ)) << 16;
      max = x[__builtin_ctz(m)];
    }
    const GroupParams p = params_q4s(g.nonfinite(), max, g.constant(x[0]), x[0]);
    y[i].d = p.d;
    if (p.fixed) {
      std::memset(y[i].qs, p.q_fixed | (p.q_fixed << 4), 16);
      continue;
    }
    const __m512 id = _mm512_set1_ps(p.id);
    const __m512 off = _mm512_set1_ps(8.5f);
    const __m512i lo =
        _mm512_cvttps_epi32(clamp(_mm512_add_ps(_mm512_mul_ps(g.v[0], id), off), 0.0f, 15.0f));
    const __m512i hi =
        _mm512_cvttps_epi32(clamp(_mm512_add_ps(_mm512_mul_ps(g.v[1], id), off), 0.0f, 15.0f));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs),
                     _mm512_cvtepi32_epi8(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4))));
  }
}

template <typename Out>
STRATA_AVX512 void dequantize_blocks(const BlockQ4S32* x, Out* y, int64_t nb) {
  const __m512i mask = _mm512_set1_epi32(0x0f);
  const __m512i eight = _mm512_set1_epi32(8);
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const __m512 d = _mm512_set1_ps(f16_scalar(x[i].d));
    const __m512i w =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs)));
    const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(w, mask), eight);
    const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(w, 4), eight);
    store32(y, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d), _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
  }
}

// ---- asymmetric ----

// q of one asymmetric group as V registers of 16 int32; returns the params.
template <int V>
STRATA_AVX512 GroupParams quantize_asym_group(const float* x, int levels, __m512i* q) {
  Group<V> g;
  g.load(x);
  const float min = g.min() + 0.0f;  // a zero of either sign counts as +0
  const float max = g.max() + 0.0f;
  const GroupParams p = params_asym(g.nonfinite(), min, max, levels);
  if (p.fixed) {
    for (int k = 0; k < V; ++k) q[k] = _mm512_set1_epi32(p.q_fixed);
    return p;
  }
  const __m512 base = _mm512_set1_ps(p.base);
  const __m512 id = _mm512_set1_ps(p.id);
  const __m512 half = _mm512_set1_ps(0.5f);
  const float hi = static_cast<float>(levels);
  for (int k = 0; k < V; ++k) {
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(g.v[k], base), id), half);
    q[k] = _mm512_cvttps_epi32(clamp(t, 0.0f, hi));
  }
  return p;
}

template <int G>
STRATA_AVX512 void quantize_blocks(const float* x, BlockQ8A<G>* y, int64_t nb) {
  constexpr int V = G / 16;
  for (int64_t i = 0; i < nb; ++i, x += G) {
    __m512i q[V];
    const GroupParams p = quantize_asym_group<V>(x, 255, q);
    y[i].d = p.d;
    y[i].m = p.m;
    for (int k = 0; k < V; ++k) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * k), _mm512_cvtepi32_epi8(q[k]));
    }
  }
}

template <int G, typename Out>
STRATA_AVX512 void dequantize_blocks(const BlockQ8A<G>* x, Out* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const __m512 d = _mm512_set1_ps(f16_scalar(x[i].d));
    const __m512 m = _mm512_set1_ps(f16_scalar(x[i].m));
    for (int k = 0; k < G; k += 32) {
      const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs + k));
      const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs + k + 16));
      store32(y + k,
              _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b0)), d), m),
              _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b1)), d), m));
    }
  }
}

template <int G>
STRATA_AVX512 void quantize_blocks(const float* x, BlockQ4A<G>* y, int64_t nb) {
  constexpr int V = G / 16;
  for (int64_t i = 0; i < nb; ++i, x += G) {
    __m512i q[V];
    const GroupParams p = quantize_asym_group<V>(x, 15, q);
    y[i].d = p.d;
    y[i].m = p.m;
    for (int k = 0; k < V / 2; ++k) {  // element j low nibble, j + G/2 high nibble
      const __m512i b = _mm512_or_si512(q[k], _mm512_slli_epi32(q[k + V / 2], 4));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * k), _mm512_cvtepi32_epi8(b));
    }
  }
}

template <int G, typename Out>
STRATA_AVX512 void dequantize_blocks(const BlockQ4A<G>* x, Out* y, int64_t nb) {
  const __m512i mask = _mm512_set1_epi32(0x0f);
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const __m512 d = _mm512_set1_ps(f16_scalar(x[i].d));
    const __m512 m = _mm512_set1_ps(f16_scalar(x[i].m));
    if constexpr (G == 32) {  // low nibbles are elements 0..15, high 16..31
      const __m512i w =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs)));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(w, mask));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(w, 4));
      store32(y, _mm512_add_ps(_mm512_mul_ps(lo, d), m), _mm512_add_ps(_mm512_mul_ps(hi, d), m));
    } else {
      for (int k = 0; k < G / 2; k += 32) {
        const __m512i w0 =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs + k)));
        const __m512i w1 = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs + k + 16)));
        const __m512 lo0 = _mm512_cvtepi32_ps(_mm512_and_si512(w0, mask));
        const __m512 lo1 = _mm512_cvtepi32_ps(_mm512_and_si512(w1, mask));
        const __m512 hi0 = _mm512_cvtepi32_ps(_mm512_srli_epi32(w0, 4));
        const __m512 hi1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(w1, 4));
        store32(y + k, _mm512_add_ps(_mm512_mul_ps(lo0, d), m),
                _mm512_add_ps(_mm512_mul_ps(lo1, d), m));
        store32(y + G / 2 + k, _mm512_add_ps(_mm512_mul_ps(hi0, d), m),
                _mm512_add_ps(_mm512_mul_ps(hi1, d), m));
      }
    }
  }
}

// ---- row dispatch ----

STRATA_AVX512 void quantize_row_avx512(DType t, const float* x, void* y, int64_t n) {
  const int64_t nb = n / dtype_info(t).block_elems;
  visit_block_type(t, [&](auto* tag) {
    using B = std::remove_pointer_t<decltype(tag)>;
    quantize_blocks(x, static_cast<B*>(y), nb);
  });
}

// The GGUF-only formats: each block as integers and scales
// (gguf_integers.h), then 16 values per register: dw * float(u - bias), or
// dw * float(u) + mw.
// 16 values: stored (f32) or rounded to bf16 and stored.
template <typename Out>
STRATA_AVX512 inline void store16(Out* out, __m512 v) {
  if constexpr (std::is_same_v<Out, float>) {
    _mm512_storeu_ps(out, v);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), f32_to_bf16_x16(v));
  }
}

// Q5_0 / Q5_1 (the bulk of K-quant files whose rows are not a multiple of
// 256) straight from the block: d [m] qh qs, nibbles as Q4's, bit e of qh
// the fifth bit of value e; x = float(q - 16) * d, or float(q) * d + m.
template <bool kMin, typename Out>
STRATA_AVX512 void dequantize_q5_avx512(const uint8_t* x, Out* y, int64_t nb) {
  constexpr int kQh = kMin ? 4 : 2;
  constexpr size_t kBytes = kMin ? 24 : 22;
  const __m128i lo4 = _mm_set1_epi8(0x0F);
  const __m512i sixteen = _mm512_set1_epi32(16);
  for (int64_t b = 0; b < nb; ++b, x += kBytes, y += 32) {
    uint16_t dh, mh = 0;
    uint32_t qh;
    std::memcpy(&dh, x, 2);
    if constexpr (kMin) std::memcpy(&mh, x + 2, 2);
    std::memcpy(&qh, x + kQh, 4);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + kQh + 4));
    __m512i q0 = _mm512_cvtepu8_epi32(_mm_and_si128(raw, lo4));
    __m512i q1 = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), lo4));
    q0 = _mm512_mask_or_epi32(q0, static_cast<__mmask16>(qh), q0, sixteen);
    q1 = _mm512_mask_or_epi32(q1, static_cast<__mmask16>(qh >> 16), q1, sixteen);
    const __m512 d = _mm512_set1_ps(f16_scalar(dh));
    if constexpr (kMin) {
      const __m512 m = _mm512_set1_ps(f16_scalar(mh));
      store16(y, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q0), d), m));
      store16(y + 16, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q1), d), m));
    } else {
      store16(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q0, sixteen)), d));
      store16(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q1, sixteen)), d));
    }
  }
}

template <typename Out>
STRATA_AVX512 void dequantize_gguf_avx512(DType t, const void* x, Out* y, int64_t n) {
  if (t == DType::kQ5_0)
    return dequantize_q5_avx512<false>(static_cast<const uint8_t*>(x), y, n / 32);
  if (t == DType::kQ5_1)
    return dequantize_q5_avx512<true>(static_cast<const uint8_t*>(x), y, n / 32);
  const GgufIntegers f = gguf_integers(t);
  const DTypeInfo& info = dtype_info(t);
  alignas(64) uint8_t u[256];
  float dw[16], mw[16];
  const __m512i bias = _mm512_set1_epi32(f.bias);
  for (int64_t b = 0; b < n / info.block_elems; ++b) {
    gguf_unpack_block(t, static_cast<const uint8_t*>(x) + b * info.block_bytes, u, dw, mw);
    for (int64_t e = 0; e < info.block_elems; e += 16) {
      const __m512i q =
          _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(u + e)));
      const __m512 d = _mm512_set1_ps(dw[e / f.group]);
      const __m512 v = f.has_min ? _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(q)),
                                                 _mm512_set1_ps(mw[e / f.group]))
                                 : _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(q, bias)));
      store16(y + b * info.block_elems + e, v);
    }
  }
}

template <typename Out>
STRATA_AVX512 void dequantize_row_avx512(DType t, const void* x, Out* y, int64_t n) {
  if (dtype_info(t).dequant_only) return dequantize_gguf_avx512(t, x, y, n);
  const int64_t nb = n / dtype_info(t).block_elems;
  visit_block_type(t, [&](auto* tag) {
    using B = std::remove_pointer_t<decltype(tag)>;
    dequantize_blocks(static_cast<const B*>(x), y, nb);
  });
}

STRATA_AVX512 void dequantize_row_f32_avx512(DType t, const void* x, float* y, int64_t n) {
  dequantize_row_avx512<float>(t, x, y, n);
}
STRATA_AVX512 void dequantize_row_bf16_avx512(DType t, const void* x, uint16_t* y, int64_t n) {
  dequantize_row_avx512<uint16_t>(t, x, y, n);
}

// ---- row converters (masked tails) ----

STRATA_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

// Masked loads and stores only for the tail: full-width ones stream better.

STRATA_AVX512 inline __m512 f16x16_to_f32(__m256i h) {
  __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h));
  // F16C quiets a signalling NaN; core keeps it signalling.
  const __m512i w = _mm512_cvtepu16_epi32(h);
  const __mmask16 snan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7e00)),
                                                 _mm512_set1_epi32(0x7c00)) &
                         _mm512_test_epi32_mask(w, _mm512_set1_epi32(0x01ff));
  f = _mm512_mask_andnot_epi32(f, snan, _mm512_set1_epi32(0x00400000), f);
  return _mm512_castsi512_ps(f);
}

STRATA_AVX512 void f16_to_f32_avx512(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i,
                     f16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, f16x16_to_f32(_mm256_maskz_loadu_epi16(k, x + i)));
  }
}

STRATA_AVX512 inline __m256i f32x16_to_f16(__m512 v) {
  __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (nan) {  // core: sign | 0x7e00, whatever the payload
    const __m512i s =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16), _mm512_set1_epi32(0x8000));
    const __m256i q = _mm512_cvtepi32_epi16(_mm512_or_si512(s, _mm512_set1_epi32(0x7e00)));
    h = _mm256_mask_blend_epi16(nan, h, q);
  }
  return h;
}

STRATA_AVX512 void f32_to_f16_avx512(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), f32x16_to_f16(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    _mm256_mask_storeu_epi16(y + i, k, f32x16_to_f16(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

STRATA_AVX512 void bf16_to_f32_avx512(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, x + i));
    _mm512_mask_storeu_ps(y + i, k, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
}

STRATA_AVX512 void f32_to_bf16_avx512(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm512_storeu_si512(y + i,
                        f32_to_bf16_x32(_mm512_loadu_ps(x + i), _mm512_loadu_ps(x + i + 16)));
  }
  for (; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    _mm256_mask_storeu_epi16(y + i, k, f32_to_bf16_x16(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

}  // namespace

const QuantKernels& kernels_avx512() {
  static const QuantKernels k = {
      QuantIsa::kAvx512, quantize_row_avx512, dequantize_row_f32_avx512, dequantize_row_bf16_avx512,
      f16_to_f32_avx512, f32_to_f16_avx512,   bf16_to_f32_avx512,        f32_to_bf16_avx512,
  };
  return k;
}

}  // namespace strata::quant_detail

#endif  // __x86_64__
