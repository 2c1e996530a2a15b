// The placement flags of generate, bench and perplexity (offload_flags.h).
#include "cli/offload_flags.h"

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "generate/driver.h"
#include "io/atomic_file.h"
#include "kernels/cpu/cpu_features.h"
#include "offload/device.h"
#include "offload/trace.h"

namespace strata::cli {

DType OffloadFlags::compute_dtype(const std::string& requested) const {
  const bool gpu = parse_device_name(device) >= 0;
  return choose_compute_dtype(requested.empty() && gpu ? "f32" : requested,
                              cpu::cpu_features().avx512_bf16);
}

void OffloadFlags::add(CLI::App& sub, bool with_batch_flags, bool with_placement) {
  sub.add_option("--device", device,
                 "Compute device: cpu, or cuda / cuda:N (GPU N; weights, KV cache and activations "
                 "on the gpu tier unless --percent or --policy says otherwise)")
      ->capture_default_str();
  if (with_placement) {
    sub.add_option("--policy", policy,
                   "Placement and batch sizes: a policy YAML (see `strata policy -o`), or auto: "
                   "the cost-model search for this machine and these budgets");
    sub.add_option("--percent", percent,
                   "Placement: W_GPU W_CPU KV_GPU KV_CPU ACT_GPU ACT_CPU percentages of weights, "
                   "KV cache and activations on gpu and cpu, disk the rest (on the CPU device gpu "
                   "and cpu are both RAM)")
        ->expected(6);
    if (with_batch_flags) {
      sub.add_option("--gpu-batch-size", gpu_batch_size, "Sequences per micro-batch");
      sub.add_option("--num-gpu-batches", num_gpu_batches, "Micro-batches per block");
    }
    sub.add_flag("--cpu-attention", cpu_attention,
                 "Attention on the CPU over a KV cache in RAM (and on disk), between the GPU's "
                 "projections (a GPU device, with KV_GPU 0; on the CPU device attention always "
                 "runs where the KV is)");
    sub.add_option("--sparse-budget", sparse_budget,
                   "Sparse decode attention (QUEST; lossy, opt-in): from layer 3 on, a sequence "
                   "longer than TOKENS attends, per KV head, to the TOKENS/16 pages its query "
                   "bounds highest (the first and last always); 0: dense (default, or the "
                   "policy's sparse_attention_budget)");
    sub.add_flag("--sparse-score-first", sparse_score_first,
                 "With --sparse-budget: the first page (the attention sink) competes on its bound "
                 "like the others instead of being kept always");
    sub.add_option("--hardware", hardware,
                   "Hardware profile for --policy auto and the predicted throughput: a preset or "
                   "YAML (default: this machine, measured once and cached)");
    sub.add_option("--plan-rank", plan_rank,
                   "With --policy auto: run the K-th fastest plan the search predicts instead of "
                   "the fastest (to measure its choice against the runners-up)")
        ->check(CLI::PositiveNumber);
  }
  sub.add_option("--gpu-mem", gpu_mem,
                 "GPU memory budget, e.g. 15G (default on a GPU: its free memory less 5% of the "
                 "total, at least 512M; on the CPU device: added to RAM)");
  sub.add_option("--cpu-mem", cpu_mem, "RAM budget, e.g. 200G (default: the RAM available)");
  sub.add_option("--disk-mem", disk_mem,
                 "Disk budget in --offload-dir, e.g. 1.5T (default: its free space)");
  sub.add_option("--kv-mem", kv_mem,
                 "KV cache budget: the most its pages in RAM or device memory take, e.g. 4G "
                 "(default: half the RAM available)");
  sub.add_option("--offload-dir", offload_dir,
                 "Directory of the disk tier: the weight pack (built once, reused while the model "
                 "is unchanged) and KV pages on disk")
      ->capture_default_str();
  if (with_placement) {
    sub.add_option("--trace", trace_path,
                   "Write a Chrome/Perfetto trace (JSON) of every load, store and compute span");
  }
}

PlanRequest OffloadFlags::request() const {
  const auto budget = [](const std::string& text, const char* flag) -> uint64_t {
    if (text.empty()) return 0;
    const uint64_t b = parse_bytes(text, flag);
    if (b == 0) fail("{} {}: a budget must be more than 0", flag, text);
    return b;
  };
  PlanRequest r;
  r.device = device;
  if (!percent.empty()) r.placement = Placement::from_percent(percent);
  r.gpu_batch_size = gpu_batch_size;
  r.num_gpu_batches = num_gpu_batches;
  r.cpu_attention = cpu_attention;
  if (sparse_budget && *sparse_budget < 0)
    fail("--sparse-budget {}: must not be negative (0: dense)", *sparse_budget);
  r.sparse_budget = sparse_budget;
  r.policy = policy;
  r.hardware = hardware;
  r.plan_rank = plan_rank;
  r.gpu_mem = budget(gpu_mem, "--gpu-mem");
  r.cpu_mem = budget(cpu_mem, "--cpu-mem");
  r.disk_mem = budget(disk_mem, "--disk-mem");
  r.kv_mem = budget(kv_mem, "--kv-mem");
  r.offload_dir = offload_dir;
  return r;
}

RunPlan OffloadFlags::apply(EngineOptions& eo, const Model& model, const RunShape& run) {
  const PlanRequest r = request();
  if (!trace_path.empty()) {
    check_writable_file(trace_path, "--trace");
    trace = std::make_shared<Trace>();
    eo.trace = trace;
  }
  RunPlan plan = resolve_plan(r, model, run, eo);
  eo.sparse_keep_first = !sparse_score_first;
  return plan;
}

void OffloadFlags::finish() const {
  if (trace && !trace_path.empty()) {
    trace->write_json(trace_path);
    spdlog::info("wrote the trace ({} spans) to {}", trace->size(), trace_path);
  }
}

}  // namespace strata::cli
