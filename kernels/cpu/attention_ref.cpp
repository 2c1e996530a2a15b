// The reference paged attention, KV append and page key min/max
// (attention.h): scalar definitions, in double where they sum, that the fast
// paths (attention.cpp) and every other implementation are tested against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/attend_row_ref.h"
#include "kernels/cpu/kv_rows.h"

namespace strata::cpu {

Status paged_attention_ref(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                           int64_t n_head, const KvPages& kv, const AttentionBatch& batch,
                           float scale) {
  if (is_quantized(kv.dtype)) {
    return paged_attention_quant_ref(out, out_stride, q, q_stride, n_head, kv, batch, scale);
  }
  int64_t n_tokens = 0, max_new = 0, work = 0;
  if (Status s =
          check_batch(out, out_stride, q, q_stride, n_head, kv, batch, &n_tokens, &max_new, &work);
      s != Status::kOk || n_tokens == 0) {
    return s;
  }
  const int64_t hd = kv.head_dim;
  const int64_t group = n_head / kv.n_kv_head;
  auto element = [&](const void* const* pages, const int32_t* ids, int64_t key, int64_t g,
                     int64_t d) {
    const char* page = static_cast<const char*>(pages[ids[key / kv.page_size]]);
    const int64_t e = (key % kv.page_size * kv.n_kv_head + g) * hd + d;
    return static_cast<double>(stored_value(kv.dtype, page + e * elem_bytes(kv.dtype), 0));
  };
  for (int64_t s = 0; s < batch.n_seq; ++s) {
    const int64_t n_new = batch.q_indptr[s + 1] - batch.q_indptr[s];
    for (int64_t i = 0; i < n_new; ++i) {
      const int64_t tok = batch.q_indptr[s] + i;
      const int64_t p = batch.kv_len[s] - n_new + i;
      for (int64_t h = 0; h < n_head; ++h) {
        const int64_t g = h / group;
        const int32_t* ids = seq_pages(batch, s, g);
        const float* qr = q + tok * q_stride + h * hd;
        attend_row_ref(
            out + tok * out_stride + h * hd, qr, hd, p, scale,
            [&](int64_t j, int64_t d) { return element(kv.k, ids, j, g, d); },
            [&](int64_t j, int64_t d) { return element(kv.v, ids, j, g, d); });
      }
    }
  }
  return Status::kOk;
}

Status kv_append_ref(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                     int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                     int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                     int64_t n_tokens) {
  if (is_quantized(dtype)) {
    return kv_append_quant_ref(k_pages, v_pages, n_pages, dtype, page_size, n_kv_head, head_dim,
                               k, k_stride, v, v_stride, slots, n_tokens, nullptr, nullptr);
  }
  if (Status s = check_append(k_pages, v_pages, n_pages, dtype, page_size, n_kv_head, head_dim, k,
                              k_stride, v, v_stride, slots, n_tokens);
      s != Status::kOk) {
    return s;
  }
  const int64_t row = n_kv_head * head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t id = slots[t] / page_size;
    const int64_t first = (slots[t] % page_size) * row;
    for (int i = 0; i < 2; ++i) {
      const float* src = (i == 0 ? k + t * k_stride : v + t * v_stride);
      void* page = (i == 0 ? k_pages : v_pages)[id];
      for (int64_t e = 0; e < row; ++e) {
        switch (dtype) {
          case DType::kF32:
            static_cast<float*>(page)[first + e] = src[e];
            break;
          case DType::kF16:
            static_cast<uint16_t*>(page)[first + e] = f32_to_f16(src[e]);
            break;
          default:
            static_cast<uint16_t*>(page)[first + e] = f32_to_bf16(src[e]);
            break;
        }
      }
    }
  }
  return Status::kOk;
}

Status page_key_minmax_ref(float* k_min, float* k_max, const void* const* k_pages, int64_t n_pages,
                           DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                           const int32_t* page_ids, const int32_t* n_filled, int64_t n_list) {
  if (Status s = check_minmax(k_min, k_max, k_pages, n_pages, dtype, page_size, n_kv_head, head_dim,
                              page_ids, n_filled, n_list);
      s != Status::kOk) {
    return s;
  }
  const int64_t row = n_kv_head * head_dim;
  for (int64_t i = 0; i < n_list; ++i) {
    const void* page = k_pages[page_ids[i]];
    for (int64_t e = 0; e < row; ++e) {
      float mn = stored_value(dtype, page, e);
      float mx = mn;
      bool nan = std::isnan(mn);
      for (int64_t t = 1; t < n_filled[i]; ++t) {
        const float x = stored_value(dtype, page, t * row + e);
        nan = nan || std::isnan(x);
        mn = std::min(mn, x);
        mx = std::max(mx, x);
      }
      k_min[page_ids[i] * row + e] = nan ? NAN : mn;
      k_max[page_ids[i] * row + e] = nan ? NAN : mx;
    }
  }
  return Status::kOk;
}

}  // namespace strata::cpu
