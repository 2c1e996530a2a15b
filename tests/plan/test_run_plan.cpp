// Plan resolution (plan/run_plan.h) called as a library: the default
// placement, --percent and batch flags, a policy file with flags over its
// fields, the search with a given hardware profile and the shares a device
// pins, and what is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "model/model.h"
#include "offload/device_support.h"
#include "plan/run_plan.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Model> fixture() {
  return Model::open(std::string(STRATA_TEST_DATA) + "/models/llama");
}

RunShape shape(int64_t prompt, int64_t gen) {
  RunShape s;
  s.max_prompt = prompt;
  s.mean_prompt = static_cast<double>(prompt);
  s.gen = gen;
  s.max_block = 64;
  return s;
}

std::string offload_dir() {
  return (fs::temp_directory_path() / "strata-test-plan").string();
}

TEST(RunPlan, WithoutPlacementFlagsEverythingIsWhereTheDeviceComputes) {
  const auto model = fixture();
  PlanRequest r;
  r.offload_dir = offload_dir();
  EngineOptions eo;
  eo.gpu_batch_size = 4;
  const RunPlan plan = resolve_plan(r, *model, shape(10, 5), eo);
  EXPECT_EQ(plan.source, "flags");
  EXPECT_EQ(eo.placement, Placement{});
  EXPECT_EQ(eo.gpu_batch_size, 4);
  EXPECT_EQ(eo.plan_prompt_tokens, 10);
  EXPECT_EQ(eo.plan_new_tokens, 5);
  // On the CPU device the report shows the gpu share as RAM.
  const auto j = plan.report_policy(eo);
  EXPECT_EQ(j["weights"]["cpu"].get<double>(), 1.0);
  EXPECT_EQ(j["weights"]["gpu"].get<double>(), 0.0);
  EXPECT_FALSE(plan.predict(*model, 10, 5).has_value()) << "no profile, no prediction";
}

TEST(RunPlan, PercentAndBatchFlagsGoIntoTheOptions) {
  const auto model = fixture();
  PlanRequest r;
  r.offload_dir = offload_dir();
  const double pct[6] = {0, 40, 0, 100, 0, 100};
  r.placement = Placement::from_percent(pct);
  r.gpu_batch_size = 3;
  r.num_gpu_batches = 2;
  r.cpu_mem = uint64_t{1} << 30;
  r.kv_mem = uint64_t{64} << 20;
  EngineOptions eo;
  resolve_plan(r, *model, shape(8, 4), eo);
  EXPECT_DOUBLE_EQ(eo.placement.disk(DataKind::kWeights), 0.6);
  EXPECT_EQ(eo.gpu_batch_size, 3);
  EXPECT_EQ(eo.num_gpu_batches, 2);
  EXPECT_EQ(eo.cpu_mem, uint64_t{1} << 30);
  EXPECT_EQ(eo.kv_budget_bytes, uint64_t{64} << 20);
  EXPECT_EQ(eo.offload_dir, offload_dir());
}

TEST(RunPlan, FlagsOverrideThePolicyFile) {
  const auto model = fixture();
  PlanRequest r;
  r.offload_dir = offload_dir();
  r.policy = std::string(STRATA_POLICIES_DIR) + "/flexgen-opt-30b-t4.yaml";
  r.gpu_batch_size = 2;
  EngineOptions eo;
  const RunPlan plan = resolve_plan(r, *model, shape(8, 4), eo);
  EXPECT_EQ(plan.source, r.policy);
  EXPECT_EQ(eo.gpu_batch_size, 2);   // the flag
  EXPECT_EQ(eo.num_gpu_batches, 3);  // the file
  EXPECT_DOUBLE_EQ(eo.placement[Share::kWGpu], 0.2);
  EXPECT_TRUE(eo.cpu_attention);
}

// --policy auto with a GPU profile on a GPU device: the search keeps to
// what the engine runs there (activations on the device; KV on the device
// and disk, or in RAM with CPU attention).
TEST(RunPlan, AutoOnAGpuSearchesOnlyWhatTheDeviceRuns) {
  const auto model = fixture();
  for (const bool cpu_attention : {false, true}) {
    PlanRequest r;
    r.offload_dir = offload_dir();
    r.device = "cuda";
    r.policy = "auto";
    r.hardware = "t4-flexgen";
    r.cpu_attention = cpu_attention;
    r.disk_mem = uint64_t{1} << 30;
    EngineOptions eo;
    const RunPlan plan = resolve_plan(r, *model, shape(16, 8), eo);
    EXPECT_EQ(plan.source, "auto");
    ASSERT_TRUE(plan.hardware.has_value());
    const Placement& p = eo.placement;
    EXPECT_EQ(p[Share::kActGpu], 1.0);
    EXPECT_EQ(p[Share::kActCpu], 0.0);
    if (cpu_attention) {
      EXPECT_EQ(p[Share::kKvGpu], 0.0);
    } else {
      EXPECT_EQ(p[Share::kKvCpu], 0.0);
    }
    EXPECT_NO_THROW(check_placement(device_caps("cuda"), p, eo.cpu_attention));
    EXPECT_TRUE(plan.predict(*model, 16, 8).has_value());
  }
}

// --policy auto with speculation and an accepted share: the search picks
// the draft length too. With the weights read from disk every step, rows
// cost next to nothing: the longest drafts, even when almost none is kept.
// Everything on the GPU, the step is compute, which the cost model grows
// with the rows as the kept tokens grow at best: drafts gain nothing, so
// none (a tie keeps decoding without). Without a share the given length
// stays.
TEST(RunPlan, AutoPicksTheDraftLengthFromTheAcceptedShare) {
  const auto model = fixture();
  Placement weights_on_disk;
  weights_on_disk.set(DataKind::kWeights, 0, 0);
  weights_on_disk.set(DataKind::kKv, 1, 0);
  weights_on_disk.set(DataKind::kAct, 1, 0);
  struct Case {
    bool on_disk;
    double accepted;
    int64_t want;
  };
  for (const Case c : {Case{true, 0.0, -1}, Case{true, 1.0, 4}, Case{true, 0.01, 4},
                       Case{false, 1.0, 0}, Case{false, 0.01, 0}}) {
    PlanRequest r;
    r.offload_dir = offload_dir();
    r.device = "cuda";
    r.policy = "auto";
    r.hardware = "t4-flexgen";
    r.disk_mem = uint64_t{1} << 30;
    if (c.on_disk) r.placement = weights_on_disk;
    EngineOptions eo;
    eo.max_draft_tokens = 4;
    RunShape s = shape(16, 8);
    s.draft_accepted = c.accepted;
    const RunPlan plan = resolve_plan(r, *model, s, eo);
    EXPECT_EQ(plan.draft_tokens, c.want) << c.on_disk << " " << c.accepted;
    EXPECT_EQ(eo.max_draft_tokens, c.want < 0 ? 4 : c.want) << c.on_disk << " " << c.accepted;
  }
}

TEST(RunPlan, RefusesWhatTheEngineDoesNotRun) {
  const auto model = fixture();
  EngineOptions eo;
  PlanRequest gpu_auto;
  gpu_auto.offload_dir = offload_dir();
  gpu_auto.device = "cuda";
  gpu_auto.policy = "auto";  // a GPU needs a profile of its machine
  try {
    resolve_plan(gpu_auto, *model, shape(8, 4), eo);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs --hardware"), std::string::npos) << e.what();
  }
  PlanRequest bad_device;
  bad_device.device = "tpu";
  EXPECT_THROW(resolve_plan(bad_device, *model, shape(8, 4), eo), Error);
  PlanRequest no_dir;
  no_dir.offload_dir = "";
  EXPECT_THROW(resolve_plan(no_dir, *model, shape(8, 4), eo), Error);
}

}  // namespace
}  // namespace strata
