// The placement flags shared by generate, bench and perplexity, and how
// they become a plan request (plan/run_plan.h):
//   --percent W_GPU W_CPU KV_GPU KV_CPU ACT_GPU ACT_CPU   FlexGen's six numbers
//   --gpu-batch-size N --num-gpu-batches K --cpu-attention
//   --policy FILE.yaml | auto      a policy file (policy/policy.h), or the
//                                  cost-model search for this machine
//   --hardware FILE|PRESET         the profile --policy auto plans for
//                                  (default: this machine, measured once and
//                                  cached)
//   --gpu-mem --cpu-mem --disk-mem --kv-mem   budgets in human units ("16G")
//   --offload-dir DIR              the disk tier (default ./strata-offload)
//   --trace FILE.json              Chrome/Perfetto trace of every span
//   --device cpu|cuda|cuda:N       the compute device (offload/device.h)
// What the flags mean is plan/run_plan.h's: this file only parses them.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "plan/run_plan.h"

namespace strata {
class Trace;
}  // namespace strata

namespace strata::cli {

struct OffloadFlags {
  std::string device = "cpu";
  std::vector<double> percent;
  std::optional<int64_t> gpu_batch_size, num_gpu_batches;
  bool cpu_attention = false;
  std::string policy, hardware, gpu_mem, cpu_mem, disk_mem, kv_mem, trace_path;
  int64_t plan_rank = 1;
  std::optional<int64_t> sparse_budget;
  bool sparse_score_first = false;
  std::string offload_dir = "strata-offload";

  // The compute dtype for --compute-dtype `requested` on this --device:
  // the default is bf16 on a CPU with native bf16, else f32, and f32 on a
  // GPU (bf16 GEMMs need sm_80 or later).
  DType compute_dtype(const std::string& requested) const;

  // `with_batch_flags`: add --gpu-batch-size / --num-gpu-batches (bench has
  // its own --batch / --num-batches and sets gpu_batch_size itself);
  // `with_placement`: the placement and policy flags (perplexity has the
  // device, budgets and offload directory only).
  void add(CLI::App& sub, bool with_batch_flags, bool with_placement = true);

  // The flags as a plan request; Error naming the flag for a bad value.
  PlanRequest request() const;
  // Resolves the plan into `eo` (plan/run_plan.h), with the trace when
  // --trace was given.
  RunPlan apply(EngineOptions& eo, const Model& model, const RunShape& run);
  // Writes the trace when --trace was given.
  void finish() const;

  std::shared_ptr<Trace> trace;  // set by apply() with --trace
};

}  // namespace strata::cli
