// Plan resolution: from what a user asked (placement flags, a policy file,
// or `auto`: the cost-model search for this machine) to the offload engine's
// options, as one library function that `strata generate`, `bench` and
// `perplexity` call and tests call without the command line. It owns:
//   - the defaults: without a placement or a policy, everything where the
//     device computes (core/placement.h's default);
//   - `auto`: this machine's profile (measured once and cached,
//     plan/machine_profile.h) or the --hardware one, the budgets, and the
//     search (policy/search.h) over the placements the device runs
//     (offload/device_support.h pins the rest);
//   - flags overriding the fields of a policy file;
//   - the budgets (--gpu-mem, --cpu-mem, --disk-mem, --kv-mem);
//   - the report's view of the plan and the cost model's prediction for the
//     run, beside the measurement, whenever a hardware profile is at hand.
// Everything is checked before any work: an Error names the flag or file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/placement.h"
#include "generate/engine.h"
#include "generate/report.h"
#include "policy/engine_compute.h"
#include "policy/hardware.h"
#include "policy/model_shape.h"
#include "policy/policy.h"

namespace strata {

class Model;

// What the user asked, as the flags say it.
struct PlanRequest {
  std::string device = "cpu";              // --device
  std::optional<Placement> placement;      // --percent
  std::optional<int64_t> gpu_batch_size;   // --gpu-batch-size
  std::optional<int64_t> num_gpu_batches;  // --num-gpu-batches
  bool cpu_attention = false;              // --cpu-attention
  std::optional<int64_t> sparse_budget;    // --sparse-budget (tokens; 0: dense)
  std::string policy;                      // "", "auto" or a policy YAML
  std::string hardware;                    // a preset or a YAML; "": this machine
  int64_t plan_rank = 1;                   // --plan-rank: the k-th fastest plan of auto
  uint64_t gpu_mem = 0, cpu_mem = 0, disk_mem = 0, kv_mem = 0;  // 0: the default
  std::string offload_dir = "strata-offload";                   // the disk tier
};

// What a run plans for: prompt and generation lengths (the longest and the
// mean prompt), and the most prompts a block can usefully hold.
struct RunShape {
  int64_t max_prompt = 0;
  double mean_prompt = 0;
  int64_t gen = 0;
  int64_t max_block = 4096;
  // Speculative decoding with --policy auto: the share of draft tokens an
  // earlier run accepted (0: not given). With it the search also picks the
  // draft length, 0 (none) up to EngineOptions::max_draft_tokens.
  double draft_accepted = 0;
  // What the run's blocks share of their prompts, for a block size
  // (generate/driver.h: planned_sharing): the search plans each block size
  // with it. Null: nothing shared.
  std::function<SharingRates(int64_t block_size)> sharing;
};

// The plan that runs.
struct RunPlan {
  Policy policy;
  std::string source;  // "flags", the policy file, or "auto"
  std::optional<HardwareProfile> hardware;
  // The engine's compute for this model and its dtypes, measured on this
  // machine (plan/compute_profile.h), when the plan is for the CPU device
  // and has a profile: the cost model's compute terms then come from it.
  std::optional<EngineCompute> compute;
  // The draft length the search picked (RunShape::draft_accepted given),
  // set into EngineOptions::max_draft_tokens; -1: not picked.
  int64_t draft_tokens = -1;
  // Bytes of the engine's uncompressed KV element (Workload::kv_elem_bytes).
  double kv_elem_bytes = 2;
  int64_t page_size = 16;  // tokens per KV page (EngineOptions::page_size)

  // The policy as the report shows it (with the options it ran with).
  nlohmann::ordered_json report_policy(const EngineOptions& eo) const;
  // The cost model's prediction for the run's measured lengths (nullopt
  // without a profile, or when the model cannot predict it: a warning).
  // `spec`: speculative decoding's rows and kept tokens per sequence and
  // step (the cost model's Workload), as the run measured them; `sharing`:
  // its shared prompt prefixes likewise.
  std::optional<PredictedThroughput> predict(const Model& model, double prompt_len, int64_t gen_len,
                                             const SpeculationRates& spec = {},
                                             const SharingRates& sharing = {}) const;
};

// Resolves `request` for `model` and `run` into `eo` (placement, batch sizes,
// budgets, the offload directory, compression a policy asks for, the
// planned block's lengths). `eo` comes with its dtypes and compression set;
// its batch sizes are the defaults the flags override.
RunPlan resolve_plan(const PlanRequest& request, const Model& model, const RunShape& run,
                     EngineOptions& eo);

// The shape of a loaded model: its config's hyper-parameters, with the
// weights' bytes per element as stored (all tensors over all elements).
ModelShape model_shape_of(const Model& model);

// The hardware line of a report: the CPU ("cpu (2 threads, avx512_bf16)"),
// or the GPU's description and then the host CPU's.
std::string describe_device(const std::string& device, int threads);

// A run's report with what the plan says: the model, the policy (with the
// compute, KV and weight dtypes), the hardware and the prediction for
// `prompt_len` and `gen_len` (and speculation's and prefix sharing's
// measured rates); the caller adds what it measured.
RunReport plan_report(const RunPlan& plan, const Model& model, const std::string& model_path,
                      const EngineOptions& eo, double prompt_len, int64_t gen_len,
                      const SpeculationRates& spec = {}, const SharingRates& sharing = {});

}  // namespace strata
