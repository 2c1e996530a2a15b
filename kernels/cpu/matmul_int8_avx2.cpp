#include "kernels/cpu/matmul_int8_avx2.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/int8_weight_format.h"
#include "kernels/cpu/parallel.h"

namespace strata::cpu {

namespace {

constexpr int64_t kRows = 8;  // weight rows per strip: one per lane
// Rows of x up to which a whole strip of a Strata format with groups of 32
// is multiplied straight from its blocks (each block's values widened in
// registers, for all rows of x at once) instead of unpacked into the strip
// buffer first: measured over the demo model's layer shapes (Q4_1, AVX2,
// 2 threads) 7-25 % less time at 1 to 32 rows of x, the most at 1 to 2.
constexpr int64_t kDirectMaxM = 32;

int64_t round_up(int64_t v, int64_t q) {
  return (v + q - 1) / q * q;
}

// A thread's strip buffer: v [kRows][ldv] bytes (u, or u - 128 for the 8-bit
// formats), then dw and mw [k / G][kRows] f32.
struct StripLayout {
  int64_t ldv = 0;
  size_t dw = 0, mw = 0, bytes = 0;
};

StripLayout strip_layout(int64_t k, int64_t group) {
  StripLayout l;
  l.ldv = round_up(k, 32);
  const size_t scales = static_cast<size_t>(k / group * kRows) * sizeof(float);
  l.dw = static_cast<size_t>(kRows * l.ldv);
  l.mw = l.dw + scales;
  l.bytes = l.mw + scales;
  return l;
}

// The 8-bit formats: u up to 255, multiplied as u - 128.
bool wide(const WeightFormat& f) {
  return !f.gguf && !f.nibbles;
}

#if defined(__x86_64__)
#define STRATA_AVX2 __attribute__((target("avx2,fma,f16c")))

// Products of bytes a (unsigned below 128, or signed when kWide) and b
// (signed), pairs summed in 16 bits, then pairs of those in 32.
template <bool kWide>
STRATA_AVX2 inline __m256i pair_dots(__m256i a, __m256i b) {
  const __m256i p = kWide ? _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(b, a))
                          : _mm256_maddubs_epi16(a, b);
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

STRATA_AVX2 inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The reduction of group_sums: lane r of the result is the sum of p[r]'s lanes.
STRATA_AVX2 inline __m256i row_sums(const __m256i (&p)[kRows]) {
  const __m256i lo =
      _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  const __m256i hi =
      _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                          _mm256_permute2x128_si256(lo, hi, 0x31));
}

// S of one group for the 8 rows of the strip (ldv apart) against x's group
// xg: lane r is row r's sum.
template <int G, bool kWide>
STRATA_AVX2 inline __m256i group_sums(const uint8_t* v, int64_t ldv, const int8_t* xg) {
  const auto* xb = reinterpret_cast<const uint8_t*>(xg);
  if constexpr (G == 16) {
    // Two rows per vector: lanes 0-3 row r, lanes 4-7 row r + 1.
    const __m256i x =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb)));
    __m256i p[4];
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      const __m256i a = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(v + (2 * h + 1) * ldv),
                                            reinterpret_cast<const __m128i*>(v + 2 * h * ldv));
      p[h] = pair_dots<kWide>(a, x);
    }
    // Lower halves rows 0, 2, 4, 6; upper halves rows 1, 3, 5, 7.
    const __m256i s =
        _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    return _mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  } else {
    __m256i p[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      p[r] = pair_dots<kWide>(load32(v + r * ldv), load32(xb));
#pragma GCC unroll 4
      for (int c = 32; c < G; c += 32) {
        p[r] = _mm256_add_epi32(p[r], pair_dots<kWide>(load32(v + r * ldv + c), load32(xb + c)));
      }
    }
    return row_sums(p);
  }
}

// acc + one group's share of a row of x's 8 values of y: s its integer
// sums with the strip's rows (lane r: row r; the 8-bit formats' as u - 128),
// dw and mw the rows' scales and minima, tg the sum of x's group and dxg its
// scale. The float steps every path of this kernel takes, in one order.
template <bool kWide>
STRATA_AVX2 inline __m256 add_group(__m256 acc, __m256i s, const WeightFormat& f, __m256 dw,
                                    __m256 mw, int32_t tg, float dxg) {
  if constexpr (kWide) s = _mm256_add_epi32(s, _mm256_set1_epi32(128 * tg));
  __m256 fv;
  if (f.has_min) {
    fv = _mm256_mul_ps(_mm256_cvtepi32_ps(s), dw);
    fv = _mm256_fmadd_ps(mw, _mm256_set1_ps(static_cast<float>(tg)), fv);
  } else {
    fv = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s, _mm256_set1_epi32(f.bias * tg))), dw);
  }
  return _mm256_fmadd_ps(fv, _mm256_set1_ps(dxg), acc);
}

// Row i of x against the unpacked strip: 8 values of y.
template <int G, bool kWide>
STRATA_AVX2 __m256 strip_row(const uint8_t* v, int64_t ldv, const float* dw, const float* mw,
                             const WeightFormat& f, int64_t ng, const int8_t* qx, const float* dx,
                             const int32_t* t) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    acc = add_group<kWide>(acc, group_sums<G, kWide>(v + g * G, ldv, qx + g * G), f,
                           _mm256_load_ps(dw + g * kRows), _mm256_load_ps(mw + g * kRows), t[g],
                           dx[g]);
  }
  return acc;
}

// The 32 values of a block of a Strata format with groups of 32 as the
// unpacked strip holds them (unpack_row_x86's layout, in a register): u for
// the 4-bit formats (low nibbles, then high nibbles), u - 128 as int8 bits
// for the 8-bit ones (kWide).
template <bool kWide>
STRATA_AVX2 inline __m256i block_values(const WeightFormat& f, const uint8_t* block) {
  const uint8_t* qs = block + f.qs_off;
  if constexpr (!kWide) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i low4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low4), _mm_and_si128(v, low4));
  } else {
    const __m256i v = load32(qs);
    return f.signed_q ? v : _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
  }
}

// A whole strip (8 rows, w_ld bytes apart, groups of 32, one per block)
// against rows 0 .. m - 1 (m <= kDirectMaxM) of x, straight from the
// blocks: the integer sums of group_sums and the float steps of add_group,
// so the same bits as the unpacked strip. acc[i]: row i's 8 values of y.
template <bool kWide>
STRATA_AVX2 void strip_direct(const uint8_t* w, size_t w_ld, const WeightFormat& f, int64_t ng,
                              int64_t m, int64_t k, const int8_t* qx, const float* dx,
                              const int32_t* t, __m256* acc) {
  for (int64_t i = 0; i < m; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    __m256i a[kRows];
    alignas(16) uint16_t dh[kRows], mh[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* block = w + r * w_ld + g * f.block_bytes;
      a[r] = block_values<kWide>(f, block);
      std::memcpy(&dh[r], block, 2);
      mh[r] = 0;
      if (f.has_min) std::memcpy(&mh[r], block + 2, 2);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    const __m256 mw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mh)));
    for (int64_t i = 0; i < m; ++i) {
      const __m256i xg = load32(reinterpret_cast<const uint8_t*>(qx + i * k + g * 32));
      __m256i p[kRows];
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) p[r] = pair_dots<kWide>(a[r], xg);
      acc[i] = add_group<kWide>(acc[i], row_sums(p), f, dw, mw, t[i * ng + g], dx[i * ng + g]);
    }
  }
}

using StripRowFn = __m256 (*)(const uint8_t*, int64_t, const float*, const float*,
                              const WeightFormat&, int64_t, const int8_t*, const float*,
                              const int32_t*);

template <bool kWide>
StripRowFn strip_row_for(int64_t group) {
  switch (group) {
    case 16:
      return strip_row<16, kWide>;
    case 32:
      return strip_row<32, kWide>;
    case 64:
      return strip_row<64, kWide>;
    case 128:
      return strip_row<128, kWide>;
    default:
      return nullptr;
  }
}

// A row of x's 8 values of the strip of rows j0 .. j0 + rows - 1 into yr
// (its row of y), with the bias.
STRATA_AVX2 inline void put(float* yr, __m256 acc, const float* bias, int64_t j0, int64_t rows) {
  if (rows == kRows && bias == nullptr) {
    _mm256_storeu_ps(yr + j0, acc);
    return;
  }
  alignas(32) float out[kRows];
  _mm256_store_ps(out, acc);
  for (int64_t r = 0; r < rows; ++r) yr[j0 + r] = bias != nullptr ? out[r] + bias[j0 + r] : out[r];
}

// Strips [s0, s1) of the weights against every row of x.
STRATA_AVX2 void strips(float* y, int64_t y_stride, const uint8_t* w, const WeightFormat& f,
                        size_t w_row_bytes, const float* bias, int64_t m, int64_t n, int64_t k,
                        const int8_t* qx, const float* dx, const int32_t* t, char* ws, int64_t s0,
                        int64_t s1) {
  const int64_t ng = k / f.group;
  const StripLayout sl = strip_layout(k, f.group);
  auto* v = reinterpret_cast<uint8_t*>(ws);
  auto* dw = reinterpret_cast<float*>(ws + sl.dw);
  auto* mw = reinterpret_cast<float*>(ws + sl.mw);
  const StripRowFn row_fn = wide(f) ? strip_row_for<true>(f.group) : strip_row_for<false>(f.group);
  STRATA_ASSERT_MSG(row_fn != nullptr, "int8 AVX2 kernel: no tile for groups of {}", f.group);
  const bool direct = m <= kDirectMaxM && !f.gguf && f.group == 32 && f.block_elems == 32;
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t j0 = s * kRows;
    const int64_t rows = std::min(kRows, n - j0);
    // The next strip, into L2 while this one is multiplied.
    if (s + 1 < s1) {
      const char* ahead =
          reinterpret_cast<const char*>(w + static_cast<size_t>(j0 + kRows) * w_row_bytes);
      const size_t bytes = static_cast<size_t>(std::min(kRows, n - j0 - kRows)) * w_row_bytes;
      for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(ahead + o, _MM_HINT_T1);
    }
    if (direct && rows == kRows) {
      __m256 acc[kDirectMaxM];
      const uint8_t* ws0 = w + static_cast<size_t>(j0) * w_row_bytes;
      if (wide(f)) {
        strip_direct<true>(ws0, w_row_bytes, f, ng, m, k, qx, dx, t, acc);
      } else {
        strip_direct<false>(ws0, w_row_bytes, f, ng, m, k, qx, dx, t, acc);
      }
      for (int64_t i = 0; i < m; ++i) put(y + i * y_stride, acc[i], bias, j0, rows);
      continue;
    }
    for (int64_t r = 0; r < kRows; ++r) {
      uint8_t* vr = v + r * sl.ldv;
      if (r < rows) {
        unpack_row_x86(f, w + static_cast<size_t>(j0 + r) * w_row_bytes, k, vr, dw + r, mw + r,
                       kRows, wide(f));
      } else {
        std::memset(vr, 0, static_cast<size_t>(k));
        for (int64_t g = 0; g < ng; ++g) dw[g * kRows + r] = mw[g * kRows + r] = 0.0f;
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      put(y + i * y_stride, row_fn(v, sl.ldv, dw, mw, f, ng, qx + i * k, dx + i * ng, t + i * ng),
          bias, j0, rows);
    }
  }
}
#endif  // __x86_64__

}  // namespace

bool matmul_int8_avx2_ok() {
#if defined(__x86_64__)
  return cpu_features().avx2_fma;
#else
  return false;
#endif
}

size_t matmul_int8_avx2_ws_bytes(int64_t k, int64_t group) {
  return strip_layout(k, group).bytes;
}

void matmul_int8_avx2(float* y, int64_t y_stride, const WeightFormat& f, WeightParts parts,
                      int64_t m, int64_t k, const int8_t* qx, const float* dx, const int32_t* t,
                      void* const* ws, int n_threads) {
#if defined(__x86_64__)
  const int64_t n_strips = count_units(parts, kRows);
  const int nt = static_cast<int>(std::min<int64_t>(n_threads, n_strips));
#pragma omp parallel num_threads(nt)
  {
    int64_t s0 = 0, s1 = 0;
    const int tid = omp_get_thread_num();
    split_range(n_strips, omp_get_num_threads(), tid, &s0, &s1);
    for_unit_rows(parts, kRows, s0, s1, [&](size_t i, int64_t col, int64_t j0, int64_t j1) {
      const WeightPart& p = parts[i];
      strips(y + col, y_stride, static_cast<const uint8_t*>(p.w), f, p.row_bytes, p.bias, m, p.n, k,
             qx, dx, t, static_cast<char*>(ws[tid]), j0 / kRows, (j1 + kRows - 1) / kRows);
    });
  }
#else
  (void)y, (void)y_stride, (void)f, (void)parts, (void)m, (void)k, (void)qx, (void)dx, (void)t,
      (void)ws, (void)n_threads;
#endif
}

}  // namespace strata::cpu
