#include "kernels/cpu/attention_quant.h"

// GCC 12 warns about the undefined pass-through operand inside several
// AVX-512 intrinsics of its own headers (inlined into the templates below,
// also through vec_math.h); nothing here reads one.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"

namespace strata::cpu {

namespace {

constexpr int64_t kMaxRows = 32;  // query rows (tokens x heads of one kv head) per work item
constexpr int64_t kKeyBlock = kAttentionKeyBlock;

// Bytes of one (token, kv head) row of a page.
size_t head_row_bytes(const KvPages& kv) {
  return row_bytes(kv.dtype, kv.head_dim);
}

inline const uint8_t* kv_row(const KvPages& kv, const void* const* pages, const int32_t* ids,
                             int64_t key, int64_t g, size_t hrb) {
  const char* page = static_cast<const char*>(pages[ids[key / kv.page_size]]);
  return reinterpret_cast<const uint8_t*>(page) +
         static_cast<size_t>(key % kv.page_size * kv.n_kv_head + g) * hrb;
}

// Validates a batch as paged_attention does; on success *n_tokens is the
// number of query rows, *max_new the most new tokens of one sequence and
// *work a rough cost (multiply-adds).
Status check_batch(const float* out, int64_t out_stride, const float* q, int64_t q_stride,
                   int64_t n_head, const KvPages& kv, const AttentionBatch& b, int64_t* n_tokens,
                   int64_t* max_new, int64_t* work) {
  if (kv.head_dim < 1 || kv.head_dim > kMaxHeadDim || !kv_quant_ok(kv.dtype, kv.head_dim)) {
    return Status::kUnsupported;
  }
  if (kv.page_size < 1 || kv.n_kv_head < 1 || kv.n_pages < 0 || n_head < 1 ||
      n_head % kv.n_kv_head != 0 || b.n_seq < 0 ||
      (kv.n_pages > 0 && (kv.k == nullptr || kv.v == nullptr))) {
    return Status::kInvalidArgument;
  }
  *n_tokens = 0;
  *max_new = 0;
  *work = 0;
  if (b.n_seq == 0) return Status::kOk;
  if (b.q_indptr == nullptr || b.kv_len == nullptr || b.page_indptr == nullptr ||
      b.q_indptr[0] != 0 || b.page_indptr[0] != 0) {
    return Status::kInvalidArgument;
  }
  for (int64_t s = 0; s < b.n_seq; ++s) {
    const int64_t n_new = static_cast<int64_t>(b.q_indptr[s + 1]) - b.q_indptr[s];
    const int64_t n_pg = static_cast<int64_t>(b.page_indptr[s + 1]) - b.page_indptr[s];
    const int64_t len = b.kv_len[s];
    if (n_new < 0 || n_pg < 0 || len < n_new || n_pg * kv.page_size < len) {
      return Status::kInvalidArgument;
    }
    if (n_pg > 0 && b.page_ids == nullptr) return Status::kInvalidArgument;
    const int64_t used = (len + kv.page_size - 1) / kv.page_size;
    for (int64_t i = 0; i < used; ++i) {
      const int32_t id = b.page_ids[b.page_indptr[s] + i];
      if (id < 0 || id >= kv.n_pages || kv.k[id] == nullptr || kv.v[id] == nullptr) {
        return Status::kInvalidArgument;
      }
    }
    *max_new = std::max(*max_new, n_new);
    *work += n_new * len;
  }
  *n_tokens = b.q_indptr[b.n_seq];
  *work *= n_head * kv.head_dim * 2;
  const int64_t row = n_head * kv.head_dim;
  if (*n_tokens > 0 && (out == nullptr || q == nullptr || out_stride < row || q_stride < row)) {
    return Status::kInvalidArgument;
  }
  return Status::kOk;
}

Status check_append(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                    int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                    int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                    int64_t n_tokens) {
  if (head_dim < 1 || !kv_quant_ok(dtype, head_dim)) return Status::kUnsupported;
  if (n_pages < 0 || page_size < 1 || n_kv_head < 1 || n_tokens < 0) {
    return Status::kInvalidArgument;
  }
  if (n_pages > 0 && (k_pages == nullptr || v_pages == nullptr)) return Status::kInvalidArgument;
  if (n_tokens == 0) return Status::kOk;
  const int64_t row = n_kv_head * head_dim;
  if (k == nullptr || v == nullptr || slots == nullptr || k_stride < row || v_stride < row) {
    return Status::kInvalidArgument;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (slots[t] < 0 || slots[t] / page_size >= n_pages) return Status::kInvalidArgument;
    const int64_t id = slots[t] / page_size;
    if (k_pages[id] == nullptr || v_pages[id] == nullptr) return Status::kInvalidArgument;
  }
  return Status::kOk;
}

// Folds key x into a min/max element: a NaN makes both NaN for good.
inline void fold(float x, float* mn, float* mx) {
  *mn = (x < *mn || x != x) ? x : *mn;
  *mx = (x > *mx || x != x) ? x : *mx;
}

#if defined(__x86_64__)
#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

// Elements c .. c+15 of a quantized row (c a multiple of 16, the 16 inside
// one block), dequantized exactly as dequantize_row_ref does: the f16 scale
// and minimum widened exactly (F16C), then d*q (+ m) as a multiply and an
// add. 4-bit blocks keep element j in the low nibble of byte j and element
// j + G/2 in the high one, so 16 consecutive elements are the low or the
// high nibbles of 16 consecutive bytes.
template <DType T>
STRATA_AVX512 inline __m512 dequant16(const uint8_t* row, int64_t c) {
  using B = block_of_t<T>;
  constexpr int64_t G = B::kGroup;
  constexpr DTypeInfo info = dtype_info_constexpr(T);
  const B* b = reinterpret_cast<const B*>(row) + c / G;
  const int64_t j = c % G;
  const __m512 d = _mm512_set1_ps(_cvtsh_ss(b->d));
  if constexpr (info.bits == 8) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + j));
    if constexpr (info.symmetric) {
      return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw)), d);
    } else {
      const __m512 m = _mm512_set1_ps(_cvtsh_ss(b->m));
      return _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(raw)), d), m);
    }
  } else {
    constexpr int64_t H = G / 2;
    const __m512i w = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + (j < H ? j : j - H))));
    const __m512i qi =
        j < H ? _mm512_and_si512(w, _mm512_set1_epi32(0x0f)) : _mm512_srli_epi32(w, 4);
    if constexpr (info.symmetric) {
      return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(qi, _mm512_set1_epi32(8))), d);
    } else {
      const __m512 m = _mm512_set1_ps(_cvtsh_ss(b->m));
      return _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(qi), d), m);
    }
  }
}

// Pair p (0 <= p < head_dim / 32) of 16-element chunks of a quantized row
// that share one load of quantized bytes and one widening of d and m: for
// 4-bit formats the low and high nibbles of 16 bytes (elements G/2 apart),
// for 8-bit formats 32 consecutive bytes. *c0, *c1: the chunks' first
// elements. Values as dequant16 gives them.
template <DType T>
STRATA_AVX512 inline void dequant32(const uint8_t* row, int64_t p, __m512* x0, __m512* x1,
                                    int64_t* c0, int64_t* c1) {
  using B = block_of_t<T>;
  constexpr int64_t G = B::kGroup;
  constexpr DTypeInfo info = dtype_info_constexpr(T);
  constexpr int64_t per_block = G / 32;
  const int64_t blk = p / per_block, k = p % per_block;
  const B* b = reinterpret_cast<const B*>(row) + blk;
  const __m512 d = _mm512_set1_ps(_cvtsh_ss(b->d));
  __m512 f0, f1;
  if constexpr (info.bits == 8) {
    *c0 = blk * G + 32 * k;
    *c1 = *c0 + 16;
    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 32 * k));
    const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 32 * k + 16));
    if constexpr (info.symmetric) {
      f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(r0));
      f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(r1));
    } else {
      f0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(r0));
      f1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(r1));
    }
  } else {
    *c0 = blk * G + 16 * k;
    *c1 = *c0 + G / 2;
    const __m512i w =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16 * k)));
    __m512i lo = _mm512_and_si512(w, _mm512_set1_epi32(0x0f));
    __m512i hi = _mm512_srli_epi32(w, 4);
    if constexpr (info.symmetric) {
      lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(8));
      hi = _mm512_sub_epi32(hi, _mm512_set1_epi32(8));
    }
    f0 = _mm512_cvtepi32_ps(lo);
    f1 = _mm512_cvtepi32_ps(hi);
  }
  if constexpr (info.symmetric) {
    *x0 = _mm512_mul_ps(f0, d);
    *x1 = _mm512_mul_ps(f1, d);
  } else {
    const __m512 m = _mm512_set1_ps(_cvtsh_ss(b->m));
    *x0 = _mm512_add_ps(_mm512_mul_ps(f0, d), m);
    *x1 = _mm512_add_ps(_mm512_mul_ps(f1, d), m);
  }
}

// In-place transpose of a 16 x 16 f32 block held in 16 registers.
STRATA_AVX512 inline void transpose16(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

// Scores of NR query rows against a transposed block of 16 keys: out[i] =
// sum_d qs[i][d] * kt[d] (a vector over the keys), in named registers.
template <int NR>
STRATA_AVX512 inline void score_rows(const float (*qs)[kMaxHeadDim], const float (*kt)[16],
                                     int64_t hd, __m512* out) {
  __m512 s[NR];
  for (int i = 0; i < NR; ++i) s[i] = _mm512_setzero_ps();
  for (int64_t d = 0; d < hd; ++d) {
    const __m512 kd = _mm512_load_ps(kt[d]);
#pragma GCC unroll 8
    for (int i = 0; i < NR; ++i) s[i] = _mm512_fmadd_ps(_mm512_set1_ps(qs[i][d]), kd, s[i]);
  }
  for (int i = 0; i < NR; ++i) out[i] = s[i];
}

using ScoreFn = void (*)(const float (*)[kMaxHeadDim], const float (*)[16], int64_t, __m512*);
constexpr int kScoreRows = 8;
constexpr ScoreFn kScoreFns[kScoreRows + 1] = {nullptr,       score_rows<1>, score_rows<2>,
                                               score_rows<3>, score_rows<4>, score_rows<5>,
                                               score_rows<6>, score_rows<7>, score_rows<8>};

// One work item (see attend_tile below) with AVX-512: each block of 16 keys
// is dequantized 16 dims at a time straight into registers and transposed to
// kt[d][key], so a query row scores the 16 keys with head_dim multiply-adds;
// values are dequantized row-major into vt and accumulated 16 dims at a time.
// head_dim is a multiple of 32 (a group divides it), so no lane is masked.
template <DType T>
STRATA_AVX512 void attend_tile_avx512(float* out, int64_t out_stride, const float* q,
                                      int64_t q_stride, const KvPages& kv, const int32_t* ids,
                                      int64_t g, int64_t h0, int64_t n_h, int64_t tok0,
                                      int64_t n_tok, int64_t pos0, float scale) {
  static_assert(kKeyBlock == 16);
  const int64_t hd = kv.head_dim;
  const size_t hrb = static_cast<size_t>(hd / block_of_t<T>::kGroup) * sizeof(block_of_t<T>);
  const int64_t n_rows = n_tok * n_h;
  alignas(64) float qs[kMaxRows][kMaxHeadDim];
  alignas(64) float acc[kMaxRows][kMaxHeadDim];
  alignas(64) float kt[kMaxHeadDim][16];
  alignas(64) float vt[16][kMaxHeadDim];
  alignas(64) float p[kMaxRows][16];
  float m[kMaxRows];
  float l[kMaxRows];
  int64_t pos[kMaxRows];
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t t = r / n_h;
    const float* qr = q + (tok0 + t) * q_stride + (h0 + r % n_h) * hd;
    for (int64_t c = 0; c < hd; c += 16) {
      _mm512_store_ps(&qs[r][c], _mm512_mul_ps(_mm512_loadu_ps(qr + c), _mm512_set1_ps(scale)));
      _mm512_store_ps(&acc[r][c], _mm512_setzero_ps());
    }
    m[r] = -INFINITY;
    l[r] = 0.0f;
    pos[r] = pos0 + t;
  }
  const int64_t n_keys = pos0 + n_tok;  // keys 0 .. last position
  for (int64_t j0 = 0; j0 < n_keys; j0 += 16) {
    const int64_t jn = std::min<int64_t>(16, n_keys - j0);
    const uint8_t* rows[16];
    for (int64_t i = 0; i < jn; ++i) rows[i] = kv_row(kv, kv.k, ids, j0 + i, g, hrb);
    for (int64_t c = 0; c < hd; c += 16) {
      __m512 blk[16];
      for (int64_t i = 0; i < 16; ++i) {
        blk[i] = i < jn ? dequant16<T>(rows[i], c) : _mm512_setzero_ps();
      }
      transpose16(blk);
      for (int64_t i = 0; i < 16; ++i) _mm512_store_ps(kt[c + i], blk[i]);
    }
    for (int64_t r0 = 0; r0 < n_rows; r0 += kScoreRows) {
      const int64_t nr = std::min<int64_t>(kScoreRows, n_rows - r0);
      __m512 s[kScoreRows];
      kScoreFns[nr](&qs[r0], kt, hd, s);
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = r0 + i;
        const int64_t visible = std::clamp<int64_t>(pos[r] - j0 + 1, 0, jn);
        const __mmask16 vis = static_cast<__mmask16>((1u << visible) - 1);
        const __m512 sv = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis, s[i]);
        const float mb = _mm512_reduce_max_ps(sv);
        const float m_new = std::max(m[r], mb);
        if (m_new == -INFINITY) {  // no visible key yet for this row
          _mm512_store_ps(p[r], _mm512_setzero_ps());
          continue;
        }
        const __m512 pv = exp_fast_avx512(_mm512_sub_ps(sv, _mm512_set1_ps(m_new)));
        _mm512_store_ps(p[r], pv);
        const float corr = exp_fast(m[r] - m_new);
        l[r] = l[r] * corr + _mm512_reduce_add_ps(pv);
        m[r] = m_new;
        if (corr != 1.0f) {
          for (int64_t c = 0; c < hd; c += 16) {
            _mm512_store_ps(&acc[r][c],
                            _mm512_mul_ps(_mm512_load_ps(&acc[r][c]), _mm512_set1_ps(corr)));
          }
        }
      }
    }
    for (int64_t i = 0; i < jn; ++i) {
      const uint8_t* row = kv_row(kv, kv.v, ids, j0 + i, g, hrb);
      for (int64_t c = 0; c < hd; c += 16) _mm512_store_ps(&vt[i][c], dequant16<T>(row, c));
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t c = 0; c < hd; c += 16) {
        __m512 a = _mm512_load_ps(&acc[r][c]);
        for (int64_t i = 0; i < jn; ++i) {
          a = _mm512_fmadd_ps(_mm512_set1_ps(p[r][i]), _mm512_load_ps(&vt[i][c]), a);
        }
        _mm512_store_ps(&acc[r][c], a);
      }
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t t = r / n_h;
    float* o = out + (tok0 + t) * out_stride + (h0 + r % n_h) * hd;
    const __m512 inv = _mm512_set1_ps(1.0f / l[r]);
    for (int64_t c = 0; c < hd; c += 16) {
      _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_load_ps(&acc[r][c]), inv));
    }
  }
}

// Decode (one query token, at most 4 query rows per kv head): no transposes.
// Each key's K row is dequantized 16 dims at a time into registers and
// multiplied into one 16-lane partial per query row; the 16 partials of a
// block's keys are then summed lane-wise by a transpose-add tree into one
// vector of 16 scores. Values are dequantized into registers and added into
// the rows' sums directly.
struct KeySums {
  __m512 l1, l2, l3, out;
};

// Pair I of a block (keys 2I and 2I + 1): after pair 7, t.out lane j holds
// the lane sum of key j's partial.
template <int I>
STRATA_AVX512 inline void key_sums_push(KeySums& t, __m512 a, __m512 b) {
  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3].
  const __m512 x = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  if constexpr (I % 2 == 0) {
    t.l1 = x;
    return;
  }
  // Per 128-bit lane: sums of keys 4i .. 4i + 3 of that lane.
  const __m512d p = _mm512_castps_pd(t.l1), q = _mm512_castps_pd(x);
  const __m512 y = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(p, q)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(p, q)));
  if constexpr (I % 4 == 1) {
    t.l2 = y;
    return;
  }
  const __m512 z =
      _mm512_add_ps(_mm512_shuffle_f32x4(t.l2, y, 0x88), _mm512_shuffle_f32x4(t.l2, y, 0xdd));
  if constexpr (I == 3) {
    t.l3 = z;
    return;
  }
  t.out = _mm512_add_ps(_mm512_shuffle_f32x4(t.l3, z, 0x88), _mm512_shuffle_f32x4(t.l3, z, 0xdd));
}

template <DType T, int NR, int I>
STRATA_AVX512 inline void score_pair(const float (*qs)[kMaxHeadDim], const uint8_t* const* kr,
                                     int64_t hd, KeySums* t) {
  __m512 a[NR], b[NR];
  for (int r = 0; r < NR; ++r) a[r] = b[r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < hd / 32; ++p) {
    __m512 ka0, ka1, kb0, kb1;
    int64_t c0, c1;
    dequant32<T>(kr[2 * I], p, &ka0, &ka1, &c0, &c1);
    dequant32<T>(kr[2 * I + 1], p, &kb0, &kb1, &c0, &c1);
    for (int r = 0; r < NR; ++r) {
      const __m512 q0 = _mm512_load_ps(&qs[r][c0]);
      const __m512 q1 = _mm512_load_ps(&qs[r][c1]);
      a[r] = _mm512_fmadd_ps(q1, ka1, _mm512_fmadd_ps(q0, ka0, a[r]));
      b[r] = _mm512_fmadd_ps(q1, kb1, _mm512_fmadd_ps(q0, kb0, b[r]));
    }
  }
  for (int r = 0; r < NR; ++r) key_sums_push<I>(t[r], a[r], b[r]);
}

template <DType T, int NR>
STRATA_AVX512 void decode_rows_avx512(float* out, int64_t out_stride, const float* q,
                                      int64_t q_stride, const KvPages& kv, const int32_t* ids,
                                      int64_t g, int64_t h0, int64_t tok, int64_t n_keys,
                                      float scale) {
  const int64_t hd = kv.head_dim;
  const size_t hrb = static_cast<size_t>(hd / block_of_t<T>::kGroup) * sizeof(block_of_t<T>);
  alignas(64) float qs[NR][kMaxHeadDim];
  alignas(64) float acc[NR][kMaxHeadDim];
  alignas(64) float p[NR][16];
  float m[NR], l[NR];
  for (int r = 0; r < NR; ++r) {
    const float* qr = q + tok * q_stride + (h0 + r) * hd;
    for (int64_t c = 0; c < hd; c += 16) {
      _mm512_store_ps(&qs[r][c], _mm512_mul_ps(_mm512_loadu_ps(qr + c), _mm512_set1_ps(scale)));
      _mm512_store_ps(&acc[r][c], _mm512_setzero_ps());
    }
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < n_keys; j0 += 16) {
    const int64_t jn = std::min<int64_t>(16, n_keys - j0);
    const uint8_t* kr[16];
    const uint8_t* vr[16];
    for (int64_t i = 0; i < jn; ++i) {
      kr[i] = kv_row(kv, kv.k, ids, j0 + i, g, hrb);
      vr[i] = kv_row(kv, kv.v, ids, j0 + i, g, hrb);
    }
    for (int64_t i = jn; i < 16; ++i) kr[i] = kr[0];  // scored, then masked out
    KeySums t[NR];
    score_pair<T, NR, 0>(qs, kr, hd, t);
    score_pair<T, NR, 1>(qs, kr, hd, t);
    score_pair<T, NR, 2>(qs, kr, hd, t);
    score_pair<T, NR, 3>(qs, kr, hd, t);
    score_pair<T, NR, 4>(qs, kr, hd, t);
    score_pair<T, NR, 5>(qs, kr, hd, t);
    score_pair<T, NR, 6>(qs, kr, hd, t);
    score_pair<T, NR, 7>(qs, kr, hd, t);
    const __mmask16 vis = static_cast<__mmask16>((1u << jn) - 1);
    float corr[NR];
    for (int r = 0; r < NR; ++r) {
      const __m512 sv = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis, t[r].out);
      const float m_new = std::max(m[r], _mm512_reduce_max_ps(sv));
      if (m_new == -INFINITY) {
        _mm512_store_ps(p[r], _mm512_setzero_ps());
        corr[r] = 1.0f;
        continue;
      }
      const __m512 pv = exp_fast_avx512(_mm512_sub_ps(sv, _mm512_set1_ps(m_new)));
      _mm512_store_ps(p[r], pv);
      corr[r] = exp_fast(m[r] - m_new);
      l[r] = l[r] * corr[r] + _mm512_reduce_add_ps(pv);
      m[r] = m_new;
    }
    for (int64_t pr = 0; pr < hd / 32; ++pr) {
      int64_t c0, c1;
      __m512 v0, v1;
      dequant32<T>(vr[0], pr, &v0, &v1, &c0, &c1);
      __m512 a0[NR], a1[NR];
      for (int r = 0; r < NR; ++r) {
        a0[r] = _mm512_load_ps(&acc[r][c0]);
        a1[r] = _mm512_load_ps(&acc[r][c1]);
        if (corr[r] != 1.0f) {
          a0[r] = _mm512_mul_ps(a0[r], _mm512_set1_ps(corr[r]));
          a1[r] = _mm512_mul_ps(a1[r], _mm512_set1_ps(corr[r]));
        }
      }
      for (int64_t i = 0; i < jn; ++i) {
        if (i > 0) dequant32<T>(vr[i], pr, &v0, &v1, &c0, &c1);
        for (int r = 0; r < NR; ++r) {
          const __m512 pi = _mm512_set1_ps(p[r][i]);
          a0[r] = _mm512_fmadd_ps(pi, v0, a0[r]);
          a1[r] = _mm512_fmadd_ps(pi, v1, a1[r]);
        }
      }
      for (int r = 0; r < NR; ++r) {
        _mm512_store_ps(&acc[r][c0], a0[r]);
        _mm512_store_ps(&acc[r][c1], a1[r]);
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    float* o = out + tok * out_stride + (h0 + r) * hd;
    const __m512 inv = _mm512_set1_ps(1.0f / l[r]);
    for (int64_t c = 0; c < hd; c += 16) {
      _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_load_ps(&acc[r][c]), inv));
    }
  }
}

// decode_rows_avx512 for 1 <= n_rows <= 4.
template <DType T>
STRATA_AVX512 void decode_tile_avx512(float* out, int64_t out_stride, const float* q,
                                      int64_t q_stride, const KvPages& kv, const int32_t* ids,
                                      int64_t g, int64_t h0, int64_t n_rows, int64_t tok,
                                      int64_t n_keys, float scale) {
  switch (n_rows) {
    case 1:
      return decode_rows_avx512<T, 1>(out, out_stride, q, q_stride, kv, ids, g, h0, tok, n_keys,
                                      scale);
    case 2:
      return decode_rows_avx512<T, 2>(out, out_stride, q, q_stride, kv, ids, g, h0, tok, n_keys,
                                      scale);
    case 3:
      return decode_rows_avx512<T, 3>(out, out_stride, q, q_stride, kv, ids, g, h0, tok, n_keys,
                                      scale);
    default:
      return decode_rows_avx512<T, 4>(out, out_stride, q, q_stride, kv, ids, g, h0, tok, n_keys,
                                      scale);
  }
}

#endif  // __x86_64__

// One work item: n_tok consecutive query tokens of one sequence (the first at
// flat row tok0 and position pos0) and query heads h0 .. h0 + n_h - 1, all
// reading kv head g. Each block of keys (then values) is dequantized into an
// L1 tile with quant's dequantize_row and folded into an online softmax
// (flash attention) in f32.
STRATA_CLONES void attend_tile(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                               const KvPages& kv, const int32_t* ids, int64_t g, int64_t h0,
                               int64_t n_h, int64_t tok0, int64_t n_tok, int64_t pos0,
                               float scale) {
  const int64_t hd = kv.head_dim;  // a multiple of 32
  const size_t hrb = head_row_bytes(kv);
  const int64_t n_rows = n_tok * n_h;
  alignas(64) float qs[kMaxRows][kMaxHeadDim];
  alignas(64) float acc[kMaxRows][kMaxHeadDim];
  alignas(64) float sc[kMaxRows][kKeyBlock];
  alignas(64) float tile[kKeyBlock][kMaxHeadDim];
  float m[kMaxRows];
  float l[kMaxRows];
  int64_t pos[kMaxRows];
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t t = r / n_h;
    const float* qr = q + (tok0 + t) * q_stride + (h0 + r % n_h) * hd;
    for (int64_t d = 0; d < hd; ++d) qs[r][d] = qr[d] * scale;
    for (int64_t d = 0; d < hd; ++d) acc[r][d] = 0.0f;
    m[r] = -INFINITY;
    l[r] = 0.0f;
    pos[r] = pos0 + t;
  }
  const int64_t n_keys = pos0 + n_tok;
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int64_t jn = std::min(kKeyBlock, n_keys - j0);
    for (int64_t jj = 0; jj < jn; ++jj) {
      dequantize_row(kv.dtype, kv_row(kv, kv.k, ids, j0 + jj, g, hrb), tile[jj], hd);
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t visible = std::min(jn, pos[r] - j0 + 1);  // keys j0 .. pos[r]
      for (int64_t jj = 0; jj < jn; ++jj) {
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < hd; ++d) dot += qs[r][d] * tile[jj][d];
        sc[r][jj] = jj < visible ? dot : -INFINITY;
      }
      float mb = -INFINITY;
      for (int64_t jj = 0; jj < jn; ++jj) mb = sc[r][jj] > mb ? sc[r][jj] : mb;
      const float m_new = std::max(m[r], mb);
      if (m_new == -INFINITY) {
        for (int64_t jj = 0; jj < jn; ++jj) sc[r][jj] = 0.0f;
        continue;
      }
      float sum = 0.0f;
      for (int64_t jj = 0; jj < jn; ++jj) {
        const float pj = exp_fast(sc[r][jj] - m_new);
        sc[r][jj] = pj;
        sum += pj;
      }
      const float corr = exp_fast(m[r] - m_new);
      l[r] = l[r] * corr + sum;
      m[r] = m_new;
      if (corr != 1.0f) {
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) acc[r][d] *= corr;
      }
    }
    for (int64_t jj = 0; jj < jn; ++jj) {
      dequantize_row(kv.dtype, kv_row(kv, kv.v, ids, j0 + jj, g, hrb), tile[jj], hd);
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t jj = 0; jj < jn; ++jj) {
        const float pj = sc[r][jj];
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) acc[r][d] += pj * tile[jj][d];
      }
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t t = r / n_h;
    float* o = out + (tok0 + t) * out_stride + (h0 + r % n_h) * hd;
    const float inv = 1.0f / l[r];
    for (int64_t d = 0; d < hd; ++d) o[d] = acc[r][d] * inv;
  }
}

using TileFn = void (*)(float*, int64_t, const float*, int64_t, const KvPages&, const int32_t*,
                        int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float);
// (out, out_stride, q, q_stride, kv, ids, g, h0, n_rows, tok, n_keys, scale)
using DecodeFn = void (*)(float*, int64_t, const float*, int64_t, const KvPages&, const int32_t*,
                          int64_t, int64_t, int64_t, int64_t, int64_t, float);
constexpr int64_t kDecodeMaxRows = 4;

struct FastPaths {
  TileFn tile = nullptr;
  DecodeFn decode = nullptr;
};

// The AVX-512 kernels for a format, or nulls.
FastPaths avx512_paths(DType t) {
#if defined(__x86_64__)
  if (!cpu_features().avx512) return {};
  switch (t) {
#define STRATA_QUANT_CASE(T) \
  case T:                    \
    return {attend_tile_avx512<T>, decode_tile_avx512<T>};
    STRATA_QUANT_CASE(DType::kQ8S32)
    STRATA_QUANT_CASE(DType::kQ8S64)
    STRATA_QUANT_CASE(DType::kQ8S128)
    STRATA_QUANT_CASE(DType::kQ8A32)
    STRATA_QUANT_CASE(DType::kQ8A64)
    STRATA_QUANT_CASE(DType::kQ8A128)
    STRATA_QUANT_CASE(DType::kQ4S32)
    STRATA_QUANT_CASE(DType::kQ4A32)
    STRATA_QUANT_CASE(DType::kQ4A64)
    STRATA_QUANT_CASE(DType::kQ4A128)
#undef STRATA_QUANT_CASE
    default:
      return {};
  }
#else
  (void)t;
  return {};
#endif
}

}  // namespace

bool kv_quant_ok(DType dtype, int64_t head_dim) {
  if (static_cast<size_t>(dtype) >= static_cast<size_t>(DType::kCount)) return false;
  return is_quantized(dtype) && head_dim > 0 && row_elems_ok(dtype, head_dim);
}

void kv_rotate_groups(const float* x, float* y, int64_t n, int64_t group) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(group));
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    float* z = y + g0;
    std::memcpy(z, x + g0, static_cast<size_t>(group) * sizeof(float));
    for (int64_t len = 1; len < group; len <<= 1) {
      for (int64_t i = 0; i < group; i += 2 * len) {
        for (int64_t j = i; j < i + len; ++j) {
          const float a = z[j], b = z[j + len];
          z[j] = a + b;
          z[j + len] = a - b;
        }
      }
    }
    for (int64_t j = 0; j < group; ++j) z[j] *= norm;
  }
}

namespace {

// The queries of a batch with every head's groups rotated as the keys are
// (kv_rotate_groups): [n_tokens, n_head * head_dim], rows packed.
const float* rotated_queries(const float* q, int64_t q_stride, int64_t n_tokens, int64_t n_head,
                             const KvPages& kv, std::vector<float>& buf) {
  const int64_t row = n_head * kv.head_dim;
  const int64_t group = dtype_info(kv.dtype).block_elems;
  buf.resize(static_cast<size_t>(n_tokens * row));
  for (int64_t t = 0; t < n_tokens; ++t) {
    kv_rotate_groups(q + t * q_stride, buf.data() + t * row, row, group);
  }
  return buf.data();
}

}  // namespace

Status paged_attention_quant(float* out, int64_t out_stride, const float* q_in, int64_t q_stride_in,
                             int64_t n_head, const KvPages& kv, const AttentionBatch& batch,
                             float scale) {
  int64_t n_tokens = 0, max_new = 0, work = 0;
  if (Status s = check_batch(out, out_stride, q_in, q_stride_in, n_head, kv, batch, &n_tokens,
                             &max_new, &work);
      s != Status::kOk || n_tokens == 0) {
    return s;
  }
  thread_local std::vector<float> q_buf;
  const float* q = rotated_queries(q_in, q_stride_in, n_tokens, n_head, kv, q_buf);
  const int64_t q_stride = n_head * kv.head_dim;
  // The split of paged_attention: (sequence, kv head, chunk of its query
  // heads, tile of query tokens), last tiles first.
  const int64_t group = n_head / kv.n_kv_head;
  const int64_t n_h = std::min(group, kMaxRows);
  const int64_t n_hchunks = (group + n_h - 1) / n_h;
  const int64_t tile = std::max<int64_t>(1, kMaxRows / n_h);
  const int64_t max_tiles = (max_new + tile - 1) / tile;
  const int64_t per_tile = batch.n_seq * kv.n_kv_head * n_hchunks;
  const int64_t n_items = max_tiles * per_tile;
  const FastPaths fast = avx512_paths(kv.dtype);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(work, int64_t{1} << 16))
  for (int64_t item = 0; item < n_items; ++item) {
    const int64_t tile_rev = item / per_tile;
    const int64_t s = item % per_tile / (kv.n_kv_head * n_hchunks);
    const int64_t g = item % (kv.n_kv_head * n_hchunks) / n_hchunks;
    const int64_t c = item % n_hchunks;
    const int64_t n_new = batch.q_indptr[s + 1] - batch.q_indptr[s];
    const int64_t n_tiles = (n_new + tile - 1) / tile;
    const int64_t t = n_tiles - 1 - tile_rev;
    if (t < 0) continue;
    const int64_t first = t * tile;
    const int64_t n_tok = std::min(tile, n_new - first);
    const int64_t pos0 = batch.kv_len[s] - n_new + first;
    const int64_t h0 = g * group + c * n_h;
    const int32_t* ids = batch.page_ids + batch.page_indptr[s];
    const int64_t n_hi = std::min(n_h, (g + 1) * group - h0);
    if (n_tok == 1 && n_hi <= kDecodeMaxRows && fast.decode != nullptr) {
      fast.decode(out, out_stride, q, q_stride, kv, ids, g, h0, n_hi, batch.q_indptr[s] + first,
                  pos0 + 1, scale);
    } else {
      (fast.tile != nullptr ? fast.tile : attend_tile)(out, out_stride, q, q_stride, kv, ids, g,
                                                       h0, n_hi, batch.q_indptr[s] + first,
                                                       n_tok, pos0, scale);
    }
  }
  return Status::kOk;
}

Status paged_attention_quant_ref(float* out, int64_t out_stride, const float* q_in,
                                 int64_t q_stride_in, int64_t n_head, const KvPages& kv,
                                 const AttentionBatch& batch, float scale) {
  int64_t n_tokens = 0, max_new = 0, work = 0;
  if (Status s = check_batch(out, out_stride, q_in, q_stride_in, n_head, kv, batch, &n_tokens,
                             &max_new, &work);
      s != Status::kOk || n_tokens == 0) {
    return s;
  }
  std::vector<float> q_buf;
  const float* q = rotated_queries(q_in, q_stride_in, n_tokens, n_head, kv, q_buf);
  const int64_t q_stride = n_head * kv.head_dim;
  const int64_t hd = kv.head_dim;
  const size_t hrb = head_row_bytes(kv);
  const int64_t group = n_head / kv.n_kv_head;
  std::vector<float> keys, values;  // [kv_len, hd] of one kv head, dequantized
  for (int64_t s = 0; s < batch.n_seq; ++s) {
    const int32_t* ids = batch.page_ids + batch.page_indptr[s];
    const int64_t n_new = batch.q_indptr[s + 1] - batch.q_indptr[s];
    const int64_t len = batch.kv_len[s];
    if (n_new == 0) continue;
    for (int64_t g = 0; g < kv.n_kv_head; ++g) {
      keys.resize(static_cast<size_t>(len * hd));
      values.resize(static_cast<size_t>(len * hd));
      for (int64_t j = 0; j < len; ++j) {
        dequantize_row_ref(kv.dtype, kv_row(kv, kv.k, ids, j, g, hrb), &keys[j * hd], hd);
        dequantize_row_ref(kv.dtype, kv_row(kv, kv.v, ids, j, g, hrb), &values[j * hd], hd);
      }
      for (int64_t i = 0; i < n_new; ++i) {
        const int64_t tok = batch.q_indptr[s] + i;
        const int64_t p = len - n_new + i;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* qr = q + tok * q_stride + h * hd;
          std::vector<double> w(static_cast<size_t>(p + 1));
          double mx = -INFINITY;
          for (int64_t j = 0; j <= p; ++j) {
            double dot = 0.0;
            for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qr[d]) * keys[j * hd + d];
            w[j] = dot * scale;
            mx = std::max(mx, w[j]);
          }
          double sum = 0.0;
          for (int64_t j = 0; j <= p; ++j) {
            w[j] = std::exp(w[j] - mx);
            sum += w[j];
          }
          float* o = out + tok * out_stride + h * hd;
          for (int64_t d = 0; d < hd; ++d) {
            double a = 0.0;
            for (int64_t j = 0; j <= p; ++j) a += w[j] * values[j * hd + d];
            o[d] = static_cast<float>(a / sum);
          }
        }
      }
    }
  }
  return Status::kOk;
}

Status kv_append_quant(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                       int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                       int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                       int64_t n_tokens, float* k_min, float* k_max) {
  if (Status s = check_append(k_pages, v_pages, n_pages, dtype, page_size, n_kv_head, head_dim, k,
                              k_stride, v, v_stride, slots, n_tokens);
      s != Status::kOk) {
    return s;
  }
  if (n_tokens == 0) return Status::kOk;
  const int64_t row = n_kv_head * head_dim;
  // Groups divide head_dim, so the token's whole row quantizes as its heads do.
  const size_t trb = row_bytes(dtype, row);
  const int64_t group = dtype_info(dtype).block_elems;
#pragma omp parallel for schedule(static) num_threads(threads_for(n_tokens * row * 2))
  for (int64_t t = 0; t < n_tokens; ++t) {
    thread_local std::vector<float> kr;
    kr.resize(static_cast<size_t>(row));
    kv_rotate_groups(k + t * k_stride, kr.data(), row, group);
    const int64_t id = slots[t] / page_size;
    const size_t off = static_cast<size_t>(slots[t] % page_size) * trb;
    quantize_row(dtype, kr.data(), static_cast<char*>(k_pages[id]) + off, row);
    quantize_row(dtype, v + t * v_stride, static_cast<char*>(v_pages[id]) + off, row);
  }
  if (k_min == nullptr || k_max == nullptr) return Status::kOk;
  // Min/max from the f32 keys, in token order within each chunk of elements.
  constexpr int64_t kChunk = 64;
  const int64_t n_chunks = (row + kChunk - 1) / kChunk;
  const int n_threads =
      static_cast<int>(std::min<int64_t>(n_chunks, threads_for(n_tokens * row, int64_t{1} << 15)));
#pragma omp parallel for schedule(static) num_threads(n_threads)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t e0 = c * kChunk;
    const int64_t en = std::min(kChunk, row - e0);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int64_t page = slots[t] / page_size;
      const float* src = k + t * k_stride + e0;
      float* mn = k_min + page * row + e0;
      float* mx = k_max + page * row + e0;
      if (slots[t] % page_size == 0) {
        std::memcpy(mn, src, static_cast<size_t>(en) * 4);
        std::memcpy(mx, src, static_cast<size_t>(en) * 4);
        continue;
      }
      for (int64_t e = 0; e < en; ++e) fold(src[e], &mn[e], &mx[e]);
    }
  }
  return Status::kOk;
}

Status kv_append_quant_ref(void* const* k_pages, void* const* v_pages, int64_t n_pages,
                           DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                           const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                           const int64_t* slots, int64_t n_tokens, float* k_min, float* k_max) {
  if (Status s = check_append(k_pages, v_pages, n_pages, dtype, page_size, n_kv_head, head_dim, k,
                              k_stride, v, v_stride, slots, n_tokens);
      s != Status::kOk) {
    return s;
  }
  const int64_t row = n_kv_head * head_dim;
  const size_t hrb = row_bytes(dtype, head_dim);
  std::vector<float> kr(static_cast<size_t>(head_dim));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t id = slots[t] / page_size;
    const int64_t off = slots[t] % page_size;
    for (int64_t g = 0; g < n_kv_head; ++g) {
      const size_t at = static_cast<size_t>(off * n_kv_head + g) * hrb;
      kv_rotate_groups(k + t * k_stride + g * head_dim, kr.data(), head_dim,
                       dtype_info(dtype).block_elems);
      quantize_row_ref(dtype, kr.data(), static_cast<char*>(k_pages[id]) + at, head_dim);
      quantize_row_ref(dtype, v + t * v_stride + g * head_dim, static_cast<char*>(v_pages[id]) + at,
                       head_dim);
    }
    if (k_min == nullptr || k_max == nullptr) continue;
    for (int64_t e = 0; e < row; ++e) {
      const float x = k[t * k_stride + e];
      float& mn = k_min[id * row + e];
      float& mx = k_max[id * row + e];
      if (off == 0) {
        mn = x;
        mx = x;
      } else if (std::isnan(x) || std::isnan(mn)) {
        mn = NAN;
        mx = NAN;
      } else {
        mn = std::min(mn, x);
        mx = std::max(mx, x);
      }
    }
  }
  return Status::kOk;
}

}  // namespace strata::cpu
