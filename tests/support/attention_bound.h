// The bound of paged attention's output, per element, shared by every
// implementation the tests check (the CPU kernels over stored and quantized
// pages, the CUDA launchers, every Backend). First order, u = 2^-24: a score
// s_j = scale q.k_j is computed within E_j = (hd + 2) u scale sum_d |q_d k_jd|
// (E_max the largest); an exponential of a shifted score, its argument within
// R = the range of the scores plus E_max, is within e + R u; with p_j the
// exact probabilities,
//   |out_d - ref_d| <= rel * sum_j p_j |v_jd| + u |ref_d|,
// where `rel(n_keys, E_max, R)` is each implementation's own: how many
// exponentials a key goes through (its key blocks, the partial states it
// merges) and how long its sums are, derived in that test's file comment.
// Keys and values are what the pages hold (dequantized where quantized): the
// reference computes on them too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/all_close.h"
#include "support/paged_batch.h"

namespace strata::test {

// The heads of an attention call.
struct AttentionHeads {
  int64_t n_head, n_kv_head, head_dim, page_size;
};

// `key_row(slot, g)` and `value_row(slot, g)`: the head_dim values of kv head
// g at `slot` (page * page_size + offset), as doubles.
template <class KeyRow, class ValueRow, class Rel>
std::vector<double> attention_bound(const PagedBatch& b, const AttentionHeads& a, const float* q,
                                    int64_t q_stride, double scale, const std::vector<double>& ref,
                                    KeyRow key_row, ValueRow value_row, Rel rel) {
  const int64_t hd = a.head_dim, ps = a.page_size;
  const int64_t group = a.n_head / a.n_kv_head;
  std::vector<double> tol(ref.size());
  for (int64_t s = 0; s < b.n_seq(); ++s) {
    const size_t si = static_cast<size_t>(s);
    const int32_t* ids = b.page_ids.data() + b.page_indptr[si];
    const int64_t n_new = b.q_indptr[si + 1] - b.q_indptr[si];
    const int64_t len = b.kv_len[si];
    for (int64_t g = 0; g < a.n_kv_head; ++g) {
      std::vector<std::vector<double>> keys, values;
      for (int64_t j = 0; j < len; ++j) {
        const int64_t slot = ids[j / ps] * ps + j % ps;
        keys.push_back(key_row(slot, g));
        values.push_back(value_row(slot, g));
      }
      for (int64_t i = 0; i < n_new; ++i) {
        const int64_t tok = b.q_indptr[si] + i;
        const int64_t n_keys = len - n_new + i + 1;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* qr = q + tok * q_stride + h * hd;
          std::vector<double> sc(static_cast<size_t>(n_keys));
          double e_max = 0, mx = -INFINITY, mn = INFINITY;
          for (int64_t j = 0; j < n_keys; ++j) {
            const std::vector<double>& k = keys[static_cast<size_t>(j)];
            double dot = 0, dot_abs = 0;
            for (int64_t d = 0; d < hd; ++d) {
              dot += qr[d] * k[static_cast<size_t>(d)];
              dot_abs += std::fabs(qr[d] * k[static_cast<size_t>(d)]);
            }
            double& v = sc[static_cast<size_t>(j)];
            v = dot * scale;
            e_max = std::max(e_max, static_cast<double>(hd + 2) * kU32 * scale * dot_abs);
            mx = std::max(mx, v);
            mn = std::min(mn, v);
          }
          double l = 0;
          for (double& v : sc) l += (v = std::exp(v - mx));
          const double r = rel(n_keys, e_max, mx - mn + e_max);
          for (int64_t d = 0; d < hd; ++d) {
            double pv = 0;
            for (int64_t j = 0; j < n_keys; ++j) {
              pv += sc[static_cast<size_t>(j)] / l *
                    std::fabs(values[static_cast<size_t>(j)][static_cast<size_t>(d)]);
            }
            const size_t e = static_cast<size_t>((tok * a.n_head + h) * hd + d);
            tol[e] = r * pv + kU32 * std::fabs(ref[e]) + kTiny;
          }
        }
      }
    }
  }
  return tol;
}

// key_row / value_row over pages of stored (f32, f16, bf16) elements.
template <class Pages>
auto stored_rows(DType dtype, const Pages& pages, const AttentionHeads& a) {
  return [dtype, &pages, a](int64_t slot, int64_t g) {
    std::vector<double> row(static_cast<size_t>(a.head_dim));
    const void* page = pages[static_cast<size_t>(slot / a.page_size)];
    for (int64_t d = 0; d < a.head_dim; ++d) {
      row[static_cast<size_t>(d)] =
          kv_stored(dtype, page, (slot % a.page_size * a.n_kv_head + g) * a.head_dim + d);
    }
    return row;
  };
}

}  // namespace strata::test
