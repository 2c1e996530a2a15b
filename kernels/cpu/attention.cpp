#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/attention_decode.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kv_rows.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"
#include "quant/convert.h"

namespace strata::cpu {

Status check_attention_batch(const float* out, int64_t out_stride, const float* q,
                             int64_t q_stride, int64_t n_head, const KvPages& kv,
                             const AttentionBatch& b, int64_t* n_tokens, int64_t* max_new,
                             int64_t* work) {
  if (kv.head_dim > kMaxHeadDim) return Status::kUnsupported;
  if (kv.page_size < 1 || kv.n_kv_head < 1 || kv.head_dim < 1 || kv.n_pages < 0 || n_head < 1 ||
      n_head % kv.n_kv_head != 0 || b.n_seq < 0 ||
      (kv.n_pages > 0 && (kv.k == nullptr || kv.v == nullptr))) {
    return Status::kInvalidArgument;
  }
  if (b.lists != 1 && b.lists != kv.n_kv_head) return Status::kInvalidArgument;
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
    const int64_t span = static_cast<int64_t>(b.page_indptr[s + 1]) - b.page_indptr[s];
    const int64_t n_pg = span / b.lists;  // pages of each list
    const int64_t len = b.kv_len[s];
    if (n_new < 0 || span < 0 || span % b.lists != 0 || len < n_new || n_pg * kv.page_size < len) {
      return Status::kInvalidArgument;
    }
    if (n_pg > 0 && b.page_ids == nullptr) return Status::kInvalidArgument;
    const int64_t used = (len + kv.page_size - 1) / kv.page_size;
    for (int64_t l = 0; l < b.lists; ++l) {
      const int32_t* ids = seq_pages(b, s, l);
      for (int64_t i = 0; i < used; ++i) {
        const int32_t id = ids[i];
        if (id < 0 || id >= kv.n_pages || kv.k[id] == nullptr || kv.v[id] == nullptr) {
          return Status::kInvalidArgument;
        }
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

namespace {

constexpr int64_t kMaxRows = 32;  // query rows (tokens x heads of one kv head) per work item
constexpr int64_t kKeyBlock = kAttentionKeyBlock;




// Keys are processed in blocks of kKeyBlock: the block's K (then V) rows of
// one kv head are widened to f32 into an L1 tile, scored against every query
// row of the item, and folded into the running softmax.
//
// A block loader: rows key0 .. key0 + n - 1 of kv head g of a sequence
// (pages through ids) -> dst[n][ld] f32. Elements hd .. ld - 1 of each row
// are left as they are (zero).
using BlockLoader = void (*)(const KvPages& kv, const void* const* pages, const int32_t* ids,
                             int64_t key0, int64_t n, int64_t g, float* dst, int64_t ld);

inline const void* kv_row(const KvPages& kv, const void* const* pages, const int32_t* ids,
                          int64_t key, int64_t g) {
  const char* page = static_cast<const char*>(pages[ids[key / kv.page_size]]);
  return page + (key % kv.page_size * kv.n_kv_head + g) * kv.head_dim * elem_bytes(kv.dtype);
}

void load_block_generic(const KvPages& kv, const void* const* pages, const int32_t* ids,
                        int64_t key0, int64_t n, int64_t g, float* dst, int64_t ld) {
  for (int64_t j = 0; j < n; ++j) {
    const void* src = kv_row(kv, pages, ids, key0 + j, g);
    float* d = dst + j * ld;
    switch (kv.dtype) {
      case DType::kF32:
        std::memcpy(d, src, static_cast<size_t>(kv.head_dim) * 4);
        break;
      case DType::kF16:
        f16_to_f32_row(static_cast<const uint16_t*>(src), d, kv.head_dim);
        break;
      default:
        bf16_to_f32_row(static_cast<const uint16_t*>(src), d, kv.head_dim);
        break;
    }
  }
}

#if defined(__x86_64__)
// GCC 12 warns about the undefined pass-through operand inside several
// AVX-512 intrinsics of its own headers; nothing here reads one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// In-place transpose of a 16 x 16 f32 block held in 16 registers.
__attribute__((always_inline)) STRATA_AVX512 inline void transpose16(__m512* r) {
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
// sum_d qs[i][d] * kt[d] (a vector over the keys). The accumulators are
// named registers, not an array, so that they stay out of memory.
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

// The work item of attend_tile (below) with AVX-512: each block of 16 keys is
// widened and transposed to kt[d][key], so that a query row scores all 16
// keys with head_dim vector multiply-adds and no horizontal sums; the values
// stay row-major and are accumulated 16 dims at a time.
template <DType T>
STRATA_AVX512 void attend_tile_avx512(float* out, int64_t out_stride, const float* q,
                                      int64_t q_stride, const KvPages& kv, const int32_t* ids,
                                      int64_t g, int64_t h0, int64_t n_h, int64_t tok0,
                                      int64_t n_tok, int64_t pos0, float scale) {
  static_assert(kKeyBlock == 16);
  const int64_t hd = kv.head_dim;
  const int64_t n_rows = n_tok * n_h;
  alignas(64) float qs[kMaxRows][kMaxHeadDim];
  alignas(64) float acc[kMaxRows][kMaxHeadDim];
  alignas(64) float kt[kMaxHeadDim][16];
  alignas(64) float vt[16][kMaxHeadDim];
  alignas(64) float p[kMaxRows][16];
  float m[kMaxRows];
  float l[kMaxRows];
  int64_t pos[kMaxRows];
  auto chunk_mask = [hd](int64_t c) {
    return hd - c >= 16 ? static_cast<__mmask16>(0xffff)
                        : static_cast<__mmask16>((1u << (hd - c)) - 1);
  };
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t t = r / n_h;
    const float* qr = q + (tok0 + t) * q_stride + (h0 + r % n_h) * hd;
    for (int64_t c = 0; c < hd; c += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(chunk_mask(c), qr + c);
      _mm512_store_ps(&qs[r][c], _mm512_mul_ps(v, _mm512_set1_ps(scale)));
      _mm512_store_ps(&acc[r][c], _mm512_setzero_ps());
    }
    m[r] = -INFINITY;
    l[r] = 0.0f;
    pos[r] = pos0 + t;
  }
  const int64_t n_keys = pos0 + n_tok;  // keys 0 .. last position
  for (int64_t j0 = 0; j0 < n_keys; j0 += 16) {
    const int64_t jn = std::min<int64_t>(16, n_keys - j0);
    const void* rows[16];
    for (int64_t i = 0; i < jn; ++i) rows[i] = kv_row(kv, kv.k, ids, j0 + i, g);
    for (int64_t c = 0; c < hd; c += 16) {
      __m512 blk[16];
      for (int64_t i = 0; i < 16; ++i) {
        blk[i] = i < jn ? load16<T>(rows[i], c, chunk_mask(c)) : _mm512_setzero_ps();
      }
      transpose16(blk);
      for (int64_t i = 0; i < 16 && c + i < hd; ++i) _mm512_store_ps(kt[c + i], blk[i]);
    }
    // Scores of up to kScoreRows rows at a time, each a vector over the 16 keys.
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
      const void* row = kv_row(kv, kv.v, ids, j0 + i, g);
      for (int64_t c = 0; c < hd; c += 16)
        _mm512_store_ps(&vt[i][c], load16<T>(row, c, chunk_mask(c)));
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
      _mm512_mask_storeu_ps(o + c, chunk_mask(c), _mm512_mul_ps(_mm512_load_ps(&acc[r][c]), inv));
    }
  }
}

#pragma GCC diagnostic pop
#endif  // __x86_64__

// One work item: n_tok consecutive query tokens of one sequence (the first at
// flat row tok0 and position pos0) and query heads h0 .. h0 + n_h - 1, all
// reading kv head g. Online softmax over blocks of keys (flash attention),
// all in f32. Rows of the tiles are padded to ld (a multiple of 16) with
// zeros so that every inner loop runs over whole vectors.
STRATA_CLONES void attend_tile(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                               const KvPages& kv, const int32_t* ids, int64_t g, int64_t h0,
                               int64_t n_h, int64_t tok0, int64_t n_tok, int64_t pos0, float scale,
                               BlockLoader load) {
  const int64_t hd = kv.head_dim;
  const int64_t ld = (hd + 15) / 16 * 16;
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
    const int64_t h = h0 + r % n_h;
    const float* qr = q + (tok0 + t) * q_stride + h * hd;
    for (int64_t d = 0; d < ld; ++d) qs[r][d] = d < hd ? qr[d] * scale : 0.0f;
    for (int64_t d = 0; d < ld; ++d) acc[r][d] = 0.0f;
    m[r] = -INFINITY;
    l[r] = 0.0f;
    pos[r] = pos0 + t;
  }
  for (int64_t j = 0; j < kKeyBlock; ++j) {
    for (int64_t d = hd; d < ld; ++d) tile[j][d] = 0.0f;
  }
  const int64_t n_keys = pos0 + n_tok;  // keys 0 .. last position
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int64_t jn = std::min(kKeyBlock, n_keys - j0);
    load(kv, kv.k, ids, j0, jn, g, &tile[0][0], kMaxHeadDim);
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t visible = std::min(jn, pos[r] - j0 + 1);  // keys j0 .. pos[r]
      for (int64_t jj = 0; jj < jn; ++jj) {
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < ld; ++d) dot += qs[r][d] * tile[jj][d];
        sc[r][jj] = jj < visible ? dot : -INFINITY;
      }
      float mb = -INFINITY;
#pragma omp simd reduction(max : mb)
      for (int64_t jj = 0; jj < jn; ++jj) mb = sc[r][jj] > mb ? sc[r][jj] : mb;
      const float m_new = std::max(m[r], mb);
      if (m_new == -INFINITY) {  // no visible key in this block for this row
        for (int64_t jj = 0; jj < jn; ++jj) sc[r][jj] = 0.0f;
        continue;
      }
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t jj = 0; jj < jn; ++jj) {
        const float p = exp_fast(sc[r][jj] - m_new);
        sc[r][jj] = p;
        sum += p;
      }
      const float corr = exp_fast(m[r] - m_new);
      l[r] = l[r] * corr + sum;
      m[r] = m_new;
      if (corr != 1.0f) {
#pragma omp simd
        for (int64_t d = 0; d < ld; ++d) acc[r][d] *= corr;
      }
    }
    load(kv, kv.v, ids, j0, jn, g, &tile[0][0], kMaxHeadDim);
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t jj = 0; jj < jn; ++jj) {
        const float p = sc[r][jj];
#pragma omp simd
        for (int64_t d = 0; d < ld; ++d) acc[r][d] += p * tile[jj][d];
      }
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t t = r / n_h;
    const int64_t h = h0 + r % n_h;
    float* o = out + (tok0 + t) * out_stride + h * hd;
    const float inv = 1.0f / l[r];
    for (int64_t d = 0; d < hd; ++d) o[d] = acc[r][d] * inv;
  }
}

Status check_pages(const void* const* k_pages, const void* const* v_pages, int64_t n_pages,
                   DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim) {
  if (!kv_dtype_ok(dtype)) return Status::kUnsupported;
  if (n_pages < 0 || page_size < 1 || n_kv_head < 1 || head_dim < 1)
    return Status::kInvalidArgument;
  if (n_pages > 0 && (k_pages == nullptr || v_pages == nullptr)) return Status::kInvalidArgument;
  return Status::kOk;
}





}  // namespace

// f32/f16/bf16 pages; the shape checks are check_attention_batch's.
Status check_batch(const float* out, int64_t out_stride, const float* q, int64_t q_stride,
                   int64_t n_head, const KvPages& kv, const AttentionBatch& b, int64_t* n_tokens,
                   int64_t* max_new, int64_t* work) {
  if (!kv_dtype_ok(kv.dtype)) return Status::kUnsupported;
  return check_attention_batch(out, out_stride, q, q_stride, n_head, kv, b, n_tokens, max_new,
                               work);
}
Status check_append(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                    int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                    int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                    int64_t n_tokens) {
  if (Status s = check_pages(k_pages, v_pages, n_pages, dtype, page_size, n_kv_head, head_dim);
      s != Status::kOk) {
    return s;
  }
  if (n_tokens < 0) return Status::kInvalidArgument;
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
Status check_minmax(const float* k_min, const float* k_max, const void* const* k_pages,
                    int64_t n_pages, DType dtype, int64_t page_size, int64_t n_kv_head,
                    int64_t head_dim, const int32_t* page_ids, const int32_t* n_filled,
                    int64_t n_list) {
  if (Status s = check_pages(k_pages, k_pages, n_pages, dtype, page_size, n_kv_head, head_dim);
      s != Status::kOk) {
    return s;
  }
  if (n_list < 0) return Status::kInvalidArgument;
  if (n_list == 0) return Status::kOk;
  if (k_min == nullptr || k_max == nullptr || page_ids == nullptr || n_filled == nullptr) {
    return Status::kInvalidArgument;
  }
  for (int64_t i = 0; i < n_list; ++i) {
    if (page_ids[i] < 0 || page_ids[i] >= n_pages || k_pages[page_ids[i]] == nullptr ||
        n_filled[i] < 1 || n_filled[i] > page_size) {
      return Status::kInvalidArgument;
    }
  }
  return Status::kOk;
}


Status paged_attention(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                       int64_t n_head, const KvPages& kv, const AttentionBatch& batch,
                       float scale) {
  if (is_quantized(kv.dtype)) {  // quantized pages: kernels/cpu/attention_quant.h
    return paged_attention_quant(out, out_stride, q, q_stride, n_head, kv, batch, scale);
  }
  int64_t n_tokens = 0, max_new = 0, work = 0;
  if (Status s =
          check_batch(out, out_stride, q, q_stride, n_head, kv, batch, &n_tokens, &max_new, &work);
      s != Status::kOk || n_tokens == 0) {
    return s;
  }
  if (max_new == 1 &&  // decode: kernels/cpu/attention_decode.h
      paged_attention_decode(out, out_stride, q, q_stride, n_head, kv, batch, scale, work)) {
    return Status::kOk;
  }
  const int64_t group = n_head / kv.n_kv_head;
  // The query heads of one kv head share every key and value read, so an item
  // takes all of them (or chunks of kMaxRows when there are more); tokens
  // fill the rest of its rows (prefill).
  const int64_t n_h = std::min(group, kMaxRows);
  const int64_t n_hchunks = (group + n_h - 1) / n_h;
  const int64_t tile = std::max<int64_t>(1, kMaxRows / n_h);
  const int64_t max_tiles = (max_new + tile - 1) / tile;
  const int64_t per_tile = batch.n_seq * kv.n_kv_head * n_hchunks;  // items per tile index
  const int64_t n_items = max_tiles * per_tile;
  using TileFn = void (*)(float*, int64_t, const float*, int64_t, const KvPages&, const int32_t*,
                          int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float);
  TileFn avx512 = nullptr;
#if defined(__x86_64__)
  if (cpu_features().avx512) {
    avx512 = kv.dtype == DType::kF32   ? attend_tile_avx512<DType::kF32>
             : kv.dtype == DType::kF16 ? attend_tile_avx512<DType::kF16>
                                       : attend_tile_avx512<DType::kBF16>;
  }
#endif
  // Items are ordered last tile first: later query tiles see more keys, so the
  // longest work is handed out first.
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
    const int32_t* ids = seq_pages(batch, s, g);
    const int64_t n_hi = std::min(n_h, (g + 1) * group - h0);
    if (avx512 != nullptr) {
      avx512(out, out_stride, q, q_stride, kv, ids, g, h0, n_hi, batch.q_indptr[s] + first, n_tok,
             pos0, scale);
    } else {
      attend_tile(out, out_stride, q, q_stride, kv, ids, g, h0, n_hi, batch.q_indptr[s] + first,
                  n_tok, pos0, scale, load_block_generic);
    }
  }
  return Status::kOk;
}


Status kv_append(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                 int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                 int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                 int64_t n_tokens) {
  if (is_quantized(dtype)) {
    return kv_append_quant(k_pages, v_pages, n_pages, dtype, page_size, n_kv_head, head_dim, k,
                           k_stride, v, v_stride, slots, n_tokens, nullptr, nullptr);
  }
  if (Status s = check_append(k_pages, v_pages, n_pages, dtype, page_size, n_kv_head, head_dim, k,
                              k_stride, v, v_stride, slots, n_tokens);
      s != Status::kOk) {
    return s;
  }
  const int64_t row = n_kv_head * head_dim;
  const int64_t row_bytes = row * elem_bytes(dtype);
#pragma omp parallel for schedule(static) num_threads(threads_for(n_tokens* row * 2))
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t id = slots[t] / page_size;
    const int64_t off = (slots[t] % page_size) * row_bytes;
    store_row(dtype, k + t * k_stride, static_cast<char*>(k_pages[id]) + off, row);
    store_row(dtype, v + t * v_stride, static_cast<char*>(v_pages[id]) + off, row);
  }
  return Status::kOk;
}


Status page_key_minmax(float* k_min, float* k_max, const void* const* k_pages, int64_t n_pages,
                       DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                       const int32_t* page_ids, const int32_t* n_filled, int64_t n_list) {
  if (Status s = check_minmax(k_min, k_max, k_pages, n_pages, dtype, page_size, n_kv_head, head_dim,
                              page_ids, n_filled, n_list);
      s != Status::kOk) {
    return s;
  }
  const int64_t row = n_kv_head * head_dim;
  const int64_t eb = elem_bytes(dtype);
  constexpr int64_t kChunk = 1024;
#pragma omp parallel for schedule(static) num_threads(threads_for(n_list* row* page_size))
  for (int64_t i = 0; i < n_list; ++i) {
    const char* page = static_cast<const char*>(k_pages[page_ids[i]]);
    float* mn = k_min + page_ids[i] * row;
    float* mx = k_max + page_ids[i] * row;
    alignas(64) float buf[kChunk];
    for (int64_t c0 = 0; c0 < row; c0 += kChunk) {
      const int64_t cn = std::min(kChunk, row - c0);
      for (int64_t t = 0; t < n_filled[i]; ++t) {
        const void* src = page + (t * row + c0) * eb;
        switch (dtype) {
          case DType::kF32:
            std::memcpy(buf, src, static_cast<size_t>(cn) * 4);
            break;
          case DType::kF16:
            f16_to_f32_row(static_cast<const uint16_t*>(src), buf, cn);
            break;
          default:
            bf16_to_f32_row(static_cast<const uint16_t*>(src), buf, cn);
            break;
        }
        if (t == 0) {
          std::memcpy(mn + c0, buf, static_cast<size_t>(cn) * 4);
          std::memcpy(mx + c0, buf, static_cast<size_t>(cn) * 4);
          continue;
        }
        for (int64_t e = 0; e < cn; ++e) {
          const float x = buf[e];
          mn[c0 + e] = (x < mn[c0 + e] || x != x) ? x : mn[c0 + e];
          mx[c0 + e] = (x > mx[c0 + e] || x != x) ? x : mx[c0 + e];
        }
      }
    }
  }
  return Status::kOk;
}


}  // namespace strata::cpu
