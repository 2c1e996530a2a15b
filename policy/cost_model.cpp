// The cost model's terms and memory; see cost_model.h for the model itself.
#include "policy/cost_model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "core/kv_layout.h"
#include "core/units.h"

namespace strata {

namespace {

constexpr double kKvPageTokens = 16;  // the engine's KV page

// max(flops / rate, bytes / bandwidth); bandwidth 0 means no memory term.
double roofline(double flops, double rate, double bytes, double bandwidth) {
  const double t = flops / rate;
  return bandwidth > 0 ? std::max(t, bytes / bandwidth) : t;
}

}  // namespace

Budgets budgets_of(const HardwareProfile& hw) {
  return {hw.gpu_mem, hw.cpu_mem, hw.disk_mem};
}

std::string_view phase_name(Phase p) {
  return p == Phase::kPrefill ? "prefill" : "decode";
}

double Affine::operator()(const Placement& x) const {
  double v = constant;
  double magnitude = std::fabs(constant);
  for (int i = 0; i < kNumShares; ++i) {
    v += coef[i] * x.share[i];
    magnitude += std::fabs(coef[i] * x.share[i]);
  }
  // 1 - gpu - cpu at gpu + cpu = 1 leaves rounding residue, not a quantity.
  return std::fabs(v) <= 1e-12 * magnitude ? 0.0 : v;
}

Affine& Affine::operator+=(const Affine& o) {
  constant += o.constant;
  for (int i = 0; i < kNumShares; ++i) coef[i] += o.coef[i];
  return *this;
}

Affine operator*(double c, Affine a) {
  a.constant *= c;
  for (double& v : a.coef) v *= c;
  return a;
}

Affine affine_constant(double c) {
  Affine a;
  a.constant = c;
  return a;
}

Affine share(DataKind kind, Tier tier) {
  Affine a;
  if (tier == Tier::kDisk) {
    a.constant = 1;
    a.coef[static_cast<int>(share_of(kind, Tier::kGpu))] = -1;
    a.coef[static_cast<int>(share_of(kind, Tier::kCpu))] = -1;
  } else {
    a.coef[static_cast<int>(share_of(kind, tier))] = 1;
  }
  return a;
}

std::string CostTerm::busy_name() const {
  switch (kind) {
    case Kind::kLink:
      return name;
    case Kind::kCompute:
      return "compute";
    case Kind::kCpuAttention:
      return "cpu attention";
  }
  return name;
}

Affine StepCost::bound_seconds(size_t b) const {
  Affine sum;
  for (int t : bounds[b].terms) sum += terms[t].seconds;
  return sum;
}

size_t StepCost::binding(const Placement& x) const {
  size_t best = 0;
  double best_v = -1;
  for (size_t b = 0; b < bounds.size(); ++b) {
    const double v = bound_seconds(b)(x);
    if (v > best_v * (1 + 1e-12)) {
      best_v = v;
      best = b;
    }
  }
  return best;
}

std::string StepCost::bound_label(size_t b, const Placement& x) const {
  std::string out;
  bool compute = false;
  for (int t : bounds[b].terms) {
    const bool is_compute = terms[t].kind != CostTerm::Kind::kLink;
    if (terms[t].seconds(x) <= 0 || (is_compute && compute)) continue;
    compute = compute || is_compute;
    out += (out.empty() ? "" : " + ") + (is_compute ? std::string("compute") : terms[t].name);
  }
  return out.empty() ? bounds[b].name : out;
}

double StepCost::seconds(const Placement& x) const {
  double best = 0;
  for (size_t b = 0; b < bounds.size(); ++b) best = std::max(best, bound_seconds(b)(x));
  return best;
}

double CostModel::prefill_seconds(const Placement& x) const {
  const double L = static_cast<double>(shape.n_layer);
  return L * prefill_layer.seconds(x) + prefill_head.seconds(x) +
         work.prefix_steps * (L * prefix_layer.seconds(x) + prefix_head.seconds(x));
}

double CostModel::decode_seconds(const Placement& x) const {
  return static_cast<double>(work.gen_len - 1) / work.spec_tokens *
         (static_cast<double>(shape.n_layer) * decode_layer.seconds(x) + decode_head.seconds(x) +
          work.draft_step_s);
}

std::map<std::string, double> CostModel::busy_seconds(const Placement& x) const {
  std::map<std::string, double> busy;
  const auto add = [&](const StepCost& st, double times) {
    if (times <= 0) return;
    for (const CostTerm& t : st.terms) busy[t.busy_name()] += times * t.seconds(x);
  };
  const double L = static_cast<double>(shape.n_layer);
  const double decode_steps = static_cast<double>(work.gen_len - 1) / work.spec_tokens;
  add(prefix_layer, work.prefix_steps * L);
  add(prefix_head, work.prefix_steps);
  add(prefill_layer, L);
  add(prefill_head, 1);
  add(decode_layer, decode_steps * L);
  add(decode_head, decode_steps);
  return busy;
}

double CostModel::generated_tokens() const {
  return static_cast<double>(batch.block_size()) * static_cast<double>(work.gen_len);
}

double kv_disk_share_assumed(const Placement& placement) {
  const double share = placement.disk(DataKind::kKv);
  return share > 0 ? std::min(1.0, share) : 1.0;
}

Policy normalize_policy(const Policy& p, const HardwareProfile& hw) {
  if (!hw.unified_memory()) return p;
  Policy q = p;
  q.placement = p.placement.folded(true);
  q.cpu_attention = false;
  return q;
}

CostModel build_cost_model(const ModelShape& shape, const HardwareProfile& hw, const Workload& work,
                           const Policy& policy, const EngineCompute* compute) {
  constexpr CostTerm::Kind kCompute = CostTerm::Kind::kCompute;
  if (work.prompt_len < 1) fail("--prompt-len: must be at least 1 (is {})", work.prompt_len);
  if (work.gen_len < 1) fail("--gen-len: must be at least 1 (is {})", work.gen_len);
  if (shape.max_context > 0 && work.prompt_len + work.gen_len > shape.max_context) {
    fail(
        "--prompt-len {} + --gen-len {} is longer than the {} tokens of context of {}; shorten "
        "them",
        work.prompt_len, work.gen_len, shape.max_context, shape.name);
  }
  if (!(work.spec_tokens >= 1 && work.spec_rows >= work.spec_tokens &&
        std::isfinite(work.spec_rows))) {
    fail("speculation: {} rows and {} kept tokens per sequence and step; need rows >= tokens >= 1",
         work.spec_rows, work.spec_tokens);
  }
  if (!(work.draft_step_s >= 0 && std::isfinite(work.draft_step_s))) {
    fail("speculation: {} s of the draft model per decode step; need a finite value >= 0",
         work.draft_step_s);
  }
  if (!(work.shared_tokens >= 0 && work.shared_tokens < static_cast<double>(work.prompt_len))) {
    fail(
        "shared prefixes: {} shared tokens per sequence of a {}-token prompt; need 0 or more, "
        "and fewer than the prompt's",
        work.shared_tokens, work.prompt_len);
  }
  if (!(work.prefix_steps >= 0 && work.prefix_steps <= 1 && work.prefix_step_tokens >= 0 &&
        std::isfinite(work.prefix_step_tokens))) {
    fail(
        "shared prefixes: prefix steps in {} of the blocks, of {} tokens each; need a share in "
        "[0, 1] and a finite count >= 0",
        work.prefix_steps, work.prefix_step_tokens);
  }
  if (work.kv_shared_seqs < 0 || work.kv_shared_seqs >= policy.block_size() ||
      work.kv_shared_tokens < 0 || work.kv_shared_tokens >= work.prompt_len) {
    fail(
        "shared prefixes: {} sequences of a block of {} storing their first {} tokens of KV once; "
        "need fewer sequences than the block and fewer tokens than the {}-token prompt",
        work.kv_shared_seqs, policy.block_size(), work.kv_shared_tokens, work.prompt_len);
  }
  if (!(work.kv_elem_bytes > 0 && work.kv_elem_bytes <= 8)) {
    fail("KV element of {} bytes: need more than 0 and at most 8", work.kv_elem_bytes);
  }
  if (!(work.act_elem_bytes > 0 && work.act_elem_bytes <= 8)) {
    fail("activation element of {} bytes: need more than 0 and at most 8", work.act_elem_bytes);
  }
  validate_policy(policy, "policy");
  validate_model_shape(shape, shape.name);
  validate_hardware_profile(hw, hw.name);

  CostModel m;
  m.shape = shape;
  m.hw = hw;
  m.work = work;
  m.batch = normalize_policy(policy, hw);
  const Policy& pol = m.batch;
  const bool unified = hw.unified_memory();
  const bool cpu_attention = pol.cpu_attention;

  const double L = static_cast<double>(shape.n_layer);
  const double s = static_cast<double>(work.prompt_len);
  const double n = static_cast<double>(work.gen_len);
  const double g = static_cast<double>(pol.gpu_batch_size);
  const double k = static_cast<double>(pol.num_gpu_batches);
  const double B = g * k;
  const double R = work.spec_rows, E = work.spec_tokens;  // speculation (Workload)
  // Shared prefixes (Workload): the prefill computes s_new of the s tokens;
  // a prefix step computes P tokens.
  const double shared = work.shared_tokens, s_new = s - shared;
  const double P = work.prefix_steps > 0 ? work.prefix_step_tokens : 0;
  // Tokens of KV a block stores once that each of its sequences would store.
  const double kv_stored_once =
      static_cast<double>(work.kv_shared_seqs) * static_cast<double>(work.kv_shared_tokens);
  const double h = static_cast<double>(shape.hidden);
  const double q_dim = static_cast<double>(shape.q_dim());
  const double kv_dim = static_cast<double>(shape.kv_dim());
  const double n_head = static_cast<double>(shape.n_head);
  const double n_ff = static_cast<double>(shape.n_ff);
  const double vocab = static_cast<double>(shape.vocab);
  const double a = work.act_elem_bytes;

  const double w_bytes = pol.compress_weight.bytes_per_elem(shape.weight_bytes);
  const double kv_bytes = pol.compress_kv.kv_bytes_per_elem(work.kv_elem_bytes);
  const double layer_elems = static_cast<double>(shape.layer_weight_elems());
  const double head_elems = static_cast<double>(shape.head_weight_elems());
  const double w_layer = layer_elems * w_bytes;  // one layer's weights
  const double w_head = head_elems * w_bytes;    // the output head
  const double w_total = L * w_layer + static_cast<double>(shape.global_weight_elems()) * w_bytes;
  // Staging of one column holds its streamed share f, cut at tensor
  // boundaries: up to f of the column plus its largest tensor, never more
  // than the column, and the embeddings or the head whole (one tensor each):
  // max(min(f * w_layer + t_layer, w_layer), w_head). The affine bound used
  // runs from its value at f = 0 (a granule held once anything streams) with
  // the slope to its value at 1, raised by the most that line falls short
  // (at the kink f = 1 - t_layer / w_layer).
  const double t_layer = static_cast<double>(shape.largest_layer_matrix_elems()) * w_bytes;
  const double stage_at_0 = std::max(t_layer, w_head);
  const double stage_at_1 = std::max(w_layer, w_head);
  const double stage_short = w_layer > 0 ? t_layer * (stage_at_1 - stage_at_0) / w_layer : 0;
  const double stage_granule = stage_at_0 + stage_short;
  const double stage_per_share = stage_at_1 - stage_at_0;
  const double kv_token = 2 * kv_dim * kv_bytes;  // K and V of one token in one layer
  const double hid_token = h * a;                 // hidden state of one token
  const double flops_layer = 2 * layer_elems;     // per token
  const double flops_head = 2 * head_elems;       // per token

  // Context: KV stored per sequence at the end, attended per decode step on
  // average (FlexGen's s + n/2). With a sparse budget, on average over the
  // layers: the first kSparseFirstLayer attend it all, the others the
  // selected tokens (ctx_selected) plus the selection's reading of every
  // page's f32 key min/max (src/kv/page_pool.h), counted as the keys of
  // the same K and V bytes (kv_token).
  const double ctx_end = s + n;
  const double ctx_read = s + n / 2;
  double ctx_attend = ctx_read, ctx_selected = ctx_read;
  const double ctx_stage = ctx_end;  // KV of one sequence staged for attention
  // KV read from disk per decode layer, on average over the layers: a sparse
  // layer reads only its selected pages (offload/kv_staging.h), in requests
  // of a page or a few (ctx_disk_sparse), the first kSparseFirstLayer
  // layers all of a sequence's (ctx_disk_dense).
  // A micro-batch loads a shared prefix's pages once for its sequences
  // (offload/kv_staging.h): per sequence, as if its g sequences shared it.
  const double ctx_loaded = ctx_read - shared * (1 - 1 / g);
  double ctx_disk_dense = ctx_loaded, ctx_disk_sparse = 0;
  if (pol.sparse_attention_budget > 0) {
    const auto budget = static_cast<double>(pol.sparse_attention_budget);
    const double dense_layers = std::min(L, static_cast<double>(kSparseFirstLayer));
    ctx_selected = std::min(ctx_read, budget);
    const double minmax_page = 2 * kv_dim * static_cast<double>(sizeof(float));
    const double scored = ctx_read > budget ? ctx_read / kKvPageTokens * minmax_page / kv_token : 0;
    ctx_attend = (dense_layers * ctx_read + (L - dense_layers) * (ctx_selected + scored)) / L;
    ctx_disk_dense = ctx_loaded * dense_layers / L;
    ctx_disk_sparse = ctx_selected * (L - dense_layers) / L;
  }

  // Shares. "off" = not already on the compute device: streamed in and out.
  auto gpu = [&](DataKind d) { return share(d, Tier::kGpu); };
  auto disk = [&](DataKind d) { return share(d, Tier::kDisk); };
  auto off = [&](DataKind d) { return unified ? disk(d) : affine_constant(1) + (-1.0) * gpu(d); };
  const DataKind W = DataKind::kWeights, KV = DataKind::kKv, ACT = DataKind::kAct;

  const double c2g = hw.cpu_to_gpu, g2c = hw.gpu_to_cpu, g2c_kv = hw.gpu_to_cpu_kv;
  const double d2c = hw.disk_to_cpu, c2d = hw.cpu_to_disk, c2d_kv = hw.cpu_to_disk_kv;
  const double dev_bw = hw.device_mem_bandwidth;
  // A layer's weights on disk are one request (at most two in flight), read
  // beside the compute of the layer before, sharing the cores with it: at
  // the share of the rate alone measured so at a layer's size
  // (HardwareProfile::disk_share_beside_compute), as if the whole read
  // overlapped compute (a disk-bound step reads part of its time alone, a
  // little faster). KV page reads are priced at their rates alone: the
  // profile does not measure them beside compute (priced at the weights'
  // share at 1M, about 0.2 on a 2-core machine, they made the search trade
  // KV on disk for micro-batches of one, which measured slower).
  const double d2c_w = hw.weight_read_rate(w_layer) * hw.disk_share_beside_compute(w_layer);
  // KV on disk: a sequence's disk pages of one layer are records in extents
  // of consecutive slots (core/kv_layout.h), read an extent (or the disk
  // pages the sequence has, on average over the decode) per request. The
  // share of its pages on disk sets that request size: it is taken at the
  // policy's own KV disk share, or all pages when the policy has none on
  // disk (the search solves again at the share the LP found: search.cpp).
  const double kv_disk_hint = kv_disk_share_assumed(pol.placement);
  const auto kv_page = static_cast<uint64_t>(std::ceil(kKvPageTokens * kv_dim * kv_bytes));
  const auto pages_of = [](double tokens) {
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(tokens / kKvPageTokens)));
  };
  const auto disk_pages_of = [&](double tokens) {
    const double pages = static_cast<double>(pages_of(tokens)) * kv_disk_hint;
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(pages - 1e-9)));
  };
  // A micro-batch's load issues its sequences' requests together and waits
  // for all of them: g sequences' runs at a time.
  const int64_t kv_run =
      std::min(kv_disk_extent_pages(kv_page, disk_pages_of(ctx_end)), disk_pages_of(ctx_read));
  const double kv_runs =
      std::ceil(static_cast<double>(disk_pages_of(ctx_read)) / static_cast<double>(kv_run));
  const double d2c_kv =
      hw.kv_read_rate(static_cast<double>(kv_disk_record_bytes(kv_page) * kv_run), g * kv_runs);
  const double d2c_kv_page = hw.kv_read_rate(static_cast<double>(kv_disk_record_bytes(kv_page)),
                                             g * std::max(1.0, ctx_selected / kKvPageTokens));
  const double kv_disk_s = kv_token * (ctx_disk_dense / d2c_kv + ctx_disk_sparse / d2c_kv_page);

  // Compute, seconds (constants for a fixed batch): from the profile's
  // rates, or on a CPU device with the engine's measured times, the layer's
  // time at short context ("layer") and the attention beyond it.
  const bool measured = unified && compute != nullptr;
  m.compute_measured = measured;
  const char* gemm_name = measured ? "layer" : "gemm";
  double gemm_prefill = 0, attn_prefill = 0, gemm_decode = 0, attn_dev_seq = 0;
  double head_prefill = 0, head_decode = 0;
  double decode_stream_extra = 0;  // per layer and step, at all weights on disk
  double layer_prefix = 0;         // a prefix step's layer
  // (new token, key) pairs of a prompt's prefill, counted as the square of
  // its length (the masked half included) less the shared prefix's square.
  const double prefill_pairs = s * s - shared * shared;
  if (measured) {
    gemm_prefill = k * interpolate(compute->prefill_tokens, compute->prefill_layer_s, g * s_new);
    attn_prefill = B * prefill_pairs * compute->prefill_pair_s;
    if (P > 0) {
      layer_prefix = interpolate(compute->prefill_tokens, compute->prefill_layer_s, P) +
                     P * P * compute->prefill_pair_s;
    }
    gemm_decode = compute->decode_layers(g * R, k);
    decode_stream_extra = compute->decode_stream_extra(g * R);
    // Keys on pages the micro-batch's sequences share are attended as one
    // product for them (kernels/cpu/shared_pages.h; dense decode only).
    const double shared_keys = pol.sparse_attention_budget > 0 || g < 2 ? 0 : shared;
    attn_dev_seq =
        R * (std::max(0.0, ctx_attend - shared_keys - compute->decode_ctx) * compute->decode_key_s +
             shared_keys * compute->decode_shared_key_s);
    head_prefill = compute->heads(g, k);
    head_decode = compute->heads(g * R, k);
  } else {
    gemm_prefill = k * roofline(g * s_new * flops_layer, hw.gemm_prefill_flops, w_layer, dev_bw);
    attn_prefill = B * 4 * prefill_pairs * q_dim / hw.attention_prefill_flops;
    if (P > 0) {
      layer_prefix = roofline(P * flops_layer, hw.gemm_prefill_flops, w_layer, dev_bw) +
                     4 * P * P * q_dim / hw.attention_prefill_flops;
    }
    gemm_decode = k * roofline(g * R * flops_layer, hw.gemm_decode_flops, w_layer, dev_bw);
    attn_dev_seq = roofline(R * 4 * ctx_attend * q_dim, hw.attention_decode_flops,
                            kv_token * ctx_attend, dev_bw);
    head_prefill = k * roofline(g * flops_head, hw.gemm_prefill_flops, w_head, dev_bw);
    head_decode = k * roofline(g * R * flops_head, hw.gemm_decode_flops, w_head, dev_bw);
  }
  const double attn_cpu_seq =
      roofline(R * 4 * ctx_attend * q_dim, hw.cpu_attention_rate(pol.gpu_batch_size, shape.hidden),
               kv_token * ctx_attend, hw.cpu_mem_bandwidth);

  // ---- prefill-shaped steps: the prefill, and the prefix step before it ----
  // A layer over the block's new tokens: the weights streamed in, `kv_out`
  // tokens of KV stored, `kv_in` tokens of KV loaded, `act` tokens of hidden
  // state moved where activations live off the device, and `compute`.
  const auto prefill_shaped = [&](StepCost& st, double kv_out, double kv_in, double act,
                                  std::vector<CostTerm> compute) {
    const Affine d2c_s = (w_layer / d2c_w) * disk(W) + (hid_token * act / d2c) * disk(ACT) +
                         (kv_token * kv_in / d2c_kv) * disk(KV);
    const Affine c2d_s =
        (kv_token * kv_out / c2d_kv) * disk(KV) + (hid_token * act / c2d) * disk(ACT);
    // One disk serves the reads and the writes: its time is their sum.
    if (unified) {
      st.terms = {{"disk->cpu", d2c_s}, {"cpu->disk", c2d_s}};
      st.bounds = {{"disk->cpu + cpu->disk", {0, 1}}};
    } else {
      const Affine c2g_s =
          (1 / c2g) * (w_layer * off(W) + hid_token * act * off(ACT) + kv_token * kv_in * off(KV));
      const Affine g2c_s =
          (kv_token * kv_out / g2c_kv) * off(KV) + (hid_token * act / g2c) * off(ACT);
      st.terms = {
          {"cpu->gpu", c2g_s}, {"disk->cpu", d2c_s}, {"gpu->cpu", g2c_s}, {"cpu->disk", c2d_s}};
      st.bounds = {{"cpu->gpu + disk->cpu", {0, 1}},
                   {"gpu->cpu + cpu->disk", {2, 3}},
                   {"disk->cpu + cpu->disk", {1, 3}}};
    }
    CostBound compute_bound{"compute", {}};
    for (CostTerm& t : compute) {
      compute_bound.terms.push_back(static_cast<int>(st.terms.size()));
      st.terms.push_back(std::move(t));
    }
    st.bounds.push_back(std::move(compute_bound));
  };
  // The prefill: s - shared new tokens per sequence; with shared prefixes
  // each micro-batch loads its shared pages' KV (where they live) once, and
  // stores only its sequences' own.
  prefill_shaped(m.prefill_layer, s_new * B, shared * k, s_new * B,
                 {{gemm_name, affine_constant(gemm_prefill), kCompute},
                  {"attention", affine_constant(attn_prefill), kCompute}});
  // The prefix step (shared prompt prefixes): one more pass over the layers
  // before the prefill, the weights streamed again, P tokens computed as one
  // prompt and their KV stored.
  if (P > 0) {
    prefill_shaped(m.prefix_layer, P, 0, 0, {{gemm_name, affine_constant(layer_prefix), kCompute}});
  }

  // ---- decode layer step ----
  {
    StepCost& st = m.decode_layer;
    // R rows of hidden state per sequence; E kept tokens' KV stored.
    const Affine d2c_s = (w_layer / d2c_w) * disk(W) + (hid_token * R * B / d2c) * disk(ACT) +
                         (kv_disk_s * B) * disk(KV);
    const Affine c2d_s = (1 / c2d) * (kv_token * E * B * disk(KV) + hid_token * R * B * disk(ACT));
    // The next layer's weight load slows the compute beside it (measured:
    // EngineCompute::decode_stream_extra), the more the more of it is read.
    const Affine gemm = affine_constant(gemm_decode) + decode_stream_extra * disk(W);
    if (unified) {
      const Affine attn = affine_constant(B * attn_dev_seq);
      st.terms = {{"disk->cpu", d2c_s},
                  {"cpu->disk", c2d_s},
                  {gemm_name, gemm, kCompute},
                  {"attention", attn, kCompute}};
      st.bounds = {{"disk->cpu + cpu->disk", {0, 1}}, {"compute", {2, 3}}};
    } else {
      // With CPU attention only q goes down and the attention output comes
      // back; without it the KV held off the device is loaded every step.
      const Affine kv_in =
          cpu_attention ? (a * q_dim * R * B) * off(KV) : (kv_token * ctx_loaded * B) * off(KV);
      const Affine kv_out =
          (kv_token * E * B) * off(KV) + (cpu_attention ? (a * q_dim * R * B) * off(KV) : Affine());
      const Affine c2g_s = (1 / c2g) * (w_layer * off(W) + hid_token * R * B * off(ACT) + kv_in);
      const Affine g2c_s = (1 / g2c) * (hid_token * R * B * off(ACT) + kv_out);
      const Affine attn_dev = (B * attn_dev_seq) * (cpu_attention ? gpu(KV) : affine_constant(1));
      const Affine attn_cpu = cpu_attention ? (B * attn_cpu_seq) * off(KV) : Affine();
      st.terms = {{"cpu->gpu", c2g_s},
                  {"gpu->cpu", g2c_s},
                  {"disk->cpu", d2c_s},
                  {"cpu->disk", c2d_s},
                  {"gemm", gemm, kCompute},
                  {"attention (gpu)", attn_dev, kCompute},
                  {"attention (cpu)", attn_cpu, CostTerm::Kind::kCpuAttention}};
      st.bounds = {{"cpu->gpu + gpu->cpu", {0, 1}},
                   {"cpu->gpu + disk->cpu", {0, 2}},
                   {"cpu->gpu + cpu->disk", {0, 3}},
                   {"disk->cpu + cpu->disk", {2, 3}},
                   {"cpu->gpu + compute", {0, 4, 5, 6}}};
    }
  }
  // ---- embeddings and output head, once per step ----
  // Every step stages the embedding table (its rows of the step's tokens are
  // looked up) and the head. With tied embeddings the head is the same
  // table, and a decode step's embeddings are the previous step's head
  // load (offload/weight_staging.h): only the prefill stages it twice.
  for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
    const bool embed_from_head = shape.tied_embeddings && phase == Phase::kDecode;
    const double w_embed = embed_from_head ? 0.0 : head_elems * w_bytes;
    StepCost& st = phase == Phase::kPrefill ? m.prefill_head : m.decode_head;
    const Affine gemm = affine_constant(phase == Phase::kPrefill ? head_prefill : head_decode);
    const double embed_s = w_embed > 0 ? w_embed / hw.weight_read_rate(w_embed) : 0.0;
    Affine d2c_s = (w_head / hw.weight_read_rate(w_head) + embed_s) * disk(W);
    if (unified) {
      // The engine's load of the embeddings' disk share queues behind the
      // head's (both issued with the head's compute, which is short) and
      // the head's behind the last layer's: each is waited for by the
      // compute that needs it next, with nothing to overlap, so the step
      // is their sum (see the trace of a decode with the weights on disk).
      // Likewise the first micro-batch's KV read for the first layer: a
      // step's page reads are planned when it begins, after the head.
      if (phase == Phase::kDecode) d2c_s += (kv_disk_s * g) * disk(KV);
      st.terms = {{"disk->cpu", d2c_s}, {gemm_name, gemm, kCompute}};
      st.bounds = {{"disk->cpu + compute", {0, 1}}};
    } else {
      const Affine c2g_s = ((w_head + w_embed) / c2g) * off(W);
      st.terms = {{"cpu->gpu", c2g_s}, {"disk->cpu", d2c_s}, {"gemm", gemm, kCompute}};
      if (phase == Phase::kPrefill) {
        st.bounds = {{"cpu->gpu + disk->cpu", {0, 1}}, {"compute", {2}}};
      } else {
        st.bounds = {{"cpu->gpu + disk->cpu", {0, 1}}, {"cpu->gpu + compute", {0, 2}}};
      }
    }
  }

  // A prefix step stages the embeddings and the head as the prefill does
  // (and runs the head on its rows, whose logits nobody reads).
  if (P > 0) m.prefix_head = m.prefill_head;

  // ---- memory ----
  // Working memory of one micro-batch on the device: the residual stream
  // plus the largest stage's live tensors, for `tokens` new tokens per
  // sequence attending over `ctx`. Attention scores are formed one sequence
  // at a time ([n_head, tokens, ctx]).
  auto working = [&](double tokens, double ctx) {
    const double stages[] = {
        a * g * tokens * (h + q_dim + 2 * kv_dim),                              // qkv
        a * g * tokens * (2 * q_dim + 2 * kv_dim) + a * n_head * tokens * ctx,  // attention
        a * g * tokens * (q_dim + h),                                           // output proj
        a * g * tokens * (h + n_ff * (shape.gated_ffn ? 3 : 1)),                // ffn up/gate
        a * g * tokens * (n_ff + h),                                            // ffn down
        g * (a * h + 4 * vocab),                                                // logits (f32)
    };
    return a * g * tokens * h + *std::max_element(std::begin(stages), std::end(stages));
  };
  const Tier dev = unified ? Tier::kCpu : Tier::kGpu;
  for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
    const int ph = static_cast<int>(phase);
    const bool pre = phase == Phase::kPrefill;
    // KV held by the block: every sequence's, less what it stores once.
    const double kv_ctx = (pre ? s : ctx_end) * B - kv_stored_once;
    const double act_tokens = pre ? s : 1;  // hidden states held per sequence
    for (Tier tier : {Tier::kGpu, Tier::kCpu, Tier::kDisk}) {
      TierMemory& tm = m.memory[static_cast<int>(tier)][ph];
      tm.weights = w_total * share(W, tier);
      tm.kv_cache = (kv_token * kv_ctx * L) * share(KV, tier);
      tm.activations = (hid_token * act_tokens * B) * share(ACT, tier);
    }
    // Device: double buffers of what streams in, staging of activations in
    // and out, the KV of a micro-batch going out (prefill) or coming in
    // (decode without CPU attention), and the working memory.
    TierMemory& dm = m.memory[static_cast<int>(dev)][ph];
    dm.buffers += (2 * stage_per_share) * off(W);
    dm.buffers += (2 * hid_token * act_tokens * g) * off(ACT);
    if (pre) {
      dm.buffers += (kv_token * s * g) * off(KV);
    } else if (!cpu_attention) {
      dm.buffers += (2 * kv_token * ctx_stage * g) * off(KV);
    }
    dm.buffers += affine_constant(pre ? working(s, s) : working(1, ctx_end));
    if (!unified) {
      // Host: relays of what comes from or goes to disk, and the CPU
      // attention's scores and q/out of one micro-batch.
      TierMemory& cm = m.memory[static_cast<int>(Tier::kCpu)][ph];
      cm.buffers += (2 * stage_per_share) * disk(W);
      cm.buffers += (2 * hid_token * act_tokens * g) * disk(ACT);
      cm.buffers += (pre ? kv_token * s * g : 2 * kv_token * ctx_stage * g) * disk(KV);
      if (!pre && cpu_attention)
        cm.buffers += affine_constant(g * a * (n_head * ctx_end + 2 * q_dim));
    }
  }

  m.staging_granule[static_cast<int>(dev)] = 2 * stage_granule;
  if (!unified) m.staging_granule[static_cast<int>(Tier::kCpu)] = 2 * stage_granule;
  if (unified) {
    m.forced[static_cast<int>(Share::kWGpu)] = 0;
    m.forced[static_cast<int>(Share::kKvGpu)] = 0;
    m.forced[static_cast<int>(Share::kActGpu)] = 0;
  }
  return m;
}

WeightPath CostModel::weight_path(const Placement& x) const {
  // Shares below this are solver residue: the engine places no tensor there.
  constexpr double kNone = 1e-7;
  const Placement f = x.folded(hw.unified_memory());
  if (f.disk(DataKind::kWeights) > kNone) return WeightPath::kFromDisk;
  if (!hw.unified_memory() && 1 - f[Share::kWGpu] > kNone) return WeightPath::kFromRam;
  return WeightPath::kResident;
}

double CostModel::granule(int tier, WeightPath path) const {
  const int dev = static_cast<int>(hw.unified_memory() ? Tier::kCpu : Tier::kGpu);
  if (tier == dev) return path == WeightPath::kResident ? 0 : staging_granule[tier];
  return path == WeightPath::kFromDisk ? staging_granule[tier] : 0;
}

double CostModel::bytes(int tier, int phase, const Placement& x) const {
  return memory[tier][phase].total()(x) + granule(tier, weight_path(x));
}

Prediction evaluate(const CostModel& m, const Policy& policy_in, const Budgets& budgets) {
  const Policy policy = normalize_policy(policy_in, m.hw);
  validate_policy(policy, "policy");
  STRATA_ASSERT_MSG(policy.gpu_batch_size == m.batch.gpu_batch_size &&
                        policy.num_gpu_batches == m.batch.num_gpu_batches &&
                        policy.cpu_attention == m.batch.cpu_attention &&
                        policy.compress_weight == m.batch.compress_weight &&
                        policy.compress_kv == m.batch.compress_kv &&
                        policy.sparse_attention_budget == m.batch.sparse_attention_budget,
                    "cost model built for another batch shape");
  const Placement& x = policy.placement;
  Prediction p;
  const double B = static_cast<double>(policy.block_size());
  const double s = static_cast<double>(m.work.prompt_len);
  const double n = static_cast<double>(m.work.gen_len);
  p.block_size = policy.block_size();
  p.prefill_layer_s = m.prefill_layer.seconds(x);
  p.decode_layer_s = m.decode_layer.seconds(x);
  p.prefill_head_s = m.prefill_head.seconds(x);
  p.decode_head_s = m.decode_head.seconds(x);
  p.prefill_s = m.prefill_seconds(x);
  p.decode_s = m.decode_seconds(x);
  p.total_s = p.prefill_s + p.decode_s;
  p.prefill_tokens_per_s = p.prefill_s > 0 ? B * s / p.prefill_s : 0;
  p.decode_tokens_per_s = p.decode_s > 0 ? B * (n - 1) / p.decode_s : 0;
  p.total_tokens_per_s = p.total_s > 0 ? B * n / p.total_s : 0;
  for (const CostTerm& t : m.prefill_layer.terms)
    p.prefill_terms.emplace_back(t.name, t.seconds(x));
  for (const CostTerm& t : m.decode_layer.terms) p.decode_terms.emplace_back(t.name, t.seconds(x));
  p.block_busy_s = m.busy_seconds(x);
  p.bound_prefill = m.prefill_layer.bound_label(m.prefill_layer.binding(x), x);
  p.bound_decode = m.decode_layer.bound_label(m.decode_layer.binding(x), x);
  p.bound_phase = p.decode_s > p.prefill_s ? Phase::kDecode : Phase::kPrefill;

  const double budget[] = {budgets.gpu, budgets.cpu, budgets.disk};
  for (int t = 0; t < kNumTiers; ++t) {
    TierUse& u = p.memory[t];
    u.budget = budget[t];
    u.used = !(m.hw.unified_memory() && t == static_cast<int>(Tier::kGpu));
    const TierMemory& pre = m.memory[t][0];
    const TierMemory& dec = m.memory[t][1];
    u.prefill = m.bytes(t, 0, x);
    u.decode = m.bytes(t, 1, x);
    const TierMemory& peak = u.decode >= u.prefill ? dec : pre;
    u.peak = std::max(u.prefill, u.decode);
    u.weights = peak.weights(x);
    u.kv_cache = peak.kv_cache(x);
    u.activations = peak.activations(x);
    u.buffers = peak.buffers(x) + m.granule(t, m.weight_path(x));
    if (u.over()) p.fits = false;
  }
  return p;
}

Prediction predict(const ModelShape& shape, const HardwareProfile& hw, const Workload& work,
                   const Policy& policy, const Budgets& budgets, const EngineCompute* compute) {
  return evaluate(build_cost_model(shape, hw, work, policy, compute), policy, budgets);
}

std::string over_budget_message(const Prediction& p) {
  static const char* kFlags[] = {"--gpu-mem", "--cpu-mem", "--disk-mem"};
  static const char* kTierWords[] = {"GPU memory", "CPU memory", "disk"};
  std::string out;
  for (int t = 0; t < kNumTiers; ++t) {
    const TierUse& u = p.memory[t];
    if (!u.over()) continue;
    if (!out.empty()) out += "; ";
    out += fmt::format("needs {} of {}, {} is {}", format_bytes(u.peak), kTierWords[t], kFlags[t],
                       format_bytes(u.budget));
  }
  return out;
}

}  // namespace strata
