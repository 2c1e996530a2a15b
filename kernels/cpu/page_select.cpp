// Query-aware page selection (page_select.h): the kernel and its reference.
#include "kernels/cpu/page_select.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"

namespace strata::cpu {

namespace {

// The group's bound on one page: sum over its query heads h and elements d
// of max(q_hd max_d, q_hd min_d), in f32 (element order; the AVX-512 path
// adds 16 lanes at a time and then the lanes).
float page_bound(const float* q, const float* mn, const float* mx, int64_t group, int64_t hd) {
  float acc = 0;
  for (int64_t h = 0; h < group; ++h) {
    const float* qh = q + h * hd;
    for (int64_t d = 0; d < hd; ++d) acc += std::max(qh[d] * mx[d], qh[d] * mn[d]);
  }
  return acc;
}

#if defined(__x86_64__)
// GCC 12's AVX-512 headers trip these on their own code (as in attention.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define STRATA_PAGE_SELECT_AVX512 __attribute__((target("avx512f,avx512dq")))
STRATA_PAGE_SELECT_AVX512 float page_bound_avx512(const float* q, const float* mn, const float* mx,
                                                  int64_t group, int64_t hd) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t h = 0; h < group; ++h) {
    const float* qh = q + h * hd;
    for (int64_t d = 0; d < hd; d += 16) {
      const __mmask16 m = hd - d >= 16 ? static_cast<__mmask16>(0xffff)
                                       : static_cast<__mmask16>((1u << (hd - d)) - 1);
      const __m512 qv = _mm512_maskz_loadu_ps(m, qh + d);
      const __m512 a = _mm512_mul_ps(qv, _mm512_maskz_loadu_ps(m, mx + d));
      const __m512 b = _mm512_mul_ps(qv, _mm512_maskz_loadu_ps(m, mn + d));
      acc = _mm512_add_ps(acc, _mm512_max_ps(a, b));
    }
  }
  return _mm512_reduce_add_ps(acc);
}
#pragma GCC diagnostic pop
#endif

Status check(const float* q, int64_t q_stride, int64_t n_head, const PageSelect& sel,
             const AttentionBatch& b, const int32_t* sel_indptr, const int32_t* sel_ids) {
  if (sel.n_kv_head < 1 || sel.head_dim < 1 || sel.page_size < 1 || n_head < 1 ||
      n_head % sel.n_kv_head != 0 || b.n_seq < 0 || sel.budget_pages < (sel.keep_first ? 2 : 1)) {
    return Status::kInvalidArgument;
  }
  if (b.n_seq == 0) return Status::kOk;
  if (q == nullptr || q_stride < n_head * sel.head_dim || sel.k_min == nullptr ||
      sel.k_max == nullptr || b.q_indptr == nullptr || b.kv_len == nullptr ||
      b.page_indptr == nullptr || b.page_ids == nullptr || sel_indptr == nullptr ||
      sel_ids == nullptr || sel_indptr[0] != 0) {
    return Status::kInvalidArgument;
  }
  for (int64_t s = 0; s < b.n_seq; ++s) {
    const int64_t len = b.kv_len[s];
    const int64_t n = (len + sel.page_size - 1) / sel.page_size;
    if (b.q_indptr[s] != s || b.q_indptr[s + 1] != s + 1 || len < 1 ||
        b.page_indptr[s + 1] - b.page_indptr[s] < n ||
        sel_indptr[s + 1] - sel_indptr[s] != sel.n_kv_head * std::min(n, sel.budget_pages)) {
      return Status::kInvalidArgument;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = b.page_ids[b.page_indptr[s] + i];
      if (id < 0 || id >= sel.n_pages) return Status::kInvalidArgument;
    }
  }
  return Status::kOk;
}

// Keeps `m` of the n pages of one (sequence, kv head) given their scores
// (score[i] of the i-th page of the table; the first and last entries are not
// read when kept anyway) and writes their ids in table order to out.
template <typename Score>
void keep_top(const std::vector<Score>& score, const int32_t* ids, int64_t n, int64_t m,
              bool keep_first, int32_t* out, std::vector<int64_t>& order) {
  if (m >= n) {
    std::copy(ids, ids + n, out);
    return;
  }
  const int64_t lo = keep_first ? 1 : 0;
  order.resize(static_cast<size_t>(n - 1 - lo));
  std::iota(order.begin(), order.end(), lo);
  const int64_t k = m - 1 - lo;  // besides the last (and first)
  auto higher = [&](int64_t a, int64_t b) {
    const Score sa = score[static_cast<size_t>(a)], sb = score[static_cast<size_t>(b)];
    return sa > sb || (sa == sb && a < b);
  };
  std::nth_element(order.begin(), order.begin() + k, order.end(), higher);
  order.resize(static_cast<size_t>(k));
  if (keep_first) order.push_back(0);
  order.push_back(n - 1);
  std::sort(order.begin(), order.end());
  for (size_t i = 0; i < order.size(); ++i) out[i] = ids[order[i]];
}

// A NaN bound (a NaN key) ranks first: the page is read, as dense attention
// would read it.
template <typename Score>
Score rank(Score v) {
  return std::isnan(v) ? std::numeric_limits<Score>::infinity() : v;
}

Status select_fast(const float* q, int64_t q_stride, int64_t n_head, const PageSelect& sel,
                   const AttentionBatch& b, const int32_t* sel_indptr, int32_t* sel_ids) {
  if (Status st = check(q, q_stride, n_head, sel, b, sel_indptr, sel_ids); st != Status::kOk) {
    return st;
  }
  const int64_t hd = sel.head_dim, row = sel.n_kv_head * hd, group = n_head / sel.n_kv_head;
  const int64_t n_items = b.n_seq * sel.n_kv_head;
  int64_t work = 0;
  for (int64_t s = 0; s < b.n_seq; ++s) work += b.kv_len[s] / sel.page_size * n_head * hd;
  float (*bound)(const float*, const float*, const float*, int64_t, int64_t) = page_bound;
#if defined(__x86_64__)
  if (cpu_features().avx512) bound = page_bound_avx512;
#endif
#pragma omp parallel num_threads(threads_for(work))
  {
    std::vector<float> score;
    std::vector<int64_t> order;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t s = item / sel.n_kv_head, g = item % sel.n_kv_head;
      const int64_t n = (b.kv_len[s] + sel.page_size - 1) / sel.page_size;
      const int64_t m = std::min(n, sel.budget_pages);
      const int32_t* ids = b.page_ids + b.page_indptr[s];
      int32_t* out = sel_ids + sel_indptr[s] + g * m;
      if (m < n) {
        score.assign(static_cast<size_t>(n), 0.0f);
        const float* qs = q + s * q_stride + g * group * hd;
        for (int64_t i = 0; i < n - 1; ++i) {
          const float* mn = sel.k_min + ids[i] * row + g * hd;
          const float* mx = sel.k_max + ids[i] * row + g * hd;
          score[static_cast<size_t>(i)] = rank(bound(qs, mn, mx, group, hd));
        }
      }
      keep_top(score, ids, n, m, sel.keep_first, out, order);
    }
  }
  return Status::kOk;
}

}  // namespace

Status select_pages(const float* q, int64_t q_stride, int64_t n_head, const PageSelect& sel,
                    const AttentionBatch& batch, const int32_t* sel_indptr, int32_t* sel_ids) {
  return select_fast(q, q_stride, n_head, sel, batch, sel_indptr, sel_ids);
}

Status select_pages_ref(const float* q, int64_t q_stride, int64_t n_head, const PageSelect& sel,
                        const AttentionBatch& b, const int32_t* sel_indptr, int32_t* sel_ids) {
  if (Status st = check(q, q_stride, n_head, sel, b, sel_indptr, sel_ids); st != Status::kOk) {
    return st;
  }
  const int64_t hd = sel.head_dim, row = sel.n_kv_head * hd, group = n_head / sel.n_kv_head;
  for (int64_t s = 0; s < b.n_seq; ++s) {
    const int64_t n = (b.kv_len[s] + sel.page_size - 1) / sel.page_size;
    const int64_t m = std::min(n, sel.budget_pages);
    const int32_t* ids = b.page_ids + b.page_indptr[s];
    for (int64_t g = 0; g < sel.n_kv_head; ++g) {
      // Every page a score (the first and last: kept whatever it is), sorted
      // highest first, ties to the earlier page; the first m are kept.
      std::vector<std::pair<double, int64_t>> ranked;
      for (int64_t i = 0; i < n; ++i) {
        double v = 0;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          for (int64_t d = 0; d < hd; ++d) {
            const double qd = q[s * q_stride + h * hd + d];
            v += std::max(qd * sel.k_max[ids[i] * row + g * hd + d],
                          qd * sel.k_min[ids[i] * row + g * hd + d]);
          }
        }
        const bool forced = i == n - 1 || (sel.keep_first && i == 0);
        ranked.emplace_back(forced || std::isnan(v) ? std::numeric_limits<double>::infinity() : v,
                            i);
      }
      std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& c) {
        return a.first > c.first || (a.first == c.first && a.second < c.second);
      });
      std::vector<int64_t> kept;
      for (int64_t i = 0; i < m; ++i) kept.push_back(ranked[static_cast<size_t>(i)].second);
      std::sort(kept.begin(), kept.end());
      for (int64_t i = 0; i < m; ++i)
        sel_ids[sel_indptr[s] + g * m + i] = ids[kept[static_cast<size_t>(i)]];
    }
  }
  return Status::kOk;
}

}  // namespace strata::cpu
