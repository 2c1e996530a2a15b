// Branch-free f32 approximations of exp, the logistic function and erfc,
// written as plain scalar code that compilers vectorise inside `omp simd`
// loops (one instruction stream per ISA through target_clones). The *_ref ops
// use <cmath> in double; the fast ops use these. Their accuracy is part of the
// contract and is what the tests' tolerances are derived from:
//   exp_fast(x):  relative error <= kExpRelErr for x in [-87.3, 88.7]; 0 below
//                 (results that would be f32 subnormals flush to 0), +inf above,
//                 NaN for NaN.
//   erfc_fast(x): relative error <= kErfcRelErr + (2.5 x^2 + 2) * 2^-24 for
//                 |x| <= 9 (the second term: rounding of the exp argument
//                 -x^2 + P(t), whose size grows with x^2); 0 where erfc(x)
//                 is below f32's normal range.
#pragma once

#include <bit>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::cpu {

// Bounds checked on dense sweeps by tests/kernels_cpu (measured: exp 1.7 ulp;
// erfc about 4e-7 near 0, rising to 0.75 of the bound at |x| = 8).
inline constexpr float kExpRelErr = 0x1p-22f;
inline constexpr float kErfcRelErr = 0x1p-21f;  // 1.2e-7 of the fit + f32 evaluation of P(t)

// e^x: x = n*ln2 + r, |r| <= ln2/2, e^r by its Taylor polynomial of degree 7
// (truncation < 2^-27 relative), 2^n assembled in the exponent field.
inline float exp_fast(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f;  // exact in 11 bits: n * kLn2Hi is exact
  const float kLn2Lo = -2.12194440e-4f;
  const float kMax = 88.7228317f;   // log(FLT_MAX)
  const float kMin = -87.3365479f;  // log(FLT_MIN)
  const float xc = x < kMin ? kMin : (x > kMax ? kMax : x);
  const float n = __builtin_rintf(xc * kLog2e);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // n in [-126, 128]; 2^n as 2^(n/2) * 2^(n - n/2) so that n = 128 does not
  // overflow the exponent field before the multiplication.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  float y = p * s1 * s2;
  y = x < kMin ? 0.0f : y;
  y = x > kMax ? __builtin_inff() : y;
  return x != x ? x : y;
}

// 1 / (1 + e^-x), never NaN for non-NaN x.
inline float sigmoid_fast(float x) {
  return 1.0f / (1.0f + exp_fast(-x));
}

// erfc(x) = t * exp(-x^2 + P(t)), t = 1 / (1 + |x|/2) for x >= 0 (Chebyshev
// fit, fractional error < 1.2e-7 everywhere); erfc(-x) = 2 - erfc(x).
inline float erfc_fast(float x) {
  const float z = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float r = t * exp_fast(p - z * z);
  return x < 0.0f ? 2.0f - r : r;
}

#if defined(__x86_64__)
// exp_fast on 16 lanes with AVX-512 (same reduction and polynomial, with
// fused multiply-adds; the same accuracy bound kExpRelErr holds).
__attribute__((target("avx512f,avx512dq,fma"))) inline __m512 exp_fast_avx512(__m512 x) {
  const __m512 k_max = _mm512_set1_ps(88.7228317f);
  const __m512 k_min = _mm512_set1_ps(-87.3365479f);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, k_min), k_max);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, k_min, _CMP_LT_OQ), _mm512_setzero_ps());
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, k_max, _CMP_GT_OQ),
                         _mm512_set1_ps(__builtin_inff()));
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
#endif

}  // namespace strata::cpu
