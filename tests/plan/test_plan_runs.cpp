// The plan must run: over the fixture models, budgets from plenty to below
// the weights, two workloads, and two devices (the CPU, and the
// separate-memory device standing in for a GPU), every plan `--policy auto`
// returns is accepted by the engine, runs a full block of the planned size,
// and the engine's measured peak on each tier stays within what plan_fit
// (the engine's own derivation) said it needs. And the search never returns
// a placement the engine refuses: each refusal of device_support is pinned.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "kernels/cpu/separate_memory_backend.h"
#include "model/model.h"
#include "offload/device.h"
#include "offload/device_support.h"
#include "offload/offload_engine.h"
#include "offload/plan_fit.h"
#include "plan/run_plan.h"
#include "policy/policy_fixtures.h"
#include "support/files.h"

namespace strata {
namespace {

uint64_t weight_bytes(const Model& m) {
  uint64_t n = 0;
  for (const TensorInfo& t : m.desc().tensors) n += t.nbytes;
  return n;
}

struct Device {
  const char* name;  // "cpu" or "cuda" (the separate-memory device)
  bool gpu;
};

ComputeDevice open_for_test(const Device& d, uint64_t gpu_mem) {
  if (!d.gpu) return open_device("cpu", 2);
  ComputeDevice c;
  c.backend = std::make_unique<SeparateMemoryBackend>(2, uint64_t{4} << 30);
  c.host_allocator = make_host_allocator();
  c.default_device_bytes = gpu_mem;
  return c;
}

// One of the plans that need least memory: one sequence, the weights on
// disk, the KV cache in RAM (`kv_cpu` 1) or on disk (0), with the request's
// budgets less 3% (the search may keep a margin that small).
EngineOptions smallest_plan(const Model& model, const PlanRequest& r, const RunShape& run,
                            const EngineOptions& base, const Device& d, double kv_cpu) {
  const auto spared = [](uint64_t bytes) { return bytes - bytes * 3 / 100; };
  EngineOptions eo = base;
  eo.gpu_mem = spared(r.gpu_mem);
  eo.cpu_mem = spared(r.cpu_mem);
  eo.disk_mem = r.disk_mem;
  eo.offload_dir = r.offload_dir;
  eo.gpu_batch_size = 1;
  eo.num_gpu_batches = 1;
  eo.placement.set(DataKind::kWeights, 0, 0);
  eo.placement.set(DataKind::kKv, 0, kv_cpu);
  eo.placement.set(DataKind::kAct, d.gpu ? 1 : 0, d.gpu ? 0 : 1);
  eo.plan_prompt_tokens = run.max_prompt;
  eo.plan_new_tokens = run.gen;
  eo.kv_budget_bytes = 0;
  const uint64_t kv = plan_fit(model, eo, device_caps(d.name), eo.gpu_mem).kv_need;
  eo.kv_budget_bytes = std::max(default_kv_budget_bytes(), kv);
  return eo;
}

// Whether the engine runs one of the smallest plans.
bool smallest_plan_fits(const Model& model, const PlanRequest& r, const RunShape& run,
                        const EngineOptions& base, const Device& d) {
  for (const double kv_cpu : {0.0, 1.0}) {
    const EngineOptions eo = smallest_plan(model, r, run, base, d, kv_cpu);
    if (plan_fit(model, eo, device_caps(d.name), eo.gpu_mem).fits()) return true;
  }
  return false;
}

// A CPU device's profile for the search.
constexpr const char* kCpuProfile = R"(
name: test-cpu
device: cpu
memory: {cpu: 1G, disk: 16G}
links: {disk_to_cpu: 1G, cpu_to_disk: 500M, cpu_to_disk_kv: 200M}
cpu_compute: {gemm_tflops: 0.05, attention_tflops: 0.01, mem_bandwidth: 10G}
)";

TEST(PlanRuns, EveryPlanOfTheSearchRunsWithinItsMemory) {
  const test::ScratchDir dir("strata-plan-runs");
  const std::string cpu_hw = dir.file("cpu.yaml"), gpu_hw = dir.file("gpu.yaml");
  test::write_text(cpu_hw, kCpuProfile);
  test::write_text(gpu_hw, test::tiny_gpu_yaml());
  int n_plans = 0, n_no_plan = 0;
  for (const char* name : {"opt", "llama", "qwen2", "llama-gguf/tiny-llama.gguf"}) {
    const auto model = Model::open(test::test_data(std::string("models/") + name));
    const uint64_t w = weight_bytes(*model);
    for (const Device d : {Device{"cpu", false}, Device{"cuda", true}}) {
      for (const double share : {4.0, 0.7, 0.4}) {
        for (const auto& [prompt, gen] : {std::pair<int64_t, int64_t>{8, 4}, {24, 8}}) {
          const uint64_t budget =
              static_cast<uint64_t>(share * static_cast<double>(w)) + (64 << 10);
          SCOPED_TRACE(::testing::Message() << name << " on " << d.name << ", budget " << budget
                                            << ", prompt " << prompt << " + gen " << gen);
          PlanRequest r;
          r.device = d.name;
          r.policy = "auto";
          r.hardware = d.gpu ? gpu_hw : cpu_hw;
          r.offload_dir = dir.file(std::string("off-") + (d.gpu ? "gpu" : "cpu"));
          if (d.gpu) {
            r.gpu_mem = budget;
            r.cpu_mem = uint64_t{256} << 20;
          } else {
            r.cpu_mem = budget;
          }
          r.disk_mem = uint64_t{1} << 30;
          RunShape run;
          run.max_prompt = prompt;
          run.mean_prompt = static_cast<double>(prompt);
          run.gen = gen;
          run.max_block = 12;
          EngineOptions eo;
          eo.compute_dtype = DType::kF32;
          eo.kv_dtype = DType::kF32;
          eo.threads = 2;
          RunPlan plan;
          try {
            plan = resolve_plan(r, *model, run, eo);
          } catch (const Error& e) {
            // The search may find nothing fits; it must say so, and only when
            // the engine runs none of the smallest plans either.
            ++n_no_plan;
            EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
            EXPECT_FALSE(smallest_plan_fits(*model, r, run, eo, d))
                << "the engine runs a plan the search did not find: " << e.what();
            continue;
          }
          ++n_plans;
          const PlanFit fit = plan_fit(*model, eo, device_caps(d.name), r.gpu_mem);
          ASSERT_TRUE(fit.fits()) << fit.refusal;
          std::unique_ptr<Engine> engine;
          ASSERT_NO_THROW(engine = make_engine(*model, eo, open_for_test(d, r.gpu_mem)))
              << eo.placement.describe();
          std::vector<SeqInput> block(static_cast<size_t>(engine->block_size()));
          for (size_t i = 0; i < block.size(); ++i) {
            block[i].prompt.assign(static_cast<size_t>(prompt), static_cast<int32_t>(5 + i % 7));
            block[i].max_new_tokens = static_cast<int32_t>(gen);
          }
          ASSERT_NO_THROW(engine->run_block(
              block, [](int, std::span<const int32_t>, const float*, std::span<SeqAction> out) {
                for (auto& a : out) a.next_token = 3;
              }));
          const EngineStats s = engine->stats();
          EXPECT_LE(s.peak_bytes.at("cpu"), fit.need.ram);
          if (d.gpu) {
            EXPECT_LE(s.peak_bytes.at("gpu"), fit.need.device);
          }
          if (s.peak_bytes.count("disk")) {
            EXPECT_LE(s.peak_bytes.at("disk"), fit.need.disk);
          }
        }
      }
    }
  }
  // Each model has a plan at least where the budget holds it whole.
  EXPECT_GE(n_plans, 16) << n_no_plan << " settings had no plan";
}

// Just above the RAM the smallest plan needs, the search finds a plan, also
// where the engine counts more than the cost model for the weights it
// streams (their staging); just below, it says what the engine needs.
TEST(PlanRuns, TheSearchFindsAPlanJustAboveTheSmallestPlansNeed) {
  const test::ScratchDir dir("strata-plan-edge");
  const std::string cpu_hw = dir.file("cpu.yaml");
  test::write_text(cpu_hw, kCpuProfile);
  const Device cpu{"cpu", false};
  for (const char* name : {"opt", "llama", "qwen2", "llama-gguf/tiny-llama.gguf"}) {
    const auto model = Model::open(test::test_data(std::string("models/") + name));
    RunShape run;
    run.max_prompt = 8;
    run.mean_prompt = 8;
    run.gen = 4;
    run.max_block = 12;
    EngineOptions base;
    base.compute_dtype = DType::kF32;
    base.kv_dtype = DType::kF32;
    base.threads = 2;
    PlanRequest r;
    r.policy = "auto";
    r.hardware = cpu_hw;
    r.offload_dir = dir.file("off");
    r.cpu_mem = uint64_t{1} << 30;
    r.disk_mem = uint64_t{1} << 30;
    // The least RAM the engine runs in, over the smallest plans.
    uint64_t least = std::numeric_limits<uint64_t>::max();
    for (const double kv_cpu : {0.0, 1.0}) {
      const EngineOptions eo = smallest_plan(*model, r, run, base, cpu, kv_cpu);
      least = std::min(least, plan_fit(*model, eo, device_caps("cpu"), 0).need.ram);
    }
    for (const double over : {1.04, 1.1, 1.25, 1.5}) {
      r.cpu_mem = static_cast<uint64_t>(over * static_cast<double>(least));
      SCOPED_TRACE(::testing::Message()
                   << name << ", --cpu-mem " << r.cpu_mem << " (" << over << " x " << least << ")");
      EngineOptions eo = base;
      EXPECT_NO_THROW(resolve_plan(r, *model, run, eo));
    }
    r.cpu_mem = least * 9 / 10;
    EngineOptions eo = base;
    try {
      resolve_plan(r, *model, run, eo);
      ADD_FAILURE() << name << ": a plan below the smallest plan's " << least << " bytes";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("does not fit"), std::string::npos) << what;
      EXPECT_NE(what.find("of CPU memory"), std::string::npos) << what;
      EXPECT_NE(what.find("--cpu-mem is " + format_bytes(static_cast<double>(r.cpu_mem))),
                std::string::npos)
          << what;
    }
  }
}

// The placements a device refuses are never searched: for each device and
// attention choice, the plan's shares are the pinned ones.
TEST(PlanRuns, TheSearchKeepsToWhatTheDeviceRuns) {
  const test::ScratchDir dir("strata-plan-pins");
  const std::string gpu_hw = dir.file("gpu.yaml");
  test::write_text(gpu_hw, test::tiny_gpu_yaml("{gpu: 1M, cpu: 4G, disk: 16G}"));
  const auto model = Model::open(test::test_data("models/llama"));
  for (const bool cpu_attention : {false, true}) {
    PlanRequest r;
    r.device = "cuda";
    r.policy = "auto";
    r.hardware = gpu_hw;
    r.cpu_attention = cpu_attention;
    r.gpu_mem = uint64_t{1} << 20;  // below the weights: they stream
    r.cpu_mem = uint64_t{256} << 20;
    r.disk_mem = uint64_t{1} << 30;
    r.offload_dir = dir.file("off");
    RunShape run;
    run.max_prompt = 16;
    run.mean_prompt = 16;
    run.gen = 4;
    run.max_block = 8;
    EngineOptions eo;
    resolve_plan(r, *model, run, eo);
    const DeviceCaps caps = device_caps("cuda");
    const PlacementPins pins = runnable_pins(caps, cpu_attention);
    for (size_t i = 0; i < kNumShares; ++i) {
      if (pins[i]) {
        EXPECT_EQ(eo.placement.share[i], *pins[i]) << share_name(static_cast<Share>(i));
      }
    }
    EXPECT_NO_THROW(check_placement(caps, eo.placement, eo.cpu_attention));
    EXPECT_GT(eo.placement.disk(DataKind::kWeights) + eo.placement[Share::kWCpu], 0.0)
        << "a 1M device budget cannot hold the weights";
  }
  // On the CPU device activations stay in RAM whatever the budget.
  const std::string cpu_hw = dir.file("cpu.yaml");
  test::write_text(cpu_hw, R"(
name: test-cpu
device: cpu
memory: {cpu: 1G, disk: 16G}
links: {disk_to_cpu: 1G, cpu_to_disk: 500M}
cpu_compute: {gemm_tflops: 0.05, attention_tflops: 0.01}
)");
  PlanRequest r;
  r.policy = "auto";
  r.hardware = cpu_hw;
  r.cpu_mem = uint64_t{1} << 20;
  r.disk_mem = uint64_t{1} << 30;
  r.offload_dir = dir.file("off-cpu");
  RunShape run;
  run.max_prompt = 64;
  run.mean_prompt = 64;
  run.gen = 8;
  run.max_block = 64;
  EngineOptions eo;
  try {
    resolve_plan(r, *model, run, eo);
    EXPECT_EQ(eo.placement.folded(true).disk(DataKind::kAct), 0.0);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
