#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/page_select.h"

namespace strata {

void MicroBatchHost::clear() {
  tokens.clear();
  positions.clear();
  pos_ids.clear();
  q_indptr.assign(1, 0);
  kv_len.clear();
  page_indptr.assign(1, 0);
  page_ids.clear();
  slots.clear();
  touched.clear();
  n_filled.clear();
  out_rows.clear();
  stale.clear();
  stale_filled.clear();
  clear_sparse();
}

void MicroBatchHost::clear_sparse() {
  sel_indptr.clear();
  sel_kv_len.clear();
  sel_ids.clear();
  row_q_indptr.clear();
  row_kv_len.clear();
  row_page_indptr.clear();
  row_page_ids.clear();
  sparse_budget_pages = 0;
  sparse_keep_first = false;
  sparse_lists = 1;
}

void MicroBatchHost::plan_sparse(int64_t budget_pages, bool keep_first, int64_t n_kv_head,
                                 int64_t page_size) {
  clear_sparse();
  if (budget_pages < 1) return;
  const auto pages_of = [&](int64_t len) { return (len + page_size - 1) / page_size; };
  bool rows = false;
  for (int64_t s = 0; s < n_seq(); ++s) {
    rows |= q_indptr[static_cast<size_t>(s) + 1] - q_indptr[static_cast<size_t>(s)] != 1;
  }
  if (rows) {
    row_q_indptr.assign(1, 0);
    row_page_indptr.assign(1, 0);
    for (int64_t s = 0; s < n_seq(); ++s) {
      const auto p0 = static_cast<size_t>(page_indptr[static_cast<size_t>(s)]);
      for (int32_t i = q_indptr[static_cast<size_t>(s)]; i < q_indptr[static_cast<size_t>(s) + 1];
           ++i) {
        const int32_t len = positions[static_cast<size_t>(i)] + 1;
        row_q_indptr.push_back(i + 1);
        row_kv_len.push_back(len);
        row_page_ids.insert(row_page_ids.end(), page_ids.begin() + static_cast<ptrdiff_t>(p0),
                            page_ids.begin() + static_cast<ptrdiff_t>(p0) + pages_of(len));
        row_page_indptr.push_back(static_cast<int32_t>(row_page_ids.size()));
      }
    }
  }
  const std::vector<int32_t>& lens = rows ? row_kv_len : kv_len;
  const bool longer = std::any_of(lens.begin(), lens.end(),
                                  [&](int32_t len) { return pages_of(len) > budget_pages; });
  if (!longer) {
    clear_sparse();  // dense: no row view either
    return;
  }
  cpu::sparse_layout(lens.data(), static_cast<int64_t>(lens.size()), page_size, n_kv_head,
                     budget_pages, &sel_indptr, &sel_kv_len);
  sel_ids.assign(static_cast<size_t>(sel_indptr.back()), -1);
  sparse_budget_pages = budget_pages;
  sparse_keep_first = keep_first && budget_pages >= 2;
  sparse_lists = n_kv_head;
}

void MicroBatchHost::add_sequence(std::span<const int32_t> new_tokens, int64_t start,
                                  std::span<const int32_t> pages, int64_t page_size, bool all_rows,
                                  int64_t pos_offset, bool stale_minmax) {
  const int64_t n = static_cast<int64_t>(new_tokens.size());
  const int64_t len = start + n;
  STRATA_ASSERT(n >= 1 && start >= 0);
  STRATA_ASSERT(static_cast<int64_t>(pages.size()) * page_size >= len);
  const int64_t row0 = static_cast<int64_t>(tokens.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = start + i;
    tokens.push_back(new_tokens[static_cast<size_t>(i)]);
    positions.push_back(static_cast<int32_t>(pos));
    if (pos_offset >= 0) pos_ids.push_back(static_cast<int32_t>(pos + pos_offset));
    slots.push_back(static_cast<int64_t>(pages[static_cast<size_t>(pos / page_size)]) * page_size +
                    pos % page_size);
    if (all_rows) out_rows.push_back(static_cast<int32_t>(row0 + i));
  }
  if (!all_rows) out_rows.push_back(static_cast<int32_t>(row0 + n - 1));
  if (track_touched && stale_minmax && start % page_size != 0) {
    stale.push_back(pages[static_cast<size_t>(start / page_size)]);
    stale_filled.push_back(static_cast<int32_t>(start % page_size));
  }
  // Pages that receive new keys, each with its fill after the step.
  for (int64_t p = start / page_size; track_touched && p * page_size < len; ++p) {
    touched.push_back(pages[static_cast<size_t>(p)]);
    n_filled.push_back(static_cast<int32_t>(std::min(page_size, len - p * page_size)));
  }
  q_indptr.push_back(static_cast<int32_t>(tokens.size()));
  kv_len.push_back(static_cast<int32_t>(len));
  const int64_t used = (len + page_size - 1) / page_size;
  page_ids.insert(page_ids.end(), pages.begin(), pages.begin() + used);
  page_indptr.push_back(static_cast<int32_t>(page_ids.size()));
}

MicroBatch upload_micro_batch(Backend& backend, const MicroBatchHost& h, DeviceBuffer& storage) {
  MicroBatch mb;
  mb.n_tokens = h.n_tokens();
  mb.n_touched = static_cast<int64_t>(h.touched.size());
  mb.n_out = static_cast<int64_t>(h.out_rows.size());
  mb.n_stale = static_cast<int64_t>(h.stale.size());
  STRATA_ASSERT(h.stale_filled.size() == h.stale.size());
  mb.seqs.n_seq = h.n_seq();
  STRATA_ASSERT(h.q_indptr.size() == h.kv_len.size() + 1);
  STRATA_ASSERT(h.page_indptr.size() == h.kv_len.size() + 1);
  STRATA_ASSERT(h.slots.size() == h.tokens.size() && h.positions.size() == h.tokens.size());
  STRATA_ASSERT(h.n_filled.size() == h.touched.size());

  auto data_of = [](const auto& v) -> const void* { return v.empty() ? nullptr : v.data(); };
  struct Item {
    const void* src;
    size_t bytes;
    const void** dst;
  };
  const Item items[] = {
      {data_of(h.tokens), h.tokens.size() * 4, reinterpret_cast<const void**>(&mb.tokens)},
      {data_of(h.positions), h.positions.size() * 4, reinterpret_cast<const void**>(&mb.positions)},
      {data_of(h.pos_ids), h.pos_ids.size() * 4, reinterpret_cast<const void**>(&mb.pos_ids)},
      {data_of(h.q_indptr), h.q_indptr.size() * 4,
       reinterpret_cast<const void**>(&mb.seqs.q_indptr)},
      {data_of(h.kv_len), h.kv_len.size() * 4, reinterpret_cast<const void**>(&mb.seqs.kv_len)},
      {data_of(h.page_indptr), h.page_indptr.size() * 4,
       reinterpret_cast<const void**>(&mb.seqs.page_indptr)},
      {data_of(h.page_ids), h.page_ids.size() * 4,
       reinterpret_cast<const void**>(&mb.seqs.page_ids)},
      {data_of(h.slots), h.slots.size() * 8, reinterpret_cast<const void**>(&mb.slots)},
      {data_of(h.touched), h.touched.size() * 4, reinterpret_cast<const void**>(&mb.touched)},
      {data_of(h.n_filled), h.n_filled.size() * 4, reinterpret_cast<const void**>(&mb.n_filled)},
      {data_of(h.out_rows), h.out_rows.size() * 4, reinterpret_cast<const void**>(&mb.out_rows)},
      {data_of(h.stale), h.stale.size() * 4, reinterpret_cast<const void**>(&mb.stale)},
      {data_of(h.stale_filled), h.stale_filled.size() * 4,
       reinterpret_cast<const void**>(&mb.stale_filled)},
      {data_of(h.sel_indptr), h.sel_indptr.size() * 4,
       reinterpret_cast<const void**>(&mb.sparse.page_indptr)},
      {data_of(h.sel_kv_len), h.sel_kv_len.size() * 4,
       reinterpret_cast<const void**>(&mb.sparse.kv_len)},
      {data_of(h.row_q_indptr), h.row_q_indptr.size() * 4,
       reinterpret_cast<const void**>(&mb.select.q_indptr)},
      {data_of(h.row_kv_len), h.row_kv_len.size() * 4,
       reinterpret_cast<const void**>(&mb.select.kv_len)},
      {data_of(h.row_page_indptr), h.row_page_indptr.size() * 4,
       reinterpret_cast<const void**>(&mb.select.page_indptr)},
      {data_of(h.row_page_ids), h.row_page_ids.size() * 4,
       reinterpret_cast<const void**>(&mb.select.page_ids)},
  };
  const size_t sel_bytes = h.sel_ids.size() * 4;
  auto finish_sparse = [&](int32_t* sel_ids) {
    if (h.sel_indptr.empty()) return;
    if (h.row_kv_len.empty()) {
      mb.select = mb.seqs;
    } else {
      mb.select.n_seq = static_cast<int64_t>(h.row_kv_len.size());
      mb.select.lists = 1;
    }
    mb.sparse.n_seq = mb.select.n_seq;
    mb.sparse.q_indptr = mb.select.q_indptr;
    mb.sparse.page_ids = sel_ids;
    mb.sparse.lists = h.sparse_lists;
    mb.sel_ids = sel_ids;
    mb.sparse_budget_pages = h.sparse_budget_pages;
    mb.sparse_keep_first = h.sparse_keep_first;
  };
  if (backend.memory_is_host()) {
    for (const Item& it : items) *it.dst = it.src;
    finish_sparse(h.sel_ids.data());
    return mb;
  }
  size_t total = (sel_bytes + 63) / 64 * 64;
  for (const Item& it : items) total += (it.bytes + 63) / 64 * 64;
  if (storage.size() < total) storage = backend.alloc(total * 2);
  size_t off = 0;
  for (const Item& it : items) {
    char* dst = storage.as<char>() + off;
    if (it.bytes > 0) backend.copy_to_device(dst, it.src, it.bytes);
    *it.dst = it.bytes > 0 ? dst : nullptr;
    off += (it.bytes + 63) / 64 * 64;
  }
  finish_sparse(reinterpret_cast<int32_t*>(storage.as<char>() + off));  // written by the op
  return mb;
}

std::vector<float> rope_inv_freq(const ModelConfig& c, int64_t rot_dim) {
  STRATA_ASSERT(rot_dim >= 2 && rot_dim % 2 == 0);
  const RopeScaling& s = c.rope_scaling;
  std::vector<float> out(static_cast<size_t>(rot_dim / 2));
  const double low_wavelen = static_cast<double>(s.original_max_position) / s.low_freq_factor;
  const double high_wavelen = static_cast<double>(s.original_max_position) / s.high_freq_factor;
  for (int64_t i = 0; i < rot_dim / 2; ++i) {
    double f = 1.0 / std::pow(static_cast<double>(c.rope_theta),
                              static_cast<double>(2 * i) / static_cast<double>(rot_dim));
    switch (s.type) {
      case RopeScaling::Type::kNone:
        break;
      case RopeScaling::Type::kLinear:
        f /= s.factor;
        break;
      case RopeScaling::Type::kLlama3: {
        // transformers' _compute_llama3_parameters
        const double wavelen = 2.0 * M_PI / f;
        if (wavelen > low_wavelen) {
          f /= s.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth =
              (static_cast<double>(s.original_max_position) / wavelen - s.low_freq_factor) /
              (s.high_freq_factor - s.low_freq_factor);
          f = (1.0 - smooth) * f / s.factor + smooth * f;
        }
        break;
      }
    }
    if (!c.rope_freq_factors.empty()) f /= c.rope_freq_factors[static_cast<size_t>(i)];
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

Forward::Forward(Backend& backend, const ModelConfig& config, DType compute)
    : be_(backend), c_(config), compute_(compute) {
  if (compute_ != DType::kF32 && compute_ != DType::kBF16 && compute_ != DType::kI8) {
    fail("compute dtype {} is not supported; use f32, bf16 or int8 (i8)", dtype_name(compute_));
  }
  q_dim_ = c_.n_head * c_.head_dim;
  kv_dim_ = c_.n_kv_head * c_.head_dim;
  qkv_dim_ = q_dim_ + 2 * kv_dim_;
  attn_scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c_.head_dim)));
  switch (c_.act) {
    case Activation::kRelu:
      act_ = ActFn::kRelu;
      break;
    case Activation::kGelu:
      act_ = ActFn::kGelu;
      break;
    case Activation::kSilu:
      act_ = ActFn::kSilu;
      break;
  }
  if (c_.gated_ffn && c_.act != Activation::kSilu) {
    fail("{}: a gated FFN with activation {} is not supported (only SwiGLU)", c_.architecture,
         activation_name(c_.act));
  }
  if (c_.rope_layout != RopeLayout::kNone) {
    rot_dim_ = c_.head_dim;
    pairs_ = c_.rope_layout == RopeLayout::kHalf ? RopePairs::kHalf : RopePairs::kInterleaved;
    const std::vector<float> inv = rope_inv_freq(c_, rot_dim_);
    inv_freq_ = be_.alloc(inv.size() * sizeof(float));
    be_.copy_to_device(inv_freq_.data(), inv.data(), inv.size() * sizeof(float));
  }
}

void Forward::reserve(int64_t n_tokens) {
  if (n_tokens <= ws_tokens_) return;
  const int64_t t = std::max(n_tokens, ws_tokens_ * 3 / 2);
  const int64_t per_token = 2 * c_.n_embd + qkv_dim_ + q_dim_ + 2 * c_.n_ff;
  ws_ = DeviceBuffer();
  ws_ = be_.alloc(static_cast<size_t>(t * per_token + 5 * 16) * sizeof(float));
  float* p = ws_.as<float>();
  auto take = [&](int64_t n) {
    float* r = p;
    p += (n + 15) / 16 * 16;
    return r;
  };
  normed_ = take(t * c_.n_embd);
  qkv_ = take(t * qkv_dim_);
  attn_ = take(t * q_dim_);
  proj_ = take(t * c_.n_embd);
  ffn_ = take(t * 2 * c_.n_ff);
  ws_tokens_ = t;
}

void Forward::norm(float* y, const float* x, const float* w, const float* b, int64_t n_rows) {
  const int64_t E = c_.n_embd;
  if (c_.norm == NormKind::kRmsNorm) {
    be_.rms_norm(y, E, x, E, w, c_.norm_eps, n_rows, E);
  } else {
    be_.layer_norm(y, E, x, E, w, b, c_.norm_eps, n_rows, E);
  }
}

void Forward::embed(const GlobalWeights& w, const MicroBatch& mb, float* hidden) {
  reserve(mb.n_tokens);
  const int64_t E = c_.n_embd;
  be_.embedding(hidden, E, w.token_embd, mb.tokens, mb.n_tokens);
  if (c_.learned_pos) {
    STRATA_ASSERT(mb.pos_ids != nullptr);
    be_.embedding(proj_, E, w.position_embd, mb.pos_ids, mb.n_tokens);
    be_.add(hidden, E, hidden, E, proj_, E, mb.n_tokens, E);
  }
}

void Forward::layer(int64_t j, const LayerWeights& w, const KvLayer& kv, const MicroBatch& mb,
                    float* hidden) {
  reserve(mb.n_tokens);
  const int64_t n = mb.n_tokens;
  layer_qkv(w, mb, hidden, qkv_);
  if (mb.n_stale > 0) be_.key_minmax(kv, mb.stale, mb.stale_filled, mb.n_stale);
  be_.kv_append(kv, qkv_ + q_dim_, qkv_dim_, qkv_ + q_dim_ + kv_dim_, qkv_dim_, mb.slots, n,
                mb.touched, mb.n_filled, mb.n_touched);
  if (mb.sparse.n_seq > 0 && j >= kSparseFirstLayer) {
    // Sparse decode: each kv head attends over the pages its query bounds
    // highest (the min/max are current: kv_append updated them).
    be_.select_pages(qkv_, qkv_dim_, c_.n_head, kv, mb.select, mb.sparse_budget_pages,
                     mb.sparse_keep_first, mb.sparse.page_indptr, mb.sel_ids);
    if (mb.on_selected != nullptr) mb.on_selected->selected(j, mb);
    be_.attention(attn_, q_dim_, qkv_, qkv_dim_, c_.n_head, kv, mb.sparse, attn_scale_);
  } else {
    be_.attention(attn_, q_dim_, qkv_, qkv_dim_, c_.n_head, kv, mb.seqs, attn_scale_);
  }
  layer_out(w, mb, attn_, hidden);
}

void Forward::layer_qkv(const LayerWeights& w, const MicroBatch& mb, const float* hidden,
                        float* qkv) {
  reserve(mb.n_tokens);
  const int64_t n = mb.n_tokens;
  const int64_t E = c_.n_embd;
  float* q = qkv;
  float* k = qkv + q_dim_;  // v after k: [q | k | v] in a row of qkv
  STRATA_ASSERT(w.q.rows == q_dim_ && w.k.rows == kv_dim_ && w.v.rows == kv_dim_);
  norm(normed_, hidden, w.attn_norm, w.attn_norm_b, n);
  const MatmulPart qkv_parts[] = {{w.q, w.q_bias}, {w.k, w.k_bias}, {w.v, w.v_bias}};
  be_.matmul_parts(qkv, qkv_dim_, normed_, E, qkv_parts, 3, n, compute_);
  if (rot_dim_ > 0) {
    be_.rope(q, qkv_dim_, c_.n_head, k, qkv_dim_, c_.n_kv_head, c_.head_dim, mb.positions, n,
             inv_freq_.as<float>(), rot_dim_, pairs_);
  }
}

void Forward::layer_out(const LayerWeights& w, const MicroBatch& mb, const float* attn,
                        float* hidden) {
  reserve(mb.n_tokens);
  const int64_t n = mb.n_tokens;
  const int64_t E = c_.n_embd, F = c_.n_ff;
  be_.matmul(proj_, E, attn, q_dim_, w.o, w.o_bias, n, compute_);
  be_.add(hidden, E, hidden, E, proj_, E, n, E);

  // MLP block.
  norm(normed_, hidden, w.ffn_norm, w.ffn_norm_b, n);
  if (c_.gated_ffn) {
    const MatmulPart gate_up[] = {{w.gate, nullptr}, {w.up, w.up_bias}};
    be_.matmul_parts(ffn_, 2 * F, normed_, E, gate_up, 2, n, compute_);
    be_.swiglu(ffn_, 2 * F, ffn_, 2 * F, ffn_ + F, 2 * F, n, F);
  } else {
    be_.matmul(ffn_, 2 * F, normed_, E, w.up, w.up_bias, n, compute_);
    be_.activation(act_, ffn_, 2 * F, ffn_, 2 * F, n, F);
  }
  be_.matmul(proj_, E, ffn_, 2 * F, w.down, w.down_bias, n, compute_);
  be_.add(hidden, E, hidden, E, proj_, E, n, E);
}

void Forward::head(const GlobalWeights& w, const MicroBatch& mb, const float* hidden,
                   float* logits) {
  reserve(mb.n_tokens);
  const int64_t E = c_.n_embd;
  if (mb.n_out == 0) return;
  be_.gather_rows(normed_, E, hidden, E, mb.out_rows, mb.n_out, E);
  norm(normed_, normed_, w.output_norm, w.output_norm_b, mb.n_out);
  be_.matmul(logits, w.output.rows, normed_, E, w.output, nullptr, mb.n_out, compute_);
}

}  // namespace strata
