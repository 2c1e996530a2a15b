// `strata policy`: the dry run of a placement. For a model (a preset shape,
// a shape YAML, or a model on disk), a hardware profile and a workload, it
// searches batch sizes and placement fractions with the cost model and the
// LP (policy/search.h), or evaluates a policy given by flags or a YAML file,
// and prints the placement, batch sizes, memory per tier, predicted prefill,
// decode and total throughput and the binding term, as text or one JSON
// object. Loads no weights; a model on disk is only described.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/offload_flags.h"
#include "core/error.h"
#include "core/units.h"
#include "generate/engine.h"
#include "kv/shared_prefix.h"
#include "model/model.h"
#include "offload/device_support.h"
#include "policy/cost_model.h"
#include "policy/hardware.h"
#include "policy/model_shape.h"
#include "policy/policy.h"
#include "policy/presets.h"
#include "policy/report_json.h"
#include "policy/search.h"

namespace strata::cli {
namespace {

struct PolicyArgs {
  std::string model;
  std::string hardware;
  int64_t prompt_len = 512;
  int64_t gen_len = 32;
  int64_t shared_prefix = 0;
  std::string gpu_mem, cpu_mem, disk_mem;
  std::string compress_weight, compress_kv;
  std::vector<double> percent;
  std::optional<int64_t> gpu_batch_size;
  std::optional<int64_t> num_gpu_batches;
  int cpu_attention = -1;  // -1 not given, 0 off, 1 on
  std::optional<int64_t> sparse_budget;
  std::string policy_file;
  std::string output;
  int64_t max_block = 4096;
  bool json = false;
};

ModelShape resolve_model(const std::string& arg) {
  const bool yaml = arg.size() > 5 && (arg.ends_with(".yaml") || arg.ends_with(".yml"));
  if (yaml) return load_model_shape(arg);
  if (looks_like_path(arg)) return model_shape_of(*Model::open(arg));
  return find_model_preset(arg);
}

std::string pct(double f) {
  return fmt::format("{:.1f}%", 100 * f);
}

std::string rate(double tokens_per_s) {
  if (tokens_per_s >= 100) return fmt::format("{:.0f}", tokens_per_s);
  if (tokens_per_s >= 10) return fmt::format("{:.1f}", tokens_per_s);
  return fmt::format("{:.2f}", tokens_per_s);
}

std::string seconds(double s) {
  if (s >= 100) return fmt::format("{:.0f} s", s);
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::string attention_word(const Policy& p, const HardwareProfile& hw) {
  if (hw.unified_memory()) return "on the CPU device";
  return p.cpu_attention ? "on the CPU for CPU-held KV" : "on the GPU";
}

void print_text(const ModelShape& shape, const HardwareProfile& hw, const Workload& work,
                const Policy& p, const Prediction& pr, bool searched, int64_t n_lp) {
  const bool unified = hw.unified_memory();
  fmt::print(
      "model        {}: {} layers, hidden {}, {} heads ({} KV), ffn {}{}, vocab {}; "
      "{:.3g}B params, {} of weights ({})\n",
      shape.name, shape.n_layer, shape.hidden, shape.n_head, shape.n_kv_head, shape.n_ff,
      shape.gated_ffn ? " gated" : "", shape.vocab, static_cast<double>(shape.n_params()) / 1e9,
      format_bytes(static_cast<double>(shape.n_params()) *
                   p.compress_weight.bytes_per_elem(shape.weight_bytes)),
      p.compress_weight.enabled() ? p.compress_weight.to_string() : shape.weight_dtype);
  fmt::print("hardware     {}: {} device{}\n", hw.name, unified ? "CPU" : "GPU",
             hw.description.empty() ? "" : "; " + hw.description);
  fmt::print(
      "workload     prompt {} + gen {} tokens per sequence{}\n", work.prompt_len, work.gen_len,
      work.shared_tokens > 0
          ? fmt::format(", the first {} shared by the block (computed once per block, their KV "
                        "stored once)",
                        work.shared_tokens)
          : std::string());
  fmt::print("policy       {}: gpu batch {} x {} batches = block of {} sequences; attention {}\n",
             searched ? fmt::format("searched ({} LPs)", n_lp) : std::string("given"),
             p.gpu_batch_size, p.num_gpu_batches, p.block_size(), attention_word(p, hw));
  fmt::print("compression  weights {}, KV cache {}{}\n", p.compress_weight.to_string(),
             p.compress_kv.to_string(),
             p.sparse_attention_budget > 0
                 ? fmt::format(", sparse attention over {} tokens", p.sparse_attention_budget)
                 : std::string());
  fmt::print("\nplacement          gpu       cpu      disk\n");
  for (const DataKind k : {DataKind::kWeights, DataKind::kKv, DataKind::kAct}) {
    fmt::print("  {:<12}{:>9} {:>9} {:>9}\n", data_kind_name(k), pct(p.placement.on(k, Tier::kGpu)),
               pct(p.placement.on(k, Tier::kCpu)), pct(p.placement.disk(k)));
  }

  fmt::print("\nmemory (peak)      gpu       cpu      disk\n");
  auto mem_row = [&](const char* name, auto get) {
    fmt::print("  {:<12}", name);
    for (int t = 0; t < kNumTiers; ++t) {
      const TierUse& u = pr.memory[t];
      fmt::print("{:>9} ", u.used ? format_bytes(get(u)) : std::string("-"));
    }
    fmt::print("\n");
  };
  mem_row("budget", [](const TierUse& u) { return u.budget; });
  mem_row("peak", [](const TierUse& u) { return u.peak; });
  mem_row("  weights", [](const TierUse& u) { return u.weights; });
  mem_row("  KV cache", [](const TierUse& u) { return u.kv_cache; });
  mem_row("  activations", [](const TierUse& u) { return u.activations; });
  mem_row("  buffers", [](const TierUse& u) { return u.buffers; });

  auto terms_line = [](const std::vector<std::pair<std::string, double>>& terms) {
    std::string out;
    for (const auto& [name, sec] : terms) {
      out += fmt::format("{}{} {}", out.empty() ? "" : ", ", name,
                         sec > 0 ? seconds(sec) : std::string("0"));
    }
    return out;
  };
  fmt::print("\nlayer step   prefill: {}\n", terms_line(pr.prefill_terms));
  fmt::print("             decode:  {}\n", terms_line(pr.decode_terms));
  fmt::print("\npredicted    prefill {} tok/s ({}), decode {} tok/s ({}), total {} tok/s\n",
             rate(pr.prefill_tokens_per_s), seconds(pr.prefill_s), rate(pr.decode_tokens_per_s),
             seconds(pr.decode_s), rate(pr.total_tokens_per_s));
  fmt::print("             one block of {} sequences takes {}\n", pr.block_size,
             seconds(pr.total_s));
  fmt::print("bound        {}: {} (prefill: {}; decode: {})\n", phase_name(pr.bound_phase),
             pr.bound_phase == Phase::kPrefill ? pr.bound_prefill : pr.bound_decode,
             pr.bound_prefill, pr.bound_decode);
}

std::string yaml_header(const ModelShape& shape, const HardwareProfile& hw, const Workload& work,
                        const Prediction& pr) {
  std::string mem;
  for (int t = 0; t < kNumTiers; ++t) {
    if (!pr.memory[t].used) continue;
    mem += fmt::format("{}{} {}", mem.empty() ? "" : ", ", tier_name(static_cast<Tier>(t)),
                       format_bytes(pr.memory[t].peak));
  }
  return fmt::format(
      "Strata policy for {} on {}, prompt {} + gen {}.\n"
      "Predicted: prefill {} tok/s, decode {} tok/s, total {} tok/s; bound {}: {}.\n"
      "Peak memory: {}.",
      shape.name, hw.name, work.prompt_len, work.gen_len, rate(pr.prefill_tokens_per_s),
      rate(pr.decode_tokens_per_s), rate(pr.total_tokens_per_s), phase_name(pr.bound_phase),
      pr.bound_phase == Phase::kPrefill ? pr.bound_prefill : pr.bound_decode, mem);
}

// The workload of a block of `block_size` sequences whose prompts all begin
// with the same `shared` tokens (a system prompt), shared as the engine
// shares them (kv/shared_prefix.h: whole pages, a prompt's last token
// computed by its prefill): computed once per block by a prefix step, and
// its KV stored once (all but one sequence take it from that one).
void share_prefix(Workload& work, int64_t shared, int64_t block_size) {
  if (shared <= 0 || block_size < 2) return;
  std::vector<int32_t> a(static_cast<size_t>(work.prompt_len), 1), b = a;
  std::fill(a.begin() + shared, a.end(), 2);
  std::fill(b.begin() + shared, b.end(), 3);
  const std::vector<std::span<const int32_t>> prompts{a, b};
  const std::vector<PrefixGroup> groups = find_prefix_groups(prompts, EngineOptions{}.page_size);
  if (groups.empty()) return;
  work.shared_tokens = static_cast<double>(groups.front().tokens);
  work.prefix_step_tokens = work.shared_tokens;
  work.prefix_steps = 1;
  work.kv_shared_seqs = block_size - 1;
  work.kv_shared_tokens = groups.front().tokens;
}

int run_policy(const PolicyArgs& a) {
  const ModelShape shape = resolve_model(a.model);
  const HardwareProfile hw = find_hardware_profile(a.hardware);
  if (a.shared_prefix < 0 || a.shared_prefix > std::max<int64_t>(0, a.prompt_len)) {
    fail("--shared-prefix {} is not allowed; use 0 to --prompt-len ({})", a.shared_prefix,
         a.prompt_len);
  }
  Workload work{a.prompt_len, a.gen_len};
  Budgets budgets = budgets_of(hw);
  if (!a.gpu_mem.empty()) budgets.gpu = static_cast<double>(parse_bytes(a.gpu_mem, "--gpu-mem"));
  if (!a.cpu_mem.empty()) budgets.cpu = static_cast<double>(parse_bytes(a.cpu_mem, "--cpu-mem"));
  if (!a.disk_mem.empty())
    budgets.disk = static_cast<double>(parse_bytes(a.disk_mem, "--disk-mem"));

  // Sparse attention runs on the engine's CPU device only (its CUDA device
  // has none): a budget for a GPU profile is refused as the engine would.
  const auto check_sparse_budget = [&](int64_t budget) {
    DeviceCaps caps = device_caps(hw.unified_memory() ? "cpu" : "cuda");
    caps.name = fmt::format("{} (a GPU)", hw.name);
    check_sparse(caps, budget, EngineOptions{}.page_size);
  };

  std::optional<Compression> cw, ckv;
  if (!a.compress_weight.empty()) cw = parse_compression(a.compress_weight, "--compress-weight");
  if (!a.compress_kv.empty()) ckv = parse_compression(a.compress_kv, "--compress-kv");
  std::optional<Placement> percent;
  if (!a.percent.empty()) percent = Placement::from_percent(a.percent);

  Policy policy;
  Prediction pr;
  bool searched = false;
  int64_t n_lp = 0;
  const bool all_given = percent && a.gpu_batch_size && a.num_gpu_batches;
  if (!a.policy_file.empty() || all_given) {
    // Evaluate one fixed policy: the file's, with any flag overriding its field.
    if (!a.policy_file.empty()) policy = load_policy(a.policy_file);
    if (percent) policy.placement = *percent;
    if (a.gpu_batch_size) policy.gpu_batch_size = *a.gpu_batch_size;
    if (a.num_gpu_batches) policy.num_gpu_batches = *a.num_gpu_batches;
    if (a.cpu_attention >= 0) policy.cpu_attention = a.cpu_attention == 1;
    if (cw) policy.compress_weight = *cw;
    if (ckv) policy.compress_kv = *ckv;
    if (a.sparse_budget) policy.sparse_attention_budget = *a.sparse_budget;
    validate_policy(policy, a.policy_file.empty() ? "policy flags" : a.policy_file);
    check_sparse_budget(policy.sparse_attention_budget);
    policy = normalize_policy(policy, hw);
    share_prefix(work, a.shared_prefix, policy.block_size());
    pr = predict(shape, hw, work, policy, budgets);
  } else {
    SearchOptions opts;
    opts.gpu_batch_size = a.gpu_batch_size;
    opts.num_gpu_batches = a.num_gpu_batches;
    if (a.cpu_attention >= 0) opts.cpu_attention = a.cpu_attention == 1;
    if (cw) opts.compress_weight = *cw;
    if (ckv) opts.compress_kv = *ckv;
    opts.sparse_attention_budget = a.sparse_budget.value_or(0);
    check_sparse_budget(opts.sparse_attention_budget);
    if (percent) {
      for (int i = 0; i < kNumShares; ++i) opts.fixed[i] = percent->share[i];
    }
    opts.max_block_size = a.max_block;
    opts.adapt_workload = [&](Workload& w, int64_t block_size) {
      share_prefix(w, a.shared_prefix, block_size);
    };
    const SearchResult r = search_policy(shape, hw, work, budgets, opts);
    share_prefix(work, a.shared_prefix, r.policy.block_size());
    policy = r.policy;
    pr = r.prediction;
    searched = true;
    n_lp = r.n_lp_solved;
  }
  const std::string over = over_budget_message(pr);

  if (!a.output.empty()) save_policy(policy, a.output, yaml_header(shape, hw, work, pr));

  if (a.json) {
    nlohmann::json j;
    j["model"] = shape.name;
    j["model_shape"] = {{"n_layer", shape.n_layer},
                        {"hidden", shape.hidden},
                        {"n_head", shape.n_head},
                        {"n_kv_head", shape.n_kv_head},
                        {"head_dim", shape.head_dim},
                        {"n_ff", shape.n_ff},
                        {"vocab", shape.vocab},
                        {"max_context", shape.max_context},
                        {"gated_ffn", shape.gated_ffn},
                        {"tied_embeddings", shape.tied_embeddings},
                        {"weight_bytes", shape.weight_bytes},
                        {"n_params", shape.n_params()}};
    j["hardware"] = hw.name;
    j["workload"] = {{"prompt_len", work.prompt_len},
                     {"gen_len", work.gen_len},
                     {"shared_tokens", work.shared_tokens},
                     {"kv_shared_seqs", work.kv_shared_seqs},
                     {"kv_shared_tokens", work.kv_shared_tokens}};
    j["mode"] = searched ? "search" : "evaluate";
    if (searched) j["lp_solved"] = n_lp;
    j["policy"] = policy_to_json(policy);
    j["predicted"] = predicted_to_json(pr);
    j["memory"] = memory_to_json(pr);
    j["bound"] = bound_to_json(pr);
    j["terms"] = terms_to_json(pr);
    j["fits"] = pr.fits;
    if (!over.empty()) j["over_budget"] = over;
    if (!a.output.empty()) j["output"] = a.output;
    fmt::print("{}\n", j.dump(2));
  } else {
    print_text(shape, hw, work, policy, pr, searched, n_lp);
    if (!a.output.empty()) fmt::print("wrote        {}\n", a.output);
  }
  if (!over.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: warning: this policy does not fit: %s\n", over.c_str());
  }
  return 0;
}

const Command kPolicy{
    "policy",
    "Plan placement and batch sizes for a model and machine, and predict throughput (no weights "
    "loaded)",
    20, [](CLI::App& sub) -> Runner {
      auto a = std::make_shared<PolicyArgs>();
      sub.add_option(
             "--model,-m", a->model,
             "Model preset (opt-30b, llama-3-8b, ...), shape YAML, HF directory or .gguf file")
          ->required();
      sub.add_option("--hardware", a->hardware, "Hardware preset (t4-flexgen, ...) or profile YAML")
          ->required();
      sub.add_option("--prompt-len", a->prompt_len, "Prompt tokens per sequence")
          ->capture_default_str();
      sub.add_option("--gen-len", a->gen_len, "Generated tokens per sequence")
          ->capture_default_str();
      sub.add_option("--shared-prefix", a->shared_prefix,
                     "Prompt tokens every sequence begins with (a system prompt): the engine "
                     "computes and stores them once per block")
          ->capture_default_str();
      sub.add_option("--gpu-mem", a->gpu_mem,
                     "GPU memory budget, e.g. 15G (default: the profile's)");
      sub.add_option("--cpu-mem", a->cpu_mem,
                     "CPU memory budget, e.g. 200G (default: the profile's)");
      sub.add_option("--disk-mem", a->disk_mem, "Disk budget, e.g. 1.5T (default: the profile's)");
      sub.add_option("--compress-weight", a->compress_weight,
                     "Weight compression: none, q4, q8, q4:128");
      sub.add_option("--compress-kv", a->compress_kv, "KV cache compression: none, q4, q8, q4:128");
      sub.add_option("--percent", a->percent,
                     "Fix the placement: W_GPU W_CPU KV_GPU KV_CPU ACT_GPU ACT_CPU percentages")
          ->expected(6);
      sub.add_option("--gpu-batch-size", a->gpu_batch_size, "Fix the sequences per micro-batch");
      sub.add_option("--num-gpu-batches", a->num_gpu_batches, "Fix the micro-batches per block");
      sub.add_flag_function(
          "--cpu-attention", [a](int64_t) { a->cpu_attention = 1; },
          "Run decode attention over CPU-held KV on the CPU");
      sub.add_flag_function(
          "--no-cpu-attention", [a](int64_t) { a->cpu_attention = 0; },
          "Run all attention on the GPU");
      sub.add_option("--sparse-budget", a->sparse_budget,
                     "Sparse attention: KV tokens attended per sequence in decode (0 = dense; "
                     "CPU profiles only, as the engine)");
      sub.add_option("--policy", a->policy_file, "Evaluate this policy YAML instead of searching");
      sub.add_option("--max-block", a->max_block, "Largest block (sequences) the search considers")
          ->capture_default_str();
      sub.add_option("-o,--output", a->output, "Write the policy to this YAML file");
      sub.add_flag("--json", a->json, "Print one JSON object instead of text");
      return [a]() { return run_policy(*a); };
    }};

}  // namespace
}  // namespace strata::cli
