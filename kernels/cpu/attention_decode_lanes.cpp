#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/attention_decode_units.h"
#include "kernels/cpu/vec_math.h"

namespace strata::cpu::decode {

#if defined(__x86_64__)

namespace {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// A shared unit of one kv head with at least kLaneMinRows query rows (its
// members' query heads of that kv head) computes with the rows in the lanes:
// NT vectors of 16 rows. A key block in f16 or bf16 is widened to f32 once
// (f32 is read in place); a key's scores are a chain of multiply-adds of
// its elements (broadcast) with the rows' query elements, and a dimension's
// value sums one of the rows' weights with the values' elements (broadcast):
// the arithmetic of a matrix product, with no reduction across lanes; the
// online softmax runs on 16 rows at a time. Writes the rows' partial states.
template <DType T, int NT>
STRATA_AVX512 void lane_unit_t(const DecodeCtx& c, const DecodeUnit& u) {
  const KvPages& kv = *c.kv;
  const int64_t hd = kv.head_dim;
  const HeadRange& hr = c.ranges[u.hr];
  const int64_t n_rows = u.n_s * c.group;
  alignas(64) float qt[kMaxHeadDim][NT][16];   // [d][tile][lane]: scaled queries
  alignas(64) float acc[kMaxHeadDim][NT][16];  // value sums
  alignas(64) float kf[16][kMaxHeadDim];       // the block's keys and values in f32
  alignas(64) float vf[16][kMaxHeadDim];
  alignas(64) float p[16][NT][16];  // [key][tile][lane]: scores, then weights
  // Only the head's hd dimensions are used (the rows of [d] are contiguous).
  const auto used = static_cast<size_t>(hd) * sizeof(qt[0]);
  std::memset(qt, 0, used);
  std::memset(acc, 0, used);
  for (int64_t r = 0; r < n_rows; ++r) {
    int64_t seq = 0, head = 0;
    unit_row(c, u, hr, r, &seq, &head);
    const float* qr = c.q + c.b->q_indptr[seq] * c.q_stride + head * hd;
    for (int64_t d = 0; d < hd; ++d) qt[d][r / 16][r % 16] = qr[d] * c.scale;
  }
  __m512 m[NT], l[NT];
  for (int t = 0; t < NT; ++t) {
    m[t] = _mm512_set1_ps(-INFINITY);
    l[t] = _mm512_setzero_ps();
  }
  const int32_t* ids = seq_pages(*c.b, u.s, hr.g0);
  const char* krow[16];
  const char* vrow[16];
  const int64_t n_vec = (hd + 15) / 16;
  // The next block's rows, prefetched a quarter at a time as the scores go,
  // and then that block's own.
  const char* nk[16];
  const char* nv[16];
  if (u.j0 < u.j1) block_rows(kv, ids, u.j0, std::min<int64_t>(16, u.j1 - u.j0), hr.g0, nk, nv);
  for (int64_t j0 = u.j0; j0 < u.j1; j0 += 16) {
    const int64_t jn = std::min<int64_t>(16, u.j1 - j0);
    std::copy(nk, nk + 16, krow);
    std::copy(nv, nv + 16, vrow);
    const int64_t nn = std::min<int64_t>(16, std::max<int64_t>(0, u.j1 - j0 - 16));
    if (nn > 0) block_rows(kv, ids, j0 + 16, nn, hr.g0, nk, nv);
    const float* kp[16];
    const float* vp[16];
    for (int64_t i = 0; i < 16; ++i) {
      if constexpr (T == DType::kF32) {
        kp[i] = reinterpret_cast<const float*>(krow[i]);
        vp[i] = reinterpret_cast<const float*>(vrow[i]);
        continue;
      }
      for (int64_t v = 0; v < n_vec; ++v) {
        const __mmask16 mk = hd - 16 * v >= 16 ? static_cast<__mmask16>(0xffff)
                                               : static_cast<__mmask16>((1u << (hd - 16 * v)) - 1);
        _mm512_store_ps(&kf[i][16 * v], load16<T>(krow[i], 16 * v, mk));
        _mm512_store_ps(&vf[i][16 * v], load16<T>(vrow[i], 16 * v, mk));
      }
      kp[i] = kf[i];
      vp[i] = vf[i];
    }
    // Scores, four keys at a time (keys past jn are the first row again).
    for (int64_t i = 0; i < 16; i += 4) {
      if (i < nn) {
        prefetch_rows_l2(nk + i, std::min<int64_t>(4, nn - i), hd * elem_bytes(kv.dtype));
        prefetch_rows_l2(nv + i, std::min<int64_t>(4, nn - i), hd * elem_bytes(kv.dtype));
      }
      __m512 sc[4][NT];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
        for (int t = 0; t < NT; ++t) sc[k][t] = _mm512_setzero_ps();
      }
      for (int64_t d = 0; d < hd; ++d) {
#pragma GCC unroll 2
        for (int t = 0; t < NT; ++t) {
          const __m512 qv = _mm512_load_ps(qt[d][t]);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            sc[k][t] = _mm512_fmadd_ps(_mm512_set1_ps(kp[i + k][d]), qv, sc[k][t]);
          }
        }
      }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
        for (int t = 0; t < NT; ++t) _mm512_store_ps(p[i + k][t], sc[k][t]);
      }
    }
    __m512 corr[NT];
    for (int t = 0; t < NT; ++t) {
      __m512 mb = _mm512_set1_ps(-INFINITY);
      for (int64_t i = 0; i < jn; ++i) mb = _mm512_max_ps(mb, _mm512_load_ps(p[i][t]));
      const __m512 m_new = _mm512_max_ps(m[t], mb);
      // Rows whose scores so far are all -inf keep weight 0 and scale 1.
      const __mmask16 live = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
      __m512 sum = _mm512_setzero_ps();
      for (int64_t i = 0; i < 16; ++i) {
        const __m512 w =
            i < jn ? _mm512_maskz_mov_ps(
                         live, exp_fast_avx512(_mm512_sub_ps(_mm512_load_ps(p[i][t]), m_new)))
                   : _mm512_setzero_ps();
        _mm512_store_ps(p[i][t], w);
        sum = _mm512_add_ps(sum, w);
      }
      corr[t] = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), live,
                                   exp_fast_avx512(_mm512_sub_ps(m[t], m_new)));
      l[t] = _mm512_mask_mov_ps(l[t], live, _mm512_fmadd_ps(l[t], corr[t], sum));
      m[t] = m_new;
    }
    // Value sums, four dimensions at a time.
    for (int64_t d = 0; d < hd; d += 4) {  // hd % 4 == 0 (lane_unit_runs)
      __m512 a[4][NT];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
        for (int t = 0; t < NT; ++t)
          a[k][t] = _mm512_mul_ps(_mm512_load_ps(acc[d + k][t]), corr[t]);
      }
      for (int64_t i = 0; i < jn; ++i) {
#pragma GCC unroll 2
        for (int t = 0; t < NT; ++t) {
          const __m512 w = _mm512_load_ps(p[i][t]);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            a[k][t] = _mm512_fmadd_ps(_mm512_set1_ps(vp[i][d + k]), w, a[k][t]);
          }
        }
      }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
        for (int t = 0; t < NT; ++t) _mm512_store_ps(acc[d + k][t], a[k][t]);
      }
    }
  }
  alignas(64) float mv[NT][16], lv[NT][16];
  for (int t = 0; t < NT; ++t) {
    _mm512_store_ps(mv[t], m[t]);
    _mm512_store_ps(lv[t], l[t]);
  }
  float* part = c.parts + static_cast<int64_t>(u.part) * kPartRows * (hd + 2);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* pr = part + r * (hd + 2);
    for (int64_t d = 0; d < hd; ++d) pr[d] = acc[d][r / 16][r % 16];
    pr[hd] = mv[r / 16][r % 16];
    pr[hd + 1] = lv[r / 16][r % 16];
  }
}

template <DType T>
void lane_unit_of(const DecodeCtx& c, const DecodeUnit& u) {
  const int64_t n_rows = u.n_s * c.group;
  if (n_rows > 32) {
    lane_unit_t<T, 3>(c, u);
  } else if (n_rows > 16) {
    lane_unit_t<T, 2>(c, u);
  } else {
    lane_unit_t<T, 1>(c, u);
  }
}

#pragma GCC diagnostic pop

}  // namespace

void lane_unit(const DecodeCtx& c, const DecodeUnit& u) {
  switch (c.kv->dtype) {
    case DType::kF32:
      return lane_unit_of<DType::kF32>(c, u);
    case DType::kF16:
      return lane_unit_of<DType::kF16>(c, u);
    default:
      return lane_unit_of<DType::kBF16>(c, u);
  }
}

#endif  // __x86_64__

}  // namespace strata::cpu::decode
