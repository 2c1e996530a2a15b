// The AVX2 + F16C variant of the (de)quantizers and row converters, for CPUs
// without AVX-512. Same structure as kernels_avx512.cpp with registers of 8
// floats; the same operation-by-operation arithmetic as the reference, so the
// results are the reference's bit for bit. Per-function target attributes:
// nothing here runs unless isa.cpp found the features.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/gguf_integers.h"
#include "quant/group_params.h"
#include "quant/isa.h"

#define STRATA_AVX2 __attribute__((target("avx2,f16c")))

namespace strata::quant_detail {

namespace {

// ---- vector helpers ----

STRATA_AVX2 inline float f16_scalar(uint16_t h) {
  return _cvtsh_ss(h);
}

// f32 -> bf16 as core's f32_to_bf16: round to nearest even; NaN -> quiet NaN.
// Returns 8 results in the low 16 bits of each 32-bit lane.
STRATA_AVX2 inline __m256i f32_to_bf16_x8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, q, nan);
}

// 8 uint32 lanes (each < 2^16) -> 8 uint16.
STRATA_AVX2 inline __m128i narrow_u32_u16(__m256i v) {
  return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

STRATA_AVX2 inline void store8(float* p, __m256 v) {
  _mm256_storeu_ps(p, v);
}
STRATA_AVX2 inline void store8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), narrow_u32_u16(f32_to_bf16_x8(v)));
}

STRATA_AVX2 inline int nonfinite_mask(__m256 v) {
  const __m256i e = _mm256_set1_epi32(0x7f800000);
  const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), e), e);
  return _mm256_movemask_ps(_mm256_castsi256_ps(m));
}

STRATA_AVX2 inline __m256 abs8(__m256 v) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

// roundf: to nearest, halfway cases away from zero (|v| < 2^23 here).
STRATA_AVX2 inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 up = _mm256_cmp_ps(abs8(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

STRATA_AVX2 inline __m256 clamp(__m256 v, float lo, float hi) {
  return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
}

STRATA_AVX2 inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

STRATA_AVX2 inline float hmin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// 4 registers of 8 int32 (values fit a byte) -> 32 bytes in order; signed
// saturation for Q8S, unsigned for the others.
template <bool Signed>
STRATA_AVX2 inline __m256i narrow_32_to_bytes(const __m256i* q) {
  const __m256i a = _mm256_packs_epi32(q[0], q[1]);
  const __m256i b = _mm256_packs_epi32(q[2], q[3]);
  const __m256i c = Signed ? _mm256_packs_epi16(a, b) : _mm256_packus_epi16(a, b);
  return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// 2 registers of 8 int32 (values fit a byte) -> 16 bytes in order.
STRATA_AVX2 inline __m128i narrow_16_to_bytes(__m256i q0, __m256i q1) {
  const __m256i a = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
  return _mm_packus_epi16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}

template <int V>
struct Group {
  __m256 v[V];
  STRATA_AVX2 void load(const float* x) {
    for (int k = 0; k < V; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
  }
  STRATA_AVX2 bool nonfinite() const {
    int m = 0;
    for (int k = 0; k < V; ++k) m |= nonfinite_mask(v[k]);
    return m != 0;
  }
  STRATA_AVX2 bool constant(float x0) const {
    const __m256 b = _mm256_set1_ps(x0);
    int m = 0xff;
    for (int k = 0; k < V; ++k) m &= _mm256_movemask_ps(_mm256_cmp_ps(v[k], b, _CMP_EQ_OQ));
    return m == 0xff;
  }
  STRATA_AVX2 float amax() const {
    __m256 a = abs8(v[0]);
    for (int k = 1; k < V; ++k) a = _mm256_max_ps(a, abs8(v[k]));
    return hmax(a);
  }
  STRATA_AVX2 float min() const {
    __m256 a = v[0];
    for (int k = 1; k < V; ++k) a = _mm256_min_ps(a, v[k]);
    return hmin(a);
  }
  STRATA_AVX2 float max() const {
    __m256 a = v[0];
    for (int k = 1; k < V; ++k) a = _mm256_max_ps(a, v[k]);
    return hmax(a);
  }
};

// ---- Q8S<G> ----

template <int G>
STRATA_AVX2 void quantize_blocks(const float* x, BlockQ8S<G>* y, int64_t nb) {
  constexpr int V = G / 8;
  for (int64_t i = 0; i < nb; ++i, x += G) {
    Group<V> g;
    g.load(x);
    const GroupParams p = params_q8s(g.nonfinite(), g.amax(), g.constant(x[0]), x[0]);
    y[i].d = p.d;
    if (p.fixed) {
      std::memset(y[i].qs, p.q_fixed, G);
      continue;
    }
    const __m256 id = _mm256_set1_ps(p.id);
    for (int k = 0; k < V; k += 4) {
      __m256i q[4];
      for (int u = 0; u < 4; ++u) {
        q[u] = _mm256_cvtps_epi32(
            round_half_away(clamp(_mm256_mul_ps(g.v[k + u], id), -127.0f, 127.0f)));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + 8 * k), narrow_32_to_bytes<true>(q));
    }
  }
}

template <int G, typename Out>
STRATA_AVX2 void dequantize_blocks(const BlockQ8S<G>* x, Out* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const __m256 d = _mm256_set1_ps(f16_scalar(x[i].d));
    for (int k = 0; k < G; k += 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].qs + k));
      store8(y + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), d));
    }
  }
}

// ---- Q4S32 ----

STRATA_AVX2 void quantize_blocks(const float* x, BlockQ4S32* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    Group<4> g;
    g.load(x);
    const float amax = g.amax();
    float max = 0.0f;
    if (amax > 0.0f) {  // the first value of largest magnitude
      const __m256 a = _mm256_set1_ps(amax);
      uint32_t m = 0;
      for (int k = 0; k < 4; ++k) {
        m |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(abs8(g.v[k]), a, _CMP_EQ_OQ)))
             << (8 * k);
      }
      max = x[__builtin_ctz(m)];
    }
    const GroupParams p = params_q4s(g.nonfinite(), max, g.constant(x[0]), x[0]);
    y[i].d = p.d;
    if (p.fixed) {
      std::memset(y[i].qs, p.q_fixed | (p.q_fixed << 4), 16);
      continue;
    }
    const __m256 id = _mm256_set1_ps(p.id);
    const __m256 off = _mm256_set1_ps(8.5f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      q[k] = _mm256_cvttps_epi32(clamp(_mm256_add_ps(_mm256_mul_ps(g.v[k], id), off), 0.0f, 15.0f));
    }
    const __m256i b0 = _mm256_or_si256(q[0], _mm256_slli_epi32(q[2], 4));
    const __m256i b1 = _mm256_or_si256(q[1], _mm256_slli_epi32(q[3], 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs), narrow_16_to_bytes(b0, b1));
  }
}

template <typename Out>
STRATA_AVX2 void dequantize_blocks(const BlockQ4S32* x, Out* y, int64_t nb) {
  const __m256i mask = _mm256_set1_epi32(0x0f);
  const __m256i eight = _mm256_set1_epi32(8);
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const __m256 d = _mm256_set1_ps(f16_scalar(x[i].d));
    for (int k = 0; k < 16; k += 8) {
      const __m256i w =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].qs + k)));
      const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(w, mask), eight);
      const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(w, 4), eight);
      store8(y + k, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), d));
      store8(y + 16 + k, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), d));
    }
  }
}

// ---- asymmetric ----

template <int V>
STRATA_AVX2 GroupParams quantize_asym_group(const float* x, int levels, __m256i* q) {
  Group<V> g;
  g.load(x);
  const float min = g.min() + 0.0f;  // a zero of either sign counts as +0
  const float max = g.max() + 0.0f;
  const GroupParams p = params_asym(g.nonfinite(), min, max, levels);
  if (p.fixed) {
    for (int k = 0; k < V; ++k) q[k] = _mm256_set1_epi32(p.q_fixed);
    return p;
  }
  const __m256 base = _mm256_set1_ps(p.base);
  const __m256 id = _mm256_set1_ps(p.id);
  const __m256 half = _mm256_set1_ps(0.5f);
  const float hi = static_cast<float>(levels);
  for (int k = 0; k < V; ++k) {
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(g.v[k], base), id), half);
    q[k] = _mm256_cvttps_epi32(clamp(t, 0.0f, hi));
  }
  return p;
}

template <int G>
STRATA_AVX2 void quantize_blocks(const float* x, BlockQ8A<G>* y, int64_t nb) {
  constexpr int V = G / 8;
  for (int64_t i = 0; i < nb; ++i, x += G) {
    __m256i q[V];
    const GroupParams p = quantize_asym_group<V>(x, 255, q);
    y[i].d = p.d;
    y[i].m = p.m;
    for (int k = 0; k < V; k += 4) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + 8 * k),
                          narrow_32_to_bytes<false>(q + k));
    }
  }
}

template <int G, typename Out>
STRATA_AVX2 void dequantize_blocks(const BlockQ8A<G>* x, Out* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const __m256 d = _mm256_set1_ps(f16_scalar(x[i].d));
    const __m256 m = _mm256_set1_ps(f16_scalar(x[i].m));
    for (int k = 0; k < G; k += 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].qs + k));
      store8(y + k,
             _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), d), m));
    }
  }
}

template <int G>
STRATA_AVX2 void quantize_blocks(const float* x, BlockQ4A<G>* y, int64_t nb) {
  constexpr int V = G / 8;
  for (int64_t i = 0; i < nb; ++i, x += G) {
    __m256i q[V];
    const GroupParams p = quantize_asym_group<V>(x, 15, q);
    y[i].d = p.d;
    y[i].m = p.m;
    for (int k = 0; k < V / 2; k += 2) {  // element j low nibble, j + G/2 high nibble
      const __m256i b0 = _mm256_or_si256(q[k], _mm256_slli_epi32(q[k + V / 2], 4));
      const __m256i b1 = _mm256_or_si256(q[k + 1], _mm256_slli_epi32(q[k + 1 + V / 2], 4));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 8 * k), narrow_16_to_bytes(b0, b1));
    }
  }
}

template <int G, typename Out>
STRATA_AVX2 void dequantize_blocks(const BlockQ4A<G>* x, Out* y, int64_t nb) {
  const __m256i mask = _mm256_set1_epi32(0x0f);
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const __m256 d = _mm256_set1_ps(f16_scalar(x[i].d));
    const __m256 m = _mm256_set1_ps(f16_scalar(x[i].m));
    for (int k = 0; k < G / 2; k += 8) {
      const __m256i w =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].qs + k)));
      const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(w, mask));
      const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4));
      store8(y + k, _mm256_add_ps(_mm256_mul_ps(lo, d), m));
      store8(y + G / 2 + k, _mm256_add_ps(_mm256_mul_ps(hi, d), m));
    }
  }
}

// ---- row dispatch ----

STRATA_AVX2 void quantize_row_avx2(DType t, const float* x, void* y, int64_t n) {
  const int64_t nb = n / dtype_info(t).block_elems;
  visit_block_type(t, [&](auto* tag) {
    using B = std::remove_pointer_t<decltype(tag)>;
    quantize_blocks(x, static_cast<B*>(y), nb);
  });
}

// The GGUF-only formats: each block as integers and scales
// (gguf_integers.h), then 8 values per register: dw * float(u - bias), or
// dw * float(u) + mw.
template <typename Out>
STRATA_AVX2 void dequantize_gguf_avx2(DType t, const void* x, Out* y, int64_t n) {
  const GgufIntegers f = gguf_integers(t);
  const DTypeInfo& info = dtype_info(t);
  alignas(32) uint8_t u[256];
  float dw[16], mw[16];
  const __m256i bias = _mm256_set1_epi32(f.bias);
  for (int64_t b = 0; b < n / info.block_elems; ++b) {
    gguf_unpack_block(t, static_cast<const uint8_t*>(x) + b * info.block_bytes, u, dw, mw);
    for (int64_t e = 0; e < info.block_elems; e += 8) {
      const __m256i q =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(u + e)));
      const __m256 d = _mm256_set1_ps(dw[e / f.group]);
      const __m256 v = f.has_min ? _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(q)),
                                                 _mm256_set1_ps(mw[e / f.group]))
                                 : _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(q, bias)));
      store8(y + b * info.block_elems + e, v);
    }
  }
}

template <typename Out>
STRATA_AVX2 void dequantize_row_avx2(DType t, const void* x, Out* y, int64_t n) {
  if (dtype_info(t).dequant_only) return dequantize_gguf_avx2(t, x, y, n);
  const int64_t nb = n / dtype_info(t).block_elems;
  visit_block_type(t, [&](auto* tag) {
    using B = std::remove_pointer_t<decltype(tag)>;
    dequantize_blocks(static_cast<const B*>(x), y, nb);
  });
}

STRATA_AVX2 void dequantize_row_f32_avx2(DType t, const void* x, float* y, int64_t n) {
  dequantize_row_avx2<float>(t, x, y, n);
}
STRATA_AVX2 void dequantize_row_bf16_avx2(DType t, const void* x, uint16_t* y, int64_t n) {
  dequantize_row_avx2<uint16_t>(t, x, y, n);
}

// ---- row converters (scalar tails with core's functions) ----

STRATA_AVX2 void f16_to_f32_avx2(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    // F16C quiets a signalling NaN; core keeps it signalling.
    const __m256i w = _mm256_cvtepu16_epi32(h);
    const __m256i nan_exp = _mm256_cmpeq_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7e00)),
                                               _mm256_set1_epi32(0x7c00));
    const __m256i no_payload =
        _mm256_cmpeq_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x01ff)), _mm256_setzero_si256());
    const __m256i snan = _mm256_andnot_si256(no_payload, nan_exp);
    const __m256i fixed =
        _mm256_andnot_si256(_mm256_and_si256(snan, _mm256_set1_epi32(0x00400000)), f);
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(fixed));
  }
  for (; i < n; ++i) y[i] = f16_to_f32(x[i]);
}

STRATA_AVX2 void f32_to_f16_avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(nan)) {  // core: sign | 0x7e00, whatever the payload
      const __m256i s = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16),
                                         _mm256_set1_epi32(0x8000));
      const __m128i q = narrow_u32_u16(_mm256_or_si256(s, _mm256_set1_epi32(0x7e00)));
      const __m256i m32 = _mm256_castps_si256(nan);
      const __m128i m16 =
          _mm_packs_epi32(_mm256_castsi256_si128(m32), _mm256_extracti128_si256(m32, 1));
      h = _mm_blendv_epi8(h, q, m16);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

STRATA_AVX2 void bf16_to_f32_avx2(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

STRATA_AVX2 void f32_to_bf16_avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(y + i, _mm256_loadu_ps(x + i));
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

}  // namespace

const QuantKernels& kernels_avx2() {
  static const QuantKernels k = {
      QuantIsa::kAvx2, quantize_row_avx2, dequantize_row_f32_avx2, dequantize_row_bf16_avx2,
      f16_to_f32_avx2, f32_to_f16_avx2,   bf16_to_f32_avx2,        f32_to_bf16_avx2,
  };
  return k;
}

}  // namespace strata::quant_detail

#endif  // __x86_64__
