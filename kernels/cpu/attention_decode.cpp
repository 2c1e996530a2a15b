#include "kernels/cpu/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/attention_decode_units.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kv_rows.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/shared_pages.h"
#include "kernels/cpu/vec_math.h"

namespace strata::cpu {

namespace {

using namespace decode;

#if defined(__x86_64__)

// GCC 12 warns about the undefined pass-through operand inside several
// AVX-512 intrinsics of its own headers; nothing here reads one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Sums of 16 vectors, one per key, into one vector of the 16 sums (lane j =
// the sum of the lanes of vector j): the stages of a 16 x 16 transpose with
// the additions folded in. Pairs of keys come in as they are scored; the tree
// keeps one pending vector per level.
struct KeySums {
  __m512 l1, l2, l3, out;
};

template <int I>  // pair I: keys 2I, 2I + 1
STRATA_AVX512 inline void key_sums_push(KeySums& t, __m512 a, __m512 b) {
  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3].
  const __m512 x = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  if constexpr (I % 2 == 0) {
    t.l1 = x;
    return;
  }
  // Per 128-bit lane: the lane's sums of keys 4i .. 4i+3.
  const __m512d p = _mm512_castps_pd(t.l1), q = _mm512_castps_pd(x);
  const __m512 y = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(p, q)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(p, q)));
  if constexpr (I % 4 == 1) {
    t.l2 = y;
    return;
  }
  // 128-bit lanes: keys 8i..+3 (half), keys 8i..+3 (other half), keys 8i+4..+7 (x2).
  const __m512 z =
      _mm512_add_ps(_mm512_shuffle_f32x4(t.l2, y, 0x88), _mm512_shuffle_f32x4(t.l2, y, 0xdd));
  if constexpr (I == 3) {
    t.l3 = z;
    return;
  }
  t.out = _mm512_add_ps(_mm512_shuffle_f32x4(t.l3, z, 0x88), _mm512_shuffle_f32x4(t.l3, z, 0xdd));
}

// Scores of keys 2I, 2I + 1 (rows krow[2I], krow[2I + 1] from element off)
// against NR query rows, pushed into the rows' sum trees.
// NC > 0: hd == 16 NC, known at compile time (the loops unroll, no masks).
template <DType T, int NR, int NC, int I>
STRATA_AVX512 inline void score_pair(const float (*qs)[kMaxHeadDim], const char* const* krow,
                                     int64_t off, int64_t hd_rt, __mmask16 tail, KeySums* t) {
  const int64_t hd = NC > 0 ? 16 * NC : hd_rt;
  __m512 a[NR], b[NR];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) a[r] = b[r] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int64_t d = 0; d < hd; d += 16) {
    const __mmask16 mk = hd - d >= 16 ? static_cast<__mmask16>(0xffff) : tail;
    const __m512 ka = load16<T>(krow[2 * I], off + d, mk);
    const __m512 kb = load16<T>(krow[2 * I + 1], off + d, mk);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512 qv = _mm512_load_ps(&qs[r][d]);
      a[r] = _mm512_fmadd_ps(qv, ka, a[r]);
      b[r] = _mm512_fmadd_ps(qv, kb, b[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) key_sums_push<I>(t[r], a[r], b[r]);
}

// One block of jn <= 16 keys for NR query rows of one kv head: scores, the
// online softmax update (flash attention) and the value sums.
// qs, acc: [NR][kMaxHeadDim] the rows' scaled queries and running value sums
//          (both zero from hd to the next multiple of 16)
// m, l: [NR] running max and sum of exponentials
// krow, vrow: [16] the block's K and V rows; rows past jn repeat a valid row
//             (their scores are masked out, their values unused)
// NC > 0: hd == 16 NC (compile time).
template <DType T, int NR, int NC>
STRATA_AVX512 void decode_block(const float (*qs)[kMaxHeadDim], float (*acc)[kMaxHeadDim],
                                float* m, float* l, const char* const* krow,
                                const char* const* vrow, int64_t off, int64_t hd_rt, int64_t jn) {
  const int64_t hd = NC > 0 ? 16 * NC : hd_rt;
  const __mmask16 tail = hd % 16 == 0 ? static_cast<__mmask16>(0xffff)
                                      : static_cast<__mmask16>((1u << (hd % 16)) - 1);
  KeySums t[NR];
  score_pair<T, NR, NC, 0>(qs, krow, off, hd, tail, t);
  score_pair<T, NR, NC, 1>(qs, krow, off, hd, tail, t);
  score_pair<T, NR, NC, 2>(qs, krow, off, hd, tail, t);
  score_pair<T, NR, NC, 3>(qs, krow, off, hd, tail, t);
  score_pair<T, NR, NC, 4>(qs, krow, off, hd, tail, t);
  score_pair<T, NR, NC, 5>(qs, krow, off, hd, tail, t);
  score_pair<T, NR, NC, 6>(qs, krow, off, hd, tail, t);
  score_pair<T, NR, NC, 7>(qs, krow, off, hd, tail, t);
  const __mmask16 vis = static_cast<__mmask16>((1u << jn) - 1);
  alignas(64) float p[NR][16];
  float corr[NR];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    const __m512 sv = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis, t[r].out);
    const float mb = _mm512_reduce_max_ps(sv);
    const float m_new = std::max(m[r], mb);
    if (m_new == -INFINITY) {  // every score so far is -inf
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
  if constexpr (NC > 0 && NR * NC <= 16) {
    // All NR x NC value sums in registers: NR NC independent chains per key.
    __m512 a[NR][NC];
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 16
      for (int d = 0; d < NC; ++d) {
        a[r][d] = _mm512_load_ps(&acc[r][16 * d]);
        if (corr[r] != 1.0f) a[r][d] = _mm512_mul_ps(a[r][d], _mm512_set1_ps(corr[r]));
      }
    }
    for (int64_t i = 0; i < jn; ++i) {
#pragma GCC unroll 16
      for (int d = 0; d < NC; ++d) {
        const __m512 v = load16<T>(vrow[i], off + 16 * d, static_cast<__mmask16>(0xffff));
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r) {
          a[r][d] = _mm512_fmadd_ps(_mm512_set1_ps(p[r][i]), v, a[r][d]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 16
      for (int d = 0; d < NC; ++d) _mm512_store_ps(&acc[r][16 * d], a[r][d]);
    }
  } else {
#pragma GCC unroll 16
    for (int64_t d = 0; d < hd; d += 16) {
      const __mmask16 mk = hd - d >= 16 ? static_cast<__mmask16>(0xffff) : tail;
      __m512 a[NR];
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        a[r] = _mm512_load_ps(&acc[r][d]);
        if (corr[r] != 1.0f) a[r] = _mm512_mul_ps(a[r], _mm512_set1_ps(corr[r]));
      }
      for (int64_t i = 0; i < jn; ++i) {
        const __m512 v = load16<T>(vrow[i], off + d, mk);
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r][i]), v, a[r]);
      }
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) _mm512_store_ps(&acc[r][d], a[r]);
    }
  }
}

// decode_block for 1 <= n_rows <= 4 rows.
template <DType T, int NC>
STRATA_AVX512 inline void decode_block_rows(int64_t n_rows, const float (*qs)[kMaxHeadDim],
                                            float (*acc)[kMaxHeadDim], float* m, float* l,
                                            const char* const* krow, const char* const* vrow,
                                            int64_t off, int64_t hd, int64_t jn) {
  switch (n_rows) {
    case 1:
      return decode_block<T, 1, NC>(qs, acc, m, l, krow, vrow, off, hd, jn);
    case 2:
      return decode_block<T, 2, NC>(qs, acc, m, l, krow, vrow, off, hd, jn);
    case 3:
      return decode_block<T, 3, NC>(qs, acc, m, l, krow, vrow, off, hd, jn);
    default:
      return decode_block<T, 4, NC>(qs, acc, m, l, krow, vrow, off, hd, jn);
  }
}

// Runs units[0 .. n) on the calling thread. NC > 0: head_dim == 16 NC.
template <DType T, int NC>
STRATA_AVX512 void decode_units(const DecodeCtx& c, const DecodeUnit* units, int64_t n) {
  const KvPages& kv = *c.kv;
  const int64_t hd = kv.head_dim;
  alignas(64) float qs[kDecodeRows][kMaxHeadDim];
  alignas(64) float acc[kDecodeRows][kMaxHeadDim];
  float m[kDecodeRows];
  float l[kDecodeRows];
  auto chunk_mask = [hd](int64_t d) {
    return hd - d >= 16 ? static_cast<__mmask16>(0xffff)
                        : static_cast<__mmask16>((1u << (hd - d)) - 1);
  };
  // The prefetch cursor: unit pu, block at key pj, step pg (one per kv head
  // of the range), kDecodePrefetch blocks ahead of the compute; each step
  // prefetches its share of the block's K and V rows, as the compute goes.
  const int64_t head_bytes = hd * elem_bytes(kv.dtype);
  const int64_t row_bytes = kv.n_kv_head * head_bytes;
  int64_t pu = 0, pj = units[0].j0, pg = c.ranges[units[0].hr].g0;
  const char* pk[16];
  const char* pv[16];
  int64_t pn = 0;          // rows of the block in pk, pv (0: not yet computed)
  bool p_span = false;     // the block is one contiguous span of whole rows
  auto prefetch_step = [&] {
    if (pu >= n) return;
    const DecodeUnit& u = units[pu];
    const HeadRange& hr = c.ranges[u.hr];
    const int64_t n_g = hr.g1 - hr.g0;
    if (pn == 0) {
      pn = std::min<int64_t>(16, u.j1 - pj);
      block_rows(kv, seq_pages(*c.b, u.s, hr.g0), pj, pn, hr.g0, pk, pv);
      p_span = n_g == kv.n_kv_head && pk[pn - 1] - pk[0] == (pn - 1) * row_bytes &&
               pv[pn - 1] - pv[0] == (pn - 1) * row_bytes;
    }
    if (p_span) {  // this step's share of the lines of both spans
      const int64_t bytes = pn * row_bytes;
      const int64_t k = pg - hr.g0;
      const uintptr_t k0 = reinterpret_cast<uintptr_t>(pk[0]) & ~uintptr_t{63};
      const uintptr_t v0 = reinterpret_cast<uintptr_t>(pv[0]) & ~uintptr_t{63};
      const int64_t n_lines =
          static_cast<int64_t>(((reinterpret_cast<uintptr_t>(pk[0]) + bytes - 1) >> 6) - (k0 >> 6)) +
          1;
      for (int64_t i = n_lines * k / n_g; i < n_lines * (k + 1) / n_g; ++i) {
        prefetch_l1(reinterpret_cast<const char*>(k0 + 64 * i));
        prefetch_l1(reinterpret_cast<const char*>(v0 + 64 * i));
      }
      if (k + 1 == n_g) prefetch_l1(pv[pn - 1] + row_bytes - 1);  // V may straddle one more
    } else {
      prefetch_rows(pk, pn, (pg - hr.g0) * head_bytes, head_bytes);
      prefetch_rows(pv, pn, (pg - hr.g0) * head_bytes, head_bytes);
    }
    if (++pg < hr.g1) return;
    pn = 0;
    pj += 16;
    if (pj >= u.j1 && ++pu < n) pj = units[pu].j0;
    pg = pu < n ? c.ranges[units[pu].hr].g0 : 0;
  };
  const int64_t g_first = c.ranges[units[0].hr].g1 - c.ranges[units[0].hr].g0;
  for (int64_t i = 0; i < kDecodePrefetch * g_first; ++i) prefetch_step();

  for (int64_t ui = 0; ui < n; ++ui) {
    const DecodeUnit& u = units[ui];
    const HeadRange& hr = c.ranges[u.hr];
    const int64_t n_rows = u.n_s * (hr.h1 - hr.h0);
    if (lane_unit_runs(c, u)) {
      lane_unit(c, u);
      // The prefetch cursor restarts at the next unit.
      pu = ui + 1;
      pn = 0;
      if (pu < n) {
        pj = units[pu].j0;
        pg = c.ranges[units[pu].hr].g0;
        const int64_t n_g = c.ranges[units[pu].hr].g1 - pg;
        for (int64_t i = 0; i < kDecodePrefetch * n_g; ++i) prefetch_step();
      }
      continue;
    }
    const int32_t* ids = seq_pages(*c.b, u.s, hr.g0);
    for (int64_t r = 0; r < n_rows; ++r) {
      int64_t seq = 0, head = 0;
      unit_row(c, u, hr, r, &seq, &head);
      const float* qr = c.q + c.b->q_indptr[seq] * c.q_stride + head * hd;
      for (int64_t d = 0; d < hd; d += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(chunk_mask(d), qr + d);
        _mm512_store_ps(&qs[r][d], _mm512_mul_ps(v, _mm512_set1_ps(c.scale)));
        _mm512_store_ps(&acc[r][d], _mm512_setzero_ps());
      }
      m[r] = -INFINITY;
      l[r] = 0.0f;
    }
    for (int64_t j0 = u.j0; j0 < u.j1; j0 += 16) {
      const int64_t jn = std::min<int64_t>(16, u.j1 - j0);
      const char* krow[16];
      const char* vrow[16];
      block_rows(kv, ids, j0, jn, hr.g0, krow, vrow);
      for (int64_t g = hr.g0; g < hr.g1; ++g) {
        // This kv head's query rows among the unit's, four at a time.
        const int64_t r0 = u.n_s > 1 ? (g - hr.g0) * u.n_s * c.group
                                     : std::max<int64_t>(hr.h0, g * c.group) - hr.h0;
        const int64_t r1 =
            u.n_s > 1 ? r0 + u.n_s * c.group : std::min<int64_t>(hr.h1, (g + 1) * c.group) - hr.h0;
        const int64_t off = (g - hr.g0) * hd;  // elements into the rows
        prefetch_step();
        for (int64_t r = r0; r < r1; r += 4) {
          decode_block_rows<T, NC>(std::min<int64_t>(4, r1 - r), &qs[r], &acc[r], &m[r], &l[r], krow,
                               vrow, off, hd, jn);
        }
      }
    }
    if (u.part < 0) {  // a whole sequence (n_s == 1)
      const int64_t tok = c.b->q_indptr[u.s];
      for (int64_t r = 0; r < n_rows; ++r) {
        float* o = c.out + tok * c.out_stride + (hr.h0 + r) * hd;
        const __m512 inv = _mm512_set1_ps(1.0f / l[r]);
        for (int64_t d = 0; d < hd; d += 16) {
          _mm512_mask_storeu_ps(o + d, chunk_mask(d),
                                _mm512_mul_ps(_mm512_load_ps(&acc[r][d]), inv));
        }
      }
    } else {
      float* part = c.parts + static_cast<int64_t>(u.part) * kPartRows * (hd + 2);
      for (int64_t r = 0; r < n_rows; ++r) {
        float* pr = part + r * (hd + 2);
        std::memcpy(pr, acc[r], static_cast<size_t>(hd) * sizeof(float));
        pr[hd] = m[r];
        pr[hd + 1] = l[r];
      }
    }
  }
}

#pragma GCC diagnostic pop
#endif  // __x86_64__

}  // namespace

bool paged_attention_decode(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                            int64_t n_head, const KvPages& kv, const AttentionBatch& b,
                            float scale, int64_t work) {
#if defined(__x86_64__)
  if (!cpu_features().avx512) return false;
  const int64_t group = n_head / kv.n_kv_head;
  std::vector<HeadRange> ranges;
  if (group <= kDecodeRows) {
    // Several kv heads read whole token rows at once, unless each kv head
    // has its own page list.
    const int64_t per = b.lists > 1 ? 1 : kDecodeRows / group;
    for (int64_t g = 0; g < kv.n_kv_head; g += per) {
      const int64_t g1 = std::min(kv.n_kv_head, g + per);
      ranges.push_back({static_cast<int32_t>(g), static_cast<int32_t>(g1),
                        static_cast<int32_t>(g * group), static_cast<int32_t>(g1 * group)});
    }
  } else {
    for (int64_t g = 0; g < kv.n_kv_head; ++g) {
      for (int64_t h = g * group; h < (g + 1) * group; h += kDecodeRows) {
        ranges.push_back({static_cast<int32_t>(g), static_cast<int32_t>(g + 1),
                          static_cast<int32_t>(h),
                          static_cast<int32_t>(std::min((g + 1) * group, h + kDecodeRows))});
      }
    }
  }
  const int n_threads = threads_for(work, int64_t{1} << 16);
  int64_t total_keys = 0;
  for (int64_t s = 0; s < b.n_seq; ++s) {
    if (b.q_indptr[s + 1] > b.q_indptr[s]) total_keys += b.kv_len[s];
  }
  const int64_t chunk = std::clamp<int64_t>(
      (total_keys / n_threads + kAttentionKeyBlock - 1) / kAttentionKeyBlock * kAttentionKeyBlock,
      kMinChunkKeys, kMaxChunkKeys);
  // Groups of sequences sharing their first pages: the shared keys are cut
  // into chunks of their own (their end is a page end, so key blocks fall as
  // in the uncut sequence) and taken by shared units, each for as many
  // members as fit its rows over whole kv heads: kLaneRows of one kv head
  // in lane_unit where the head dim allows and a subgroup has kLaneMinRows,
  // else kDecodeRows (the fewer kv heads a range takes, the more members;
  // the pages are read once per unit); each member's own keys follow in
  // units of its own.
  const int64_t n_seq_ranges = static_cast<int64_t>(ranges.size());
  std::vector<SharedPages> shared;
  if (group * 2 <= kDecodeRows) shared = shared_page_groups(b, kv.page_size);
  std::vector<int64_t> shared_keys(static_cast<size_t>(b.n_seq), 0);
  std::vector<int32_t> group_at(static_cast<size_t>(b.n_seq), -1);  // at its first member
  for (size_t gi = 0; gi < shared.size(); ++gi) {
    group_at[static_cast<size_t>(shared[gi].seqs[0])] = static_cast<int32_t>(gi);
    for (const int32_t s : shared[gi].seqs) {
      shared_keys[static_cast<size_t>(s)] = shared[gi].n_pages * kv.page_size;
    }
  }
  std::map<int64_t, size_t> ranges_of;  // kv heads per range -> its first range (shared units)
  auto whole_head_ranges = [&](int64_t per) {
    const auto [it, fresh] = ranges_of.try_emplace(per, ranges.size());
    for (int64_t g = 0; fresh && g < kv.n_kv_head; g += per) {
      const int64_t g1 = std::min(kv.n_kv_head, g + per);
      ranges.push_back({static_cast<int32_t>(g), static_cast<int32_t>(g1),
                        static_cast<int32_t>(g * group), static_cast<int32_t>(g1 * group)});
    }
    return it->second;
  };
  std::vector<int32_t> shared_seqs;
  std::vector<DecodeUnit> units;
  std::vector<int64_t> cost_end;  // cumulative cost after each unit
  int32_t n_parts = 0;
  int64_t cost = 0;
  // A unit's cost: its keys times its reads (a kv head's K and V rows of a
  // key, counted as kReadCost query rows' arithmetic) and its query rows.
  constexpr int64_t kReadCost = 16;
  auto add_unit = [&](const DecodeUnit& u) {
    const HeadRange& hr = ranges[static_cast<size_t>(u.hr)];
    units.push_back(u);
    cost +=
        static_cast<int64_t>(u.j1 - u.j0) * ((hr.g1 - hr.g0) * kReadCost + u.n_s * (hr.h1 - hr.h0));
    cost_end.push_back(cost);
  };
  for (int64_t s = 0; s < b.n_seq; ++s) {
    if (b.q_indptr[s + 1] == b.q_indptr[s]) continue;
    if (group_at[static_cast<size_t>(s)] >= 0) {  // the shared units of its group
      const SharedPages& grp = shared[static_cast<size_t>(group_at[static_cast<size_t>(s)])];
      const int64_t n_members = static_cast<int64_t>(grp.seqs.size());
      const bool lanes = kv.head_dim % 4 == 0;  // lane_unit takes the large subgroups
      const int64_t max_s = (lanes ? kLaneRows : kDecodeRows) / group;
      const int64_t n_sub = (n_members + max_s - 1) / max_s;
      const int64_t keys = grp.n_pages * kv.page_size;
      // Chunks of equal length (whole key blocks), for an even split.
      const int64_t n_chunks = (keys + chunk - 1) / chunk;
      const int64_t shared_chunk =
          (keys / n_chunks + kAttentionKeyBlock - 1) / kAttentionKeyBlock * kAttentionKeyBlock;
      for (int64_t sub = 0; sub < n_sub; ++sub) {
        const int64_t i0 = n_members * sub / n_sub, i1 = n_members * (sub + 1) / n_sub;
        // Enough rows for lane_unit: one kv head per unit.
        const int64_t per =
            lanes && (i1 - i0) * group >= kLaneMinRows
                ? 1
                : std::clamp<int64_t>(kDecodeRows / (group * (i1 - i0)), 1, kv.n_kv_head);
        const size_t r0 = whole_head_ranges(per);
        const auto s_list = static_cast<int32_t>(shared_seqs.size());
        shared_seqs.insert(shared_seqs.end(), grp.seqs.begin() + i0, grp.seqs.begin() + i1);
        for (size_t r = r0; r < r0 + static_cast<size_t>((kv.n_kv_head + per - 1) / per); ++r) {
          for (int64_t j0 = 0; j0 < keys; j0 += shared_chunk) {
            add_unit({grp.seqs[static_cast<size_t>(i0)], static_cast<int32_t>(r),
                      static_cast<int32_t>(j0),
                      static_cast<int32_t>(std::min(keys, j0 + shared_chunk)), n_parts++,
                      static_cast<int32_t>(i1 - i0), s_list});
          }
        }
      }
    }
    const int64_t first = shared_keys[static_cast<size_t>(s)], len = b.kv_len[s];
    const int64_t n_chunks = (len - first + chunk - 1) / chunk;
    const bool cut = n_chunks > 1 || first > 0;
    for (int64_t r = 0; r < n_seq_ranges; ++r) {
      for (int64_t ci = 0; ci < n_chunks; ++ci) {
        const int64_t j0 = first + ci * chunk, j1 = std::min(len, j0 + chunk);
        add_unit({static_cast<int32_t>(s), static_cast<int32_t>(r), static_cast<int32_t>(j0),
                  static_cast<int32_t>(j1), cut ? n_parts++ : -1, 1, -1});
      }
    }
  }
  if (units.empty()) return true;
  static thread_local std::vector<float> parts;
  const int64_t hd = kv.head_dim;
  parts.resize(static_cast<size_t>(n_parts * kPartRows * (hd + 2)));
  const DecodeCtx ctx{&kv,   &b,           ranges.data(),     group, out, out_stride, q, q_stride,
                      scale, parts.data(), shared_seqs.data()};
  using RunFn = void (*)(const DecodeCtx&, const DecodeUnit*, int64_t);
  // Head dims 64 and 128 get their own code (everything unrolled).
  auto pick = [&](auto nc) -> RunFn {
    constexpr int kNc = decltype(nc)::value;
    return kv.dtype == DType::kF32   ? decode_units<DType::kF32, kNc>
           : kv.dtype == DType::kF16 ? decode_units<DType::kF16, kNc>
                                     : decode_units<DType::kBF16, kNc>;
  };
  const RunFn run = hd == 64    ? pick(std::integral_constant<int, 4>())
                    : hd == 128 ? pick(std::integral_constant<int, 8>())
                                : pick(std::integral_constant<int, 0>());
  const int n_run =
      static_cast<int>(std::min<int64_t>(n_threads, static_cast<int64_t>(units.size())));
#pragma omp parallel num_threads(n_run)
  {
    // A contiguous run of units per thread, cut where the cumulative cost
    // crosses an equal share.
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    auto first_at = [&](int64_t k) {
      if (k == 0) return int64_t{0};
      if (k == nt) return static_cast<int64_t>(units.size());
      return static_cast<int64_t>(
          std::upper_bound(cost_end.begin(), cost_end.end(), cost * k / nt) - cost_end.begin());
    };
    const int64_t u0 = first_at(t), u1 = first_at(t + 1);
    if (u1 > u0) run(ctx, units.data() + u0, u1 - u0);
  }
  if (n_parts == 0) return true;
  // Merge the partial states of each cut (sequence, query head) in key
  // order: with M the largest running max,
  // out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c.
  struct PartRow {
    int32_t s, h, j0;
    int64_t at;  // its state: parts + at * (hd + 2)
  };
  std::vector<PartRow> rows;
  for (const DecodeUnit& u : units) {
    if (u.part < 0) continue;
    const HeadRange& hr = ranges[static_cast<size_t>(u.hr)];
    for (int64_t r = 0; r < u.n_s * (hr.h1 - hr.h0); ++r) {
      int64_t seq = 0, head = 0;
      unit_row(ctx, u, hr, r, &seq, &head);
      rows.push_back({static_cast<int32_t>(seq), static_cast<int32_t>(head), u.j0,
                      int64_t{u.part} * kPartRows + r});
    }
  }
  std::sort(rows.begin(), rows.end(), [](const PartRow& x, const PartRow& y) {
    return std::tie(x.s, x.h, x.j0) < std::tie(y.s, y.h, y.j0);
  });
  for (size_t i = 0; i < rows.size();) {
    size_t e = i + 1;
    while (e < rows.size() && rows[e].s == rows[i].s && rows[e].h == rows[i].h) ++e;
    auto row = [&](size_t k) { return parts.data() + rows[k].at * (hd + 2); };
    float mx = -INFINITY;
    for (size_t k = i; k < e; ++k) mx = std::max(mx, row(k)[hd]);
    float* o = out + b.q_indptr[rows[i].s] * out_stride + rows[i].h * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] = 0.0f;
    float l = 0.0f;
    for (size_t k = i; k < e; ++k) {
      const float* pr = row(k);
      const float w = pr[hd] == -INFINITY ? 0.0f : exp_fast(pr[hd] - mx);
      l += w * pr[hd + 1];
      for (int64_t d = 0; d < hd; ++d) o[d] += w * pr[d];
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
    i = e;
  }
  return true;
#else
  (void)out, (void)out_stride, (void)q, (void)q_stride, (void)n_head, (void)kv, (void)b,
      (void)scale, (void)work;
  return false;
#endif
}

}  // namespace strata::cpu
