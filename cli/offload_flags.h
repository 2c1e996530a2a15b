// The placement flags shared by generate and bench, and how they become
// EngineOptions (core/placement.h, DESIGN §3 and §7):
//   --percent W_GPU W_CPU KV_GPU KV_CPU ACT_GPU ACT_CPU   FlexGen's six numbers
//   --gpu-batch-size N --num-gpu-batches K --cpu-attention
//   --policy FILE.yaml | auto      a policy file (policy/policy.h), or the
//                                  cost-model search for this machine
//   --hardware FILE|PRESET         the profile --policy auto plans for
//                                  (default: this machine, measured once by
//                                  `strata profile --quick` and cached)
//   --gpu-mem --cpu-mem --disk-mem tier budgets in human units ("16G")
//   --offload-dir DIR              the disk tier (default ./strata-offload)
//   --trace FILE.json              Chrome/Perfetto trace of every span
//   --device cpu|cuda|cuda:N       the compute device (offload/device.h)
// Flags override the fields of a policy file. On the CPU device the gpu and
// cpu fractions both mean RAM and the RAM budget is --cpu-mem + --gpu-mem.
// Without --percent or --policy everything is placed where the device
// computes: RAM on the CPU, the gpu tier on a GPU.
//
// The cost model's prediction for the policy that runs, with the run's
// prompt and generation lengths, goes into the report beside the
// measurement whenever a hardware profile is at hand (given, cached, or
// measured for --policy auto).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "generate/engine.h"
#include "generate/report.h"
#include "policy/hardware.h"
#include "policy/model_shape.h"
#include "policy/policy.h"

namespace strata {
class Model;
class Trace;
}  // namespace strata

namespace strata::cli {

// The hardware line of a report: the CPU ("cpu (2 threads, avx512_bf16)"),
// or the GPU's description and then the host CPU's.
std::string describe_device(const std::string& device, int threads);

// The shape of a loaded model: its config's hyper-parameters, with the
// weights' bytes per element as stored (all tensors over all elements).
ModelShape model_shape_of(const Model& model);

// What a run plans for: prompt and generation lengths (the longest and the
// mean prompt), and the most prompts a block can usefully hold.
struct RunShape {
  int64_t max_prompt = 0;
  double mean_prompt = 0;
  int64_t gen = 0;
  int64_t max_block = 4096;
};

struct OffloadFlags {
  std::string device = "cpu";
  std::vector<double> percent;
  std::optional<int64_t> gpu_batch_size, num_gpu_batches;
  bool cpu_attention = false;
  std::string policy, hardware, gpu_mem, cpu_mem, disk_mem, trace_path;
  std::string offload_dir = "strata-offload";

  // The compute dtype for --compute-dtype `requested` on this --device:
  // the default is bf16 on a CPU with native bf16, else f32, and f32 on a
  // GPU (bf16 GEMMs need sm_80 or later).
  DType compute_dtype(const std::string& requested) const;

  // `with_batch_flags`: add --gpu-batch-size / --num-gpu-batches (bench has
  // its own --batch / --num-batches and sets gpu_batch_size itself).
  void add(CLI::App& sub, bool with_batch_flags);

  // The policy to run (from --policy, the flags, or the search), applied to
  // `eo` together with the budgets, the offload directory and the trace.
  // Checks everything it can before any work; Error naming the flag.
  void apply(EngineOptions& eo, const Model& model, const RunShape& run);

  // Set by apply().
  Policy chosen;
  std::string source;  // "flags", the policy file, or "auto"
  std::optional<HardwareProfile> hardware_profile;
  std::shared_ptr<Trace> trace;

  // The policy as the report shows it, and the cost model's prediction for
  // it with the run's measured lengths (nullopt without a profile).
  nlohmann::ordered_json report_policy(const EngineOptions& eo) const;
  std::optional<PredictedThroughput> predict(const Model& model, double prompt_len,
                                             int64_t gen_len) const;
  // Writes the trace when --trace was given.
  void finish() const;
};

}  // namespace strata::cli
