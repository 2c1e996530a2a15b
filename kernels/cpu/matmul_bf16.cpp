#include "kernels/cpu/matmul_bf16.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/step_prefetch.h"
#include "quant/blocks.h"
#include "quant/gguf_blocks.h"

namespace strata::cpu {

namespace {

constexpr int64_t kChunk = 32;        // elements per vdpbf16ps: 16 lanes x 2
// Weight rows read ahead (row_prefetch): into L1 for 4-bit weights, into L2
// and further for a byte or more per element.
constexpr int64_t kNearRows = 4;
constexpr int64_t kFarRows = 16;
constexpr int kMidM = 12;             // the wide kernel's smaller tile of x rows
constexpr int64_t kTileRows = 8;      // weight rows per pass of two tiles of x rows

int64_t round_up(int64_t v, int64_t q) {
  return (v + q - 1) / q * q;
}

// The GGUF-only formats with a chunk reader below; the others (Q2_K, Q3_K,
// Q8_K) take the general path (matmul.h).
bool gguf_dot_ok(DType t) {
  return t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K;
}

bool dtype_ok(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 ||
         (is_quantized(t) && !dtype_info(t).dequant_only) || gguf_dot_ok(t);
}

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define STRATA_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")))

STRATA_BF16 inline float f16_scalar(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Elements [e0, e0 + 32) of a row of an 8-bit type T (e0 a multiple of 32,
// the row's k a multiple of G) as f32, exactly as dequantize_row_ref makes
// them: d * q (Q8S), d * q + m (Q8A), a multiply then an add.
template <DType T>
STRATA_BF16 inline void dequant32(const uint8_t* row, int64_t e0, __m512* lo, __m512* hi) {
  using B = block_of_t<T>;
  constexpr int64_t G = B::kGroup;
  constexpr bool kAsym = !dtype_info_constexpr(T).symmetric;
  static_assert(dtype_info_constexpr(T).bits == 8);
  const uint8_t* b = row + (e0 / G) * static_cast<int64_t>(sizeof(B));
  const int64_t o = e0 % G;  // first element within the block
  const __m512 d = _mm512_set1_ps(f16_scalar(b));
  const uint8_t* qs = b + (kAsym ? 4 : 2);
  const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + o));
  const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + o + 16));
  // Elements 0..15 and 16..31 of the chunk as int32.
  const __m512i q0 = kAsym ? _mm512_cvtepu8_epi32(v0) : _mm512_cvtepi8_epi32(v0);
  const __m512i q1 = kAsym ? _mm512_cvtepu8_epi32(v1) : _mm512_cvtepi8_epi32(v1);
  *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(q0), d);
  *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(q1), d);
  if constexpr (kAsym) {
    const __m512 m = _mm512_set1_ps(f16_scalar(b + 2));
    *lo = _mm512_add_ps(*lo, m);
    *hi = _mm512_add_ps(*hi, m);
  }
}

// 32 elements from a table of values: elements 0..15 and 16..31 of the chunk
// are the values their codes v0, v1 (bytes, 0..31) index, code c meaning
// values_lo[c] (c < 16) or values_hi[c - 16], each rounded to bf16 as
// w_chunk rounds (vcvtne2ps2bf16), then picked with vpermw.
STRATA_BF16 inline __m512bh pick(__m512 values_lo, __m512 values_hi, __m128i v0, __m128i v1) {
  const __m512bh t = _mm512_cvtne2ps_pbh(values_hi, values_lo);
  const __m512i idx = _mm512_cvtepu8_epi16(_mm256_set_m128i(v1, v0));
  const __m512i w = _mm512_permutexvar_epi16(idx, reinterpret_cast<const __m512i&>(t));
  return reinterpret_cast<const __m512bh&>(w);
}

// Codes 0..15 and 16..31 as floats.
STRATA_BF16 inline __m512 codes_lo() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
STRATA_BF16 inline __m512 codes_hi() {
  return _mm512_add_ps(codes_lo(), _mm512_set1_ps(16.0f));
}

// A 4-bit format's 32 elements through a table: the block's 16 values
// d * q (+ m) (d * (q - 8) for Q4S), each made as dequantize_row_ref makes
// it (a multiply, then an add) and rounded to bf16 as w_chunk rounds, then picked
// by each element's nibble (vpermw). The same bits as widening every
// element, with the arithmetic done once per value instead of per element.
template <DType T>
STRATA_BF16 inline __m512bh nibble_chunk(const uint8_t* row, int64_t e0) {
  using B = block_of_t<T>;
  constexpr int64_t G = B::kGroup;
  constexpr bool kAsym = !dtype_info_constexpr(T).symmetric;
  const uint8_t* b = row + (e0 / G) * static_cast<int64_t>(sizeof(B));
  const int64_t o = e0 % G;  // first element within the block
  uint32_t dm_bits;          // d, then m for the asymmetric formats
  std::memcpy(&dm_bits, b, kAsym ? 4 : 2);
  const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm_bits)));
  const __m512 q = kAsym ? codes_lo() : _mm512_sub_ps(codes_lo(), _mm512_set1_ps(8.0f));
  __m512 values = _mm512_mul_ps(q, _mm512_broadcastss_ps(dm));
  if constexpr (kAsym) {
    values = _mm512_add_ps(values, _mm512_broadcastss_ps(_mm_movehdup_ps(dm)));
  }
  // Element e of the block: low nibble of byte e (e < G/2), else high nibble of byte e - G/2.
  const uint8_t* qs = b + (kAsym ? 4 : 2);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  __m128i v0, v1;  // the chunk's elements 0..15 and 16..31
  if constexpr (G == 32) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    v0 = _mm_and_si128(v, low4);
    v1 = _mm_and_si128(_mm_srli_epi16(v, 4), low4);
  } else {
    const bool high = o >= G / 2;
    const uint8_t* p = qs + (high ? o - G / 2 : o);
    v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
    if (high) {
      v0 = _mm_srli_epi16(v0, 4);
      v1 = _mm_srli_epi16(v1, 4);
    }
    v0 = _mm_and_si128(v0, low4);
    v1 = _mm_and_si128(v1, low4);
  }
  return pick(values, values, v0, v1);
}

// Q6_K: 16 values from 16 low-nibble sources `ql`, the 2-bit highs of `qh`
// at `shift`, high nibbles when `upper`, minus 32.
STRATA_BF16 inline __m512 q6_values(const uint8_t* ql, const uint8_t* qh, int shift, bool upper) {
  const __m128i low4 = _mm_set1_epi8(0x0f);
  __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql));
  if (upper) q = _mm_srli_epi16(q, 4);
  q = _mm_and_si128(q, low4);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh));
  const __m128i hb = _mm_and_si128(_mm_srli_epi16(h, shift), _mm_set1_epi8(3));
  q = _mm_or_si128(q, _mm_slli_epi16(hb, 4));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(q), _mm512_set1_epi32(32)));
}

// Q5_0, Q5_1, Q4_K and Q5_K through a table (pick): the 32 (16 for Q4_K)
// values of the block or sub-block, each as dequantize_gguf_row_ref makes
// it (gguf_blocks.h): Q5_0 q*d, Q5_1 q*d + m, Q4_K / Q5_K (d*sc)*q -
// (dmin*mn) for the 32 elements of one sub-block. The same bits as widening
// each element, the arithmetic once per value.
template <DType T>
STRATA_BF16 inline __m512bh gguf_table_chunk(const uint8_t* row, int64_t e0) {
  constexpr int64_t kBytes = dtype_info_constexpr(T).block_bytes;
  constexpr int64_t G = dtype_info_constexpr(T).block_elems;
  const uint8_t* b = row + (e0 / G) * kBytes;
  const __m128i low4 = _mm_set1_epi8(0x0f);
  if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1) {
    constexpr int kQs = T == DType::kQ5_0 ? 6 : 8;  // d [m] qh[4] qs[16]
    const __m512 d = _mm512_set1_ps(f16_scalar(b));
    uint32_t qh;
    std::memcpy(&qh, b + kQs - 4, 4);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + kQs));
    // Bit j of qh is the fifth bit of element j: 16 bytes of 0x10 / 0 from 16 mask bits.
    const __m128i h0 = _mm_maskz_mov_epi8(static_cast<__mmask16>(qh & 0xFFFF), _mm_set1_epi8(0x10));
    const __m128i h1 = _mm_maskz_mov_epi8(static_cast<__mmask16>(qh >> 16), _mm_set1_epi8(0x10));
    const __m128i c0 = _mm_or_si128(_mm_and_si128(v, low4), h0);
    const __m128i c1 = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(v, 4), low4), h1);
    __m512 q_lo = codes_lo(), q_hi = codes_hi();
    if constexpr (T == DType::kQ5_0) {
      q_lo = _mm512_sub_ps(q_lo, _mm512_set1_ps(16.0f));
      q_hi = _mm512_sub_ps(q_hi, _mm512_set1_ps(16.0f));
    }
    __m512 t_lo = _mm512_mul_ps(q_lo, d), t_hi = _mm512_mul_ps(q_hi, d);
    if constexpr (T == DType::kQ5_1) {
      const __m512 m = _mm512_set1_ps(f16_scalar(b + 2));
      t_lo = _mm512_add_ps(t_lo, m);
      t_hi = _mm512_add_ps(t_hi, m);
    }
    return pick(t_lo, t_hi, c0, c1);
  } else {
    static_assert(T == DType::kQ4_K || T == DType::kQ5_K);
    const int j = static_cast<int>((e0 % G) / 32);  // sub-block: low nibbles when even
    const auto [d, m] = kquant_sub_block(j, b + 4, f16_scalar(b), f16_scalar(b + 2));
    const uint8_t* qs = b + (T == DType::kQ4_K ? 16 : 48) + 32 * (j / 2);
    __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16));
    if (j % 2) {
      v0 = _mm_srli_epi16(v0, 4);
      v1 = _mm_srli_epi16(v1, 4);
    }
    v0 = _mm_and_si128(v0, low4);
    v1 = _mm_and_si128(v1, low4);
    if constexpr (T == DType::kQ5_K) {
      const __m128i u = _mm_set1_epi8(static_cast<char>(1 << j));
      const __m128i sixteen = _mm_set1_epi8(16);
      const uint8_t* qh = b + 16;
      const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh));
      const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 16));
      v0 = _mm_add_epi8(v0, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h0, u), u), sixteen));
      v1 = _mm_add_epi8(v1, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h1, u), u), sixteen));
    }
    const __m512 t_lo =
        _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d), codes_lo()), _mm512_set1_ps(m));
    if constexpr (T == DType::kQ4_K) return pick(t_lo, t_lo, v0, v1);
    const __m512 t_hi =
        _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d), codes_hi()), _mm512_set1_ps(m));
    return pick(t_lo, t_hi, v0, v1);
  }
}

// Q6_K's 32 elements of a chunk, as dequantize_gguf_row_ref makes them
// (gguf_blocks.h): (d*sc)*q with the two scales of the chunk's halves.
STRATA_BF16 inline void dequant32_q6k(const uint8_t* row, int64_t e0, __m512* lo, __m512* hi) {
  constexpr int64_t kBytes = dtype_info_constexpr(DType::kQ6_K).block_bytes;
  constexpr int64_t G = dtype_info_constexpr(DType::kQ6_K).block_elems;
  const uint8_t* b = row + (e0 / G) * kBytes;
  const int64_t r = e0 % G;
  const int64_t half = r / 128, quarter = (r % 128) / 32;  // which of q1..q4
  const uint8_t* ql = b + 64 * half + (quarter % 2) * 32;
  const uint8_t* qh = b + 128 + 32 * half;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * quarter;
  const float d = f16_scalar(b + 208);
  const int shift = 2 * static_cast<int>(quarter);
  *lo = _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[0])),
                      q6_values(ql, qh, shift, quarter >= 2));
  *hi = _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[1])),
                      q6_values(ql + 16, qh + 16, shift, quarter >= 2));
}

// Elements [e0, e0 + 32) of a row of W (fewer at the end of the row: zero
// past k) rounded to bf16.
template <DType T>
STRATA_BF16 inline __m512bh w_chunk(const uint8_t* row, int64_t e0, int64_t k) {
  if constexpr (T == DType::kBF16) {
    const int64_t left = k - e0;
    const __mmask32 mk = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
    const __m512i v = _mm512_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(row) + e0);
    return reinterpret_cast<const __m512bh&>(v);
  } else {
    __m512 lo, hi;
    if constexpr (T == DType::kF32 || T == DType::kF16) {
      const int64_t left = k - e0;
      const __mmask16 m0 = left >= 16  ? 0xffff
                           : left <= 0 ? 0
                                       : static_cast<__mmask16>((1u << left) - 1);
      const __mmask16 m1 = left >= 32   ? 0xffff
                           : left <= 16 ? 0
                                        : static_cast<__mmask16>((1u << (left - 16)) - 1);
      if constexpr (T == DType::kF32) {
        const float* p = reinterpret_cast<const float*>(row) + e0;
        lo = _mm512_maskz_loadu_ps(m0, p);
        hi = _mm512_maskz_loadu_ps(m1, p + 16);
      } else {
        const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + e0;
        lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, p));
        hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, p + 16));
      }
    } else if constexpr (!dtype_info_constexpr(T).dequant_only &&
                         dtype_info_constexpr(T).bits == 4) {
      return nibble_chunk<T>(row, e0);
    } else if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1 || T == DType::kQ4_K ||
                         T == DType::kQ5_K) {
      return gguf_table_chunk<T>(row, e0);
    } else if constexpr (T == DType::kQ6_K) {
      dequant32_q6k(row, e0, &lo, &hi);
    } else {
      dequant32<T>(row, e0, &lo, &hi);
    }
    return _mm512_cvtne2ps_pbh(hi, lo);
  }
}

// The `rows` weight rows some rows after row j, asked for a share per chunk
// of row j (step_prefetch.h). Weights of a byte or more per element go
// kFarRows ahead into L2: the f16 products of three layers of a 3.4 GB model
// at 8 / 16 / 32 rows of x took 1.3-1.45x as long kNearRows ahead into L1,
// Q8 ones 1.04-1.2x (8 to 64 rows ahead into L2 measured within a few % of
// each other); 4-bit weights, a few bytes per chunk, stay kNearRows ahead
// into L1 (5-7 % faster at one row of x).
inline StepPrefetch row_prefetch(const uint8_t* w, size_t w_row_bytes, int64_t n, int64_t k,
                                 int64_t j, int64_t rows) {
  const bool far = w_row_bytes >= static_cast<size_t>(k);
  const int64_t ahead = far ? kFarRows : kNearRows;
  if (j + ahead + rows > n) return {};
  return StepPrefetch(
      w + static_cast<size_t>(j + ahead) * w_row_bytes, static_cast<size_t>(rows) * w_row_bytes,
      static_cast<size_t>((k + kChunk - 1) / kChunk), far ? PrefetchInto::kL2 : PrefetchInto::kL1);
}

// Rows [j0, j1) of W against M rows of x (bf16, rows ldx elements apart,
// zero-padded to a multiple of 32): two weight rows at a time share every
// load of x.
template <DType T, int M>
STRATA_BF16 void dot_rows(float* y, int64_t y_stride, const uint16_t* xb, int64_t ldx,
                          const uint8_t* w, size_t w_row_bytes, const float* bias, int64_t n,
                          int64_t k, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; j += 2) {
    const bool two = j + 1 < j1;
    const uint8_t* r0 = w + static_cast<size_t>(j) * w_row_bytes;
    const uint8_t* r1 = two ? r0 + w_row_bytes : r0;
    StepPrefetch ahead = row_prefetch(w, w_row_bytes, n, k, j, 2);
    __m512 a0[M], a1[M];
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
    for (int64_t e0 = 0; e0 < k; e0 += kChunk) {
      ahead.step();
      const __m512bh w0 = w_chunk<T>(r0, e0, k);
      const __m512bh w1 = w_chunk<T>(r1, e0, k);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        const __m512i xv = _mm512_load_si512(xb + i * ldx + e0);
        const __m512bh xh = reinterpret_cast<const __m512bh&>(xv);
        a0[i] = _mm512_dpbf16_ps(a0[i], w0, xh);
        a1[i] = _mm512_dpbf16_ps(a1[i], w1, xh);
      }
    }
    const float b0 = bias != nullptr ? bias[j] : 0.0f;
    const float b1 = bias != nullptr && two ? bias[j + 1] : 0.0f;
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      y[i * y_stride + j] = _mm512_reduce_add_ps(a0[i]) + b0;
      if (two) y[i * y_stride + j + 1] = _mm512_reduce_add_ps(a1[i]) + b1;
    }
  }
}

// The same for M rows of x (rows from m on zero) one weight row at a time:
// M accumulators per weight row, each weight chunk widened once for all of
// them; the m first rows of y written. Per element the same products and
// sums as dot_rows.
template <DType T, int M>
STRATA_BF16 void dot_rows_wide(float* y, int64_t y_stride, const uint16_t* xb, int64_t ldx,
                               const uint8_t* w, size_t w_row_bytes, const float* bias, int64_t n,
                               int64_t k, int64_t j0, int64_t j1, int64_t m) {
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* r0 = w + static_cast<size_t>(j) * w_row_bytes;
    StepPrefetch ahead = row_prefetch(w, w_row_bytes, n, k, j, 1);
    __m512 a[M];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) a[i] = _mm512_setzero_ps();
    for (int64_t e0 = 0; e0 < k; e0 += kChunk) {
      ahead.step();
      const __m512bh w0 = w_chunk<T>(r0, e0, k);
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
        const __m512i xv = _mm512_load_si512(xb + i * ldx + e0);
        a[i] = _mm512_dpbf16_ps(a[i], w0, reinterpret_cast<const __m512bh&>(xv));
      }
    }
    const float b0 = bias != nullptr ? bias[j] : 0.0f;
    for (int64_t i = 0; i < m; ++i) y[i * y_stride + j] = _mm512_reduce_add_ps(a[i]) + b0;
  }
}

using DotFn = void (*)(float*, int64_t, const uint16_t*, int64_t, const uint8_t*, size_t,
                       const float*, int64_t, int64_t, int64_t, int64_t);
using WideDotFn = void (*)(float*, int64_t, const uint16_t*, int64_t, const uint8_t*, size_t,
                           const float*, int64_t, int64_t, int64_t, int64_t, int64_t);

template <DType T>
constexpr DotFn kDots[kBf16DotNarrowM + 1] = {nullptr,        dot_rows<T, 1>, dot_rows<T, 2>,
                                              dot_rows<T, 3>, dot_rows<T, 4>, dot_rows<T, 5>,
                                              dot_rows<T, 6>, dot_rows<T, 7>, dot_rows<T, 8>};

// Calls f(std::integral_constant<DType, t>{}) for the weight types with a
// chunk reader (dtype_ok).
template <typename F>
void visit_dot_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kF32:
      return f(std::integral_constant<DType, DType::kF32>{});
    case DType::kF16:
      return f(std::integral_constant<DType, DType::kF16>{});
    case DType::kBF16:
      return f(std::integral_constant<DType, DType::kBF16>{});
    case DType::kQ8S32:
      return f(std::integral_constant<DType, DType::kQ8S32>{});
    case DType::kQ8S64:
      return f(std::integral_constant<DType, DType::kQ8S64>{});
    case DType::kQ8S128:
      return f(std::integral_constant<DType, DType::kQ8S128>{});
    case DType::kQ8A32:
      return f(std::integral_constant<DType, DType::kQ8A32>{});
    case DType::kQ8A64:
      return f(std::integral_constant<DType, DType::kQ8A64>{});
    case DType::kQ8A128:
      return f(std::integral_constant<DType, DType::kQ8A128>{});
    case DType::kQ4S32:
      return f(std::integral_constant<DType, DType::kQ4S32>{});
    case DType::kQ4A32:
      return f(std::integral_constant<DType, DType::kQ4A32>{});
    case DType::kQ4A64:
      return f(std::integral_constant<DType, DType::kQ4A64>{});
    case DType::kQ4A128:
      return f(std::integral_constant<DType, DType::kQ4A128>{});
    case DType::kQ5_0:
      return f(std::integral_constant<DType, DType::kQ5_0>{});
    case DType::kQ5_1:
      return f(std::integral_constant<DType, DType::kQ5_1>{});
    case DType::kQ4_K:
      return f(std::integral_constant<DType, DType::kQ4_K>{});
    case DType::kQ5_K:
      return f(std::integral_constant<DType, DType::kQ5_K>{});
    case DType::kQ6_K:
      return f(std::integral_constant<DType, DType::kQ6_K>{});
    default:
      return;
  }
}

DotFn dot_fn(DType t, int64_t m) {
  DotFn fn = nullptr;
  visit_dot_dtype(t, [&](auto tag) { fn = kDots<decltype(tag)::value>[m]; });
  return fn;
}

// Rows of x the wide kernel computes for m rows (8 < m <= kBf16DotWideM).
int64_t wide_rows(int64_t m) {
  return m <= kMidM ? kMidM : kBf16DotWideM;
}

WideDotFn wide_dot_fn(DType t, int64_t m) {
  WideDotFn fn = nullptr;
  visit_dot_dtype(t, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    fn = wide_rows(m) == kMidM ? dot_rows_wide<T, kMidM> : dot_rows_wide<T, kBf16DotWideM>;
  });
  return fn;
}

// x rows -> bf16, round to nearest even (subnormals to zero, as vcvtne2ps2bf16
// does), zero-padded to ldx.
STRATA_BF16 void x_to_bf16(const float* x, int64_t k, uint16_t* xb, int64_t ldx) {
  for (int64_t e = 0; e < ldx; e += 32) {
    const int64_t left = k - e;
    const __mmask16 m0 = left >= 16  ? 0xffff
                         : left <= 0 ? 0
                                     : static_cast<__mmask16>((1u << left) - 1);
    const __mmask16 m1 = left >= 32   ? 0xffff
                         : left <= 16 ? 0
                                      : static_cast<__mmask16>((1u << (left - 16)) - 1);
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + e + 16),
                                           _mm512_maskz_loadu_ps(m0, x + e));
    _mm512_store_si512(xb + e, reinterpret_cast<const __m512i&>(v));
  }
}

#pragma GCC diagnostic pop
#endif  // __x86_64__

}  // namespace

bool matmul_bf16_dot_ok(DType w_dtype, int64_t m) {
#if defined(__x86_64__)
  const int64_t max_m =
      dtype_ok(w_dtype) && dtype_info(w_dtype).block_elems >= kQK_K ? kBf16DotWideM : kBf16DotMaxM;
  return cpu_features().avx512_bf16 && m >= 1 && m <= max_m && dtype_ok(w_dtype);
#else
  (void)w_dtype, (void)m;
  return false;
#endif
}

size_t matmul_bf16_dot_ws_bytes(int64_t m, int64_t k) {
  const int64_t rows = m > kBf16DotNarrowM ? std::max(m, kBf16DotWideM) : m;
  return static_cast<size_t>(rows * round_up(k, kChunk) * 2);
}

Status matmul_bf16_dot(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                       WeightParts parts, int64_t m, int64_t k, void* ws, int n_threads) {
#if defined(__x86_64__)
  // From 9 rows of x, tiles of 8 rows of x (the last one shorter) through
  // the two-row kernel, which loads each chunk of x once for two weight rows
  // where the wide kernel loads it once per weight row: twice the products
  // per second with bf16 or f16 weights at 16 rows, 10-20% more with
  // Q8_0/Q4_1, though each chunk is widened once per tile; from 17 to 32
  // rows faster than the GEMM path, or as fast (Q4_1 at 32) (all measured
  // with strata_bench_matmul's decode step). The K-quants' super-blocks, the
  // costliest to widen, go through the wide kernel up to 16 rows (Q6_K 8-10%
  // slower as tiles, Q4_K the same). Each element gets the same products and
  // sums either way.
  const bool wide = m > kBf16DotNarrowM;
  std::array<DotFn, kMaxWeightParts> fns{}, tail_fns{};
  std::array<bool, kMaxWeightParts> tiled{};
  std::array<WideDotFn, kMaxWeightParts> wide_fns{};
  bool any_wide = false;
  if (parts.empty() || parts.size() > kMaxWeightParts) return Status::kInvalidArgument;
  for (size_t i = 0; i < parts.size(); ++i) {
    const DType t = parts[i].dtype;
    if (!matmul_bf16_dot_ok(t, m)) return Status::kUnsupported;
    if (!wide) {
      fns[i] = dot_fn(t, m);
    } else if (dtype_info(t).block_elems < kQK_K) {
      fns[i] = dot_fn(t, kBf16DotNarrowM);
      if (m % kBf16DotNarrowM != 0) tail_fns[i] = dot_fn(t, m % kBf16DotNarrowM);
      tiled[i] = true;
    } else {
      wide_fns[i] = wide_dot_fn(t, m);
      any_wide = true;
    }
    if (fns[i] == nullptr && wide_fns[i] == nullptr) return Status::kUnsupported;
  }
  const int64_t ldx = round_up(k, kChunk);
  auto* xb = static_cast<uint16_t*>(ws);
  for (int64_t i = 0; i < m; ++i) x_to_bf16(x + i * x_stride, k, xb + i * ldx, ldx);
  // Rows m .. wide_rows(m) - 1 are zero for the wide kernel. Units: pairs of
  // weight rows, split evenly over the threads.
  if (any_wide) std::memset(xb + m * ldx, 0, static_cast<size_t>((wide_rows(m) - m) * ldx) * 2);
  const int64_t n_units = count_units(parts, 2);
  const int nt = static_cast<int>(std::min<int64_t>(n_threads, n_units));
#pragma omp parallel num_threads(nt)
  {
    int64_t u0 = 0, u1 = 0;
    split_range(n_units, omp_get_num_threads(), omp_get_thread_num(), &u0, &u1);
    for_unit_rows(parts, 2, u0, u1, [&](size_t i, int64_t col, int64_t j0, int64_t j1) {
      const WeightPart& p = parts[i];
      const auto* w = static_cast<const uint8_t*>(p.w);
      if (wide_fns[i] != nullptr) {
        wide_fns[i](y + col, y_stride, xb, ldx, w, p.row_bytes, p.bias, p.n, k, j0, j1, m);
      } else if (!tiled[i]) {
        fns[i](y + col, y_stride, xb, ldx, w, p.row_bytes, p.bias, p.n, k, j0, j1);
      } else {
        // A few weight rows at a time, so that the later tiles read them from L1.
        for (int64_t jb = j0; jb < j1; jb += kTileRows) {
          const int64_t je = std::min(j1, jb + kTileRows);
          int64_t i0 = 0;
          for (; i0 + kBf16DotNarrowM <= m; i0 += kBf16DotNarrowM) {
            fns[i](y + col + i0 * y_stride, y_stride, xb + i0 * ldx, ldx, w, p.row_bytes, p.bias,
                   p.n, k, jb, je);
          }
          if (i0 < m) {
            tail_fns[i](y + col + i0 * y_stride, y_stride, xb + i0 * ldx, ldx, w, p.row_bytes,
                        p.bias, p.n, k, jb, je);
          }
        }
      }
    });
  }
  return Status::kOk;
#else
  (void)y, (void)y_stride, (void)x, (void)x_stride, (void)parts, (void)m, (void)k, (void)ws,
      (void)n_threads;
  return Status::kUnsupported;
#endif
}

}  // namespace strata::cpu
