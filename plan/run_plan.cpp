// Plan resolution (run_plan.h).
#include "plan/run_plan.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "kernels/cuda/cuda_device.h"
#include "model/model.h"
#include "offload/device.h"
#include "offload/device_support.h"
#include "offload/engine_options.h"
#include "offload/measure.h"
#include "offload/plan_fit.h"
#include "offload/tier_budgets.h"
#include "plan/compute_profile.h"
#include "plan/machine_profile.h"
#include "policy/cost_model.h"
#include "policy/report_json.h"
#include "policy/search.h"
#include "policy/speculation.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

// The workload's shared prompt prefixes (Workload::shared_tokens and the
// prefix step; a mean below the prompt's rounded length: the prefill
// computes a token at least) and the KV each block stores once, for KV
// pages of `page_size` tokens.
void set_sharing(Workload& work, const SharingRates& sharing, int64_t page_size) {
  work.shared_tokens =
      std::clamp(sharing.shared_tokens, 0.0, static_cast<double>(work.prompt_len) - 1);
  work.prefix_step_tokens = sharing.prefix_step_tokens;
  work.prefix_steps = sharing.prefix_steps;
  work.kv_shared_seqs = sharing.kv.seqs;
  work.kv_shared_tokens = sharing.kv.pages * page_size;
}

Compression compression_of(const std::optional<DType>& t) {
  Compression c;
  if (!t || !is_quantized(*t)) return c;
  const DTypeInfo& info = dtype_info(*t);
  c.bits = info.bits;
  c.group_size = info.block_elems;
  c.symmetric = info.symmetric;
  return c;
}

std::optional<DType> dtype_of(const Compression& c, const char* what) {
  if (!c.enabled()) return std::nullopt;
  const std::optional<DType> t = quant_dtype(c.bits, c.symmetric, c.group_size);
  if (!t) fail("{} {}: Strata has no such format", what, c.to_string());
  return t;
}

// The policy's choices in the engine's options: batch sizes, placement, CPU
// attention, the compression it asks for where the flags did not set one,
// and the planned block's lengths.
void apply_policy(const Policy& p, const RunShape& run, EngineOptions& eo) {
  eo.gpu_batch_size = p.gpu_batch_size;
  eo.num_gpu_batches = p.num_gpu_batches;
  eo.placement = p.placement;
  eo.cpu_attention = p.cpu_attention;
  eo.sparse_budget = p.sparse_attention_budget;
  if (!eo.weight_dtype) eo.weight_dtype = dtype_of(p.compress_weight, "compress_weight");
  if (!is_quantized(eo.kv_dtype)) {
    if (const auto t = dtype_of(p.compress_kv, "compress_kv")) eo.kv_dtype = *t;
  }
  eo.plan_prompt_tokens = run.max_prompt;
  eo.plan_new_tokens = run.gen;
  eo.plan_sharing =
      run.sharing && eo.prefix_sharing ? run.sharing(p.block_size()).kv : PlanSharing{};
}

// Bytes of the engine's activation element: it holds hidden states and a
// layer's working rows in f32 (offload/block_budget.cpp).
constexpr double kEngineActBytes = sizeof(float);

// Bytes of the engine's KV element before any compression the policy asks
// for: its KV dtype, or when that is quantized the one it computes beside.
double uncompressed_kv_bytes(const EngineOptions& eo) {
  const DType t = is_quantized(eo.kv_dtype) ? default_kv_dtype(eo.compute_dtype) : eo.kv_dtype;
  return static_cast<double>(dtype_info(t).block_bytes);
}

// The KV budget: --kv-mem's, or without it the default or, if more, what
// the planned block's pages need (`kv_need`; the tier budgets still bound it).
uint64_t kv_budget_for(const PlanRequest& r, const EngineOptions& eo, uint64_t kv_need) {
  if (r.kv_mem > 0) return eo.kv_budget_bytes;
  return std::max(default_kv_budget_bytes(), kv_need);
}

// The search for this machine (or --hardware) under the budgets, over the
// placements the device runs, every candidate checked by the engine
// (offload/plan_fit.h).
Policy search(const PlanRequest& r, const Model& model, const RunShape& run,
              const EngineOptions& eo, Policy p, RunPlan& plan) {
  const bool gpu = parse_device_name(r.device) >= 0;
  if (gpu && !plan.hardware) {
    fail(
        "--policy auto on {} needs --hardware FILE|PRESET, a profile of this GPU machine (the "
        "profile `strata profile` measures and caches is the CPU device's)",
        r.device);
  }
  if (!plan.hardware) plan.hardware = this_machine_profile(r.offload_dir);
  const HardwareProfile& hw = *plan.hardware;
  if (gpu && hw.unified_memory()) {
    fail("--hardware {}: {} describes a device computing on host RAM, not {}", r.hardware, hw.name,
         r.device);
  }
  if (!gpu && hw.unified_memory()) plan.compute = engine_compute_for(model, eo, r.offload_dir);
  const ModelShape shape = model_shape_of(model);
  Workload work{std::max<int64_t>(1, run.max_prompt), std::max<int64_t>(1, run.gen)};
  work.kv_elem_bytes = plan.kv_elem_bytes;
  work.act_elem_bytes = kEngineActBytes;
  Budgets b;
  const double ram = static_cast<double>(eo.cpu_mem > 0 ? eo.cpu_mem : available_ram_bytes());
  if (hw.unified_memory()) {
    b.gpu = 0;
    b.cpu = ram + static_cast<double>(eo.gpu_mem);
  } else {
    b.gpu = eo.gpu_mem > 0 ? static_cast<double>(eo.gpu_mem) : hw.gpu_mem;
    b.cpu = ram;
  }
  if (eo.disk_mem > 0) {
    b.disk = static_cast<double>(eo.disk_mem);
  } else {
    std::error_code ec;
    fs::create_directories(r.offload_dir, ec);
    b.disk = static_cast<double>(free_disk_bytes(r.offload_dir));
  }
  SearchOptions so;
  if (run.sharing) {
    so.adapt_workload = [&](Workload& w, int64_t block_size) {
      set_sharing(w, run.sharing(block_size), eo.page_size);
    };
  }
  so.gpu_batch_size = r.gpu_batch_size;
  so.num_gpu_batches = r.num_gpu_batches;
  if (r.cpu_attention) so.cpu_attention = true;
  // What the engine runs on this device (offload/device_support.h).
  so.fixed = runnable_pins(device_caps(r.device), r.cpu_attention);
  if (gpu && !r.cpu_attention) so.cpu_attention = false;
  so.compress_weight = p.compress_weight;
  so.compress_kv = p.compress_kv;
  so.sparse_attention_budget = r.sparse_budget.value_or(0);
  if (r.placement) {
    for (size_t i = 0; i < kNumShares; ++i) so.fixed[i] = r.placement->share[i];
  }
  so.max_block_size = std::max<int64_t>(1, run.max_block);
  if (plan.compute) so.compute = &*plan.compute;
  so.rank = r.plan_rank;
  const DeviceCaps caps = device_caps(r.device);
  const uint64_t device_bytes = hw.unified_memory() ? 0 : static_cast<uint64_t>(hw.gpu_mem);
  int64_t draft_k = eo.max_draft_tokens;  // the draft length of the search under way
  so.engine_fit = [&](const Policy& candidate) {
    EngineOptions e = eo;
    apply_policy(candidate, run, e);
    e.max_draft_tokens = draft_k;
    const PlanFit f = plan_fit(model, e, caps, device_bytes);
    EngineFit out;
    out.refused = !f.refusal.empty();
    out.refusal = f.refusal;
    out.kv_short = f.kv_need > kv_budget_for(r, e, f.kv_need);
    // The engine's tiers as the cost model names them: on a device computing
    // on host RAM, the RAM is the cpu tier.
    out.need = {static_cast<double>(f.need.device), static_cast<double>(f.need.ram),
                static_cast<double>(f.need.disk)};
    out.budget = {static_cast<double>(f.budget.device), static_cast<double>(f.budget.ram),
                  static_cast<double>(f.budget.disk)};
    return out;
  };
  SearchResult sr;
  if (eo.max_draft_tokens > 0 && run.draft_accepted > 0) {
    // Speculation with a known acceptance: the draft length too, each
    // length's best plan against the others (0: none).
    const double pa = draft_token_acceptance(run.draft_accepted, eo.max_draft_tokens);
    for (int64_t k = 0; k <= eo.max_draft_tokens; ++k) {
      Workload w = work;
      const DraftRates d = draft_rates(pa, k);
      w.spec_rows = d.rows;
      w.spec_tokens = d.tokens;
      draft_k = k;
      SearchResult one;
      try {
        one = search_policy(shape, hw, w, b, so);
      } catch (const Error& e) {
        if (k == 0) throw;
        spdlog::debug("policy auto: {} draft tokens: {}", k, e.what());
        continue;
      }
      spdlog::debug("policy auto: {} draft tokens: {:.1f} tok/s predicted", k,
                    one.prediction.total_tokens_per_s);
      // A longer draft must gain more than rounding: where the model ties
      // (every cost grows with the rows as the kept tokens do) decoding
      // stays without.
      if (k == 0 ||
          one.prediction.total_tokens_per_s > sr.prediction.total_tokens_per_s * (1 + 1e-9)) {
        sr = std::move(one);
        plan.draft_tokens = k;
      }
    }
  } else {
    sr = search_policy(shape, hw, work, b, so);
  }
  p = normalize_policy(sr.policy, hw);
  spdlog::info(
      "policy auto: {} on {} for prompt {} (the longest; mean {:.1f}) + gen {}: {}gpu batch {} x "
      "{} batches, {}{}; predicted {:.1f} tok/s total, bound {} ({} LPs; budgets RAM {}, disk {})",
      shape.name, hw.name, work.prompt_len, run.mean_prompt, work.gen_len,
      r.plan_rank == 1 ? std::string() : fmt::format("plan {} of {}: ", r.plan_rank, sr.n_plans),
      p.gpu_batch_size, p.num_gpu_batches, p.placement.describe(),
      plan.draft_tokens >= 0 ? fmt::format(", {} draft tokens (accepted share {:.3g})",
                                           plan.draft_tokens, run.draft_accepted)
                             : std::string(),
      sr.prediction.total_tokens_per_s,
      sr.prediction.bound_phase == Phase::kPrefill ? sr.prediction.bound_prefill
                                                   : sr.prediction.bound_decode,
      sr.n_lp_solved, format_bytes(b.cpu), format_bytes(b.disk));
  return p;
}

}  // namespace

RunPlan resolve_plan(const PlanRequest& r, const Model& model, const RunShape& run,
                     EngineOptions& eo) {
  eo.device = r.device;
  device_caps(r.device);  // an unknown device name is an Error here
  eo.gpu_mem = r.gpu_mem;
  eo.cpu_mem = r.cpu_mem;
  eo.disk_mem = r.disk_mem;
  eo.kv_budget_bytes = r.kv_mem;
  if (r.offload_dir.empty()) fail("--offload-dir: must not be empty");
  eo.offload_dir = r.offload_dir;

  RunPlan plan;
  plan.kv_elem_bytes = uncompressed_kv_bytes(eo);
  plan.page_size = eo.page_size;
  Policy p;
  p.gpu_batch_size = eo.gpu_batch_size;
  p.num_gpu_batches = eo.num_gpu_batches;
  p.compress_weight = compression_of(eo.weight_dtype);
  p.compress_kv = compression_of(eo.kv_dtype);
  if (!r.hardware.empty()) plan.hardware = find_hardware_profile(r.hardware);

  if (r.plan_rank != 1 && r.policy != "auto") {
    fail("--plan-rank {}: ranks the plans of --policy auto; add --policy auto", r.plan_rank);
  }
  if (r.policy == "auto") {
    plan.source = "auto";
    p = search(r, model, run, eo, p, plan);
    if (plan.draft_tokens >= 0) eo.max_draft_tokens = plan.draft_tokens;
  } else {
    if (!r.policy.empty()) {
      p = load_policy(r.policy);
      plan.source = r.policy;
      if (!p.compress_weight.enabled()) p.compress_weight = compression_of(eo.weight_dtype);
      if (!p.compress_kv.enabled()) p.compress_kv = compression_of(eo.kv_dtype);
    } else {
      plan.source = "flags";
      p.placement = Placement{};  // everything where the device computes
    }
    if (r.placement) p.placement = *r.placement;
    if (r.gpu_batch_size) p.gpu_batch_size = *r.gpu_batch_size;
    if (r.num_gpu_batches) p.num_gpu_batches = *r.num_gpu_batches;
    if (r.cpu_attention) p.cpu_attention = true;
    if (r.sparse_budget) p.sparse_attention_budget = *r.sparse_budget;
    validate_policy(p, plan.source == "flags" ? "the placement flags" : plan.source);
  }
  plan.policy = p;

  apply_policy(p, run, eo);
  eo.kv_budget_bytes = kv_budget_for(r, eo, plan_fit(model, eo, device_caps(r.device)).kv_need);
  if (plan.hardware && plan.hardware->unified_memory() && parse_device_name(r.device) < 0 &&
      !plan.compute) {
    plan.compute = engine_compute_for(model, eo, r.offload_dir);
  }
  return plan;
}

nlohmann::ordered_json RunPlan::report_policy(const EngineOptions& eo) const {
  nlohmann::ordered_json j;
  j["source"] = source;
  j["device"] = eo.device;
  j["gpu_batch_size"] = eo.gpu_batch_size;
  j["num_gpu_batches"] = eo.num_gpu_batches;
  j["block_size"] = eo.gpu_batch_size * eo.num_gpu_batches;
  // As the device runs it (on the CPU device the gpu share is RAM: cpu).
  const Placement placed = eo.placement.folded(device_caps(eo.device).memory_is_host);
  j["weights"] = tier_shares<nlohmann::ordered_json>(placed, DataKind::kWeights);
  j["kv_cache"] = tier_shares<nlohmann::ordered_json>(placed, DataKind::kKv);
  j["activations"] = tier_shares<nlohmann::ordered_json>(placed, DataKind::kAct);
  j["cpu_attention"] = eo.cpu_attention;
  j["sparse_attention_budget"] = eo.sparse_budget;
  j["offload_dir"] = eo.offload_dir;
  if (hardware) j["hardware_profile"] = hardware->name;
  return j;
}

std::optional<PredictedThroughput> RunPlan::predict(const Model& model, double prompt_len,
                                                    int64_t gen_len, const SpeculationRates& spec,
                                                    const SharingRates& sharing) const {
  if (!hardware) return std::nullopt;
  try {
    const ModelShape shape = model_shape_of(model);
    Workload work;
    work.prompt_len = std::max<int64_t>(1, std::llround(prompt_len));
    work.gen_len = std::max<int64_t>(1, gen_len);
    work.spec_rows = spec.rows;
    work.spec_tokens = spec.tokens;
    work.draft_step_s = spec.draft_step_s;
    set_sharing(work, sharing, page_size);
    work.kv_elem_bytes = kv_elem_bytes;
    work.act_elem_bytes = kEngineActBytes;
    const Prediction pr = strata::predict(shape, *hardware, work, policy, budgets_of(*hardware),
                                          compute ? &*compute : nullptr);
    PredictedThroughput t;
    t.prefill_tokens_per_s = pr.prefill_tokens_per_s;
    t.decode_tokens_per_s = pr.decode_tokens_per_s;
    t.total_tokens_per_s = pr.total_tokens_per_s;
    t.bound = fmt::format("{}: {}", phase_name(pr.bound_phase),
                          pr.bound_phase == Phase::kPrefill ? pr.bound_prefill : pr.bound_decode);
    t.prefill_s = pr.prefill_s;
    t.decode_s = pr.decode_s;
    for (const auto& [name, s] : pr.decode_terms) t.decode_layer_terms[name] = s;
    for (const auto& [name, s] : pr.prefill_terms) t.prefill_layer_terms[name] = s;
    t.block_busy_s = pr.block_busy_s;
    t.workload = {
        {"prompt_len", work.prompt_len},
        {"gen_len", work.gen_len},
        {"block_size", policy.block_size()},
        {"hardware", hardware->name},
        {"compute", compute ? "the engine's, measured on this machine" : "the profile's rates"}};
    if (spec.rows > 1) {
      t.workload["speculation_rows"] = spec.rows;
      t.workload["speculation_tokens"] = spec.tokens;
    }
    if (spec.draft_step_s > 0) t.workload["draft_step_s"] = spec.draft_step_s;
    if (work.prefix_steps > 0) {
      t.workload["shared_tokens"] = work.shared_tokens;
      t.workload["prefix_step_tokens"] = work.prefix_step_tokens;
      t.workload["prefix_steps"] = work.prefix_steps;
    }
    return t;
  } catch (const Error& e) {
    spdlog::warn("the cost model cannot predict this run: {}", e.what());
    return std::nullopt;
  }
}

ModelShape model_shape_of(const Model& model) {
  const ModelDesc& d = model.desc();
  const ModelConfig& c = d.config;
  ModelShape s;
  s.name = d.path;
  s.source = d.path;
  s.n_layer = c.n_layer;
  s.hidden = c.n_embd;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head > 0 ? c.n_kv_head : c.n_head;
  s.head_dim = c.head_dim > 0 ? c.head_dim : (c.n_head > 0 ? c.n_embd / c.n_head : 0);
  s.n_ff = c.n_ff;
  s.vocab = c.n_vocab;
  s.max_context = c.n_ctx;
  s.gated_ffn = c.gated_ffn;
  s.tied_embeddings = c.tie_embeddings;
  s.weight_dtype = c.source_dtype;
  double bytes = 0, elems = 0;
  for (const TensorInfo& t : d.tensors) {
    bytes += static_cast<double>(t.nbytes);
    elems += static_cast<double>(t.n_elems());
  }
  s.weight_bytes = elems > 0 ? bytes / elems : 2.0;
  validate_model_shape(s, d.path);
  return s;
}

std::string describe_device(const std::string& device, int threads) {
  const int index = parse_device_name(device);
  if (index < 0) return describe_cpu(threads);
  return fmt::format("cuda:{} {}; host {}", index, cuda_device_description(index),
                     describe_cpu(threads));
}

RunReport plan_report(const RunPlan& plan, const Model& model, const std::string& model_path,
                      const EngineOptions& eo, double prompt_len, int64_t gen_len,
                      const SpeculationRates& spec, const SharingRates& sharing) {
  RunReport report;
  report.model = model_path;
  report.policy = plan.report_policy(eo);
  report.policy["compute_dtype"] = std::string(dtype_name(eo.compute_dtype));
  report.policy["kv_dtype"] = std::string(dtype_name(eo.kv_dtype));
  report.policy["weight_dtype"] =
      eo.weight_dtype ? std::string(dtype_name(*eo.weight_dtype)) : std::string("none");
  report.predicted = plan.predict(model, prompt_len, gen_len, spec, sharing);
  report.hardware = describe_device(eo.device, eo.threads);
  return report;
}

}  // namespace strata
