// Prefix sharing in the engine (EngineOptions::prefix_sharing) on the
// fixture models, f32 compute, pages of 4 tokens: prompts that begin with
// the same whole pages compute and store them once (a prefix step before
// the prefill), and every run gives the greedy tokens of the run without
// sharing, whatever the placement of the KV cache and its dtype (f32, f16;
// the fixtures' head_dim of 16 is below every q4/q8 KV group), with every
// f32 logits row within the bound of another summation order (the
// prefill's matrix products have fewer rows: as between micro-batch sizes);
// with KV on disk the shared pages are written once; and the plan's count
// of what a run shares is what the run measures.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "generate/driver.h"
#include "generate/report.h"
#include "kv/shared_prefix.h"
#include "offload/fixture_runs.h"
#include "offload/offload_engine.h"

namespace strata {
namespace {

using namespace fixture_runs;

class PrefixEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixEngine, SharingGivesTheTokensOfTheRunWithout) {
  const Fixture f = load(GetParam());
  TempDir dir("prefix");
  const std::vector<std::vector<int32_t>> prompts = sharing_prompts(f);
  ASSERT_EQ(prompts.size(), 9u);
  std::vector<std::span<const int32_t>> views(prompts.begin(), prompts.end());
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{3, 3}, {9, 1}}) {
    for (const DType kv : {DType::kF32, DType::kF16}) {
      for (const double kv_ram : {1.0, 0.5, 0.0}) {
        const std::string what = f.name + " " + std::to_string(g) + "x" + std::to_string(k) +
                                 " KV " + std::string(dtype_name(kv)) + " in RAM " +
                                 std::to_string(kv_ram);
        EngineOptions o = fixture_options(f, g, k, dir.path);  // sharing off
        o.kv_dtype = kv;
        o.placement.set(DataKind::kKv, 0, kv_ram);
        const GenRun ref = generate(*make_engine(*f.model, o), prompts);
        o.prefix_sharing = true;
        const GenRun got = generate(*make_engine(*f.model, o), prompts);
        if (kv == DType::kF32) {
          expect_same_tokens_close_logits(f.model->config(), ref, got, what);
        } else {
          // A K or V value within the f32 bound may round to the other
          // neighbouring f16: only the tokens are compared.
          ASSERT_EQ(got.tokens, ref.tokens) << what;
        }
        if (::testing::Test::HasFatalFailure()) return;
        EXPECT_EQ(ref.stats.reused_prompt_tokens, 0) << what;
        EXPECT_GT(got.stats.reused_prompt_tokens, 0) << what;
        EXPECT_GT(got.stats.kv_shared_bytes, 0u) << what;
        EXPECT_EQ(got.stats.prompt_tokens, ref.stats.prompt_tokens) << what;
        EXPECT_EQ(got.stats.generated_tokens, ref.stats.generated_tokens) << what;
        // One block (its 9 prompts), whose prefix step computed each group's
        // prefix once; the other members took theirs from it.
        int64_t prefixes = 0, shared = 0;
        for (const PrefixGroup& grp : find_prefix_groups(views, o.page_size)) {
          prefixes += grp.tokens;
          shared += grp.tokens * static_cast<int64_t>(grp.members.size());
        }
        ASSERT_GT(prefixes, 0) << what;
        EXPECT_EQ(ref.stats.blocks, 1) << what;
        EXPECT_EQ(ref.stats.prefix_steps, 0) << what;
        EXPECT_EQ(got.stats.blocks, 1) << what;
        EXPECT_EQ(got.stats.prefix_steps, 1) << what;
        EXPECT_EQ(got.stats.prefix_step_tokens, prefixes) << what;
        EXPECT_EQ(got.stats.reused_prompt_tokens + got.stats.prefix_step_tokens, shared) << what;
        if (kv_ram < 1.0) {
          // Shared pages are stored once.
          EXPECT_LT(link_bytes(got.stats, "cpu->disk"), link_bytes(ref.stats, "cpu->disk")) << what;
        }
      }
    }
  }
}

// What the plan takes a run to share (generate/driver.h: planned_sharing)
// is what the run measures (generate/report.h: measured_sharing), for
// blocks of several sizes, each block's prompts in the driver's order.
TEST_P(PrefixEngine, PlannedSharingIsWhatARunMeasures) {
  const Fixture f = load(GetParam());
  TempDir dir("prefix-plan");
  const std::vector<std::vector<int32_t>> prompts = sharing_prompts(f);
  std::vector<Job> jobs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    jobs[i].index = i;
    jobs[i].tokens = prompts[i];
  }
  const auto all = [](size_t) { return false; };
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {2, 2}, {3, 3}}) {
    const std::string what = f.name + " block " + std::to_string(g) + "x" + std::to_string(k);
    EngineOptions o = fixture_options(f, g, k, dir.path);
    o.prefix_sharing = true;
    const SharingRates planned = planned_sharing(jobs, all, o.page_size)(g * k);
    std::vector<std::vector<int32_t>> in_order;
    for (const auto& block : plan_blocks(jobs, g * k, all, o.page_size)) {
      for (const size_t i : block) in_order.push_back(prompts[i]);
    }
    const GenRun run = generate(*make_engine(*f.model, o), in_order);
    const SharingRates got = measured_sharing(run.stats, static_cast<int64_t>(prompts.size()));
    EXPECT_DOUBLE_EQ(planned.shared_tokens, got.shared_tokens) << what;
    EXPECT_DOUBLE_EQ(planned.prefix_step_tokens, got.prefix_step_tokens) << what;
    EXPECT_DOUBLE_EQ(planned.prefix_steps, got.prefix_steps) << what;
    if (g * k == 1) {
      EXPECT_EQ(planned.prefix_steps, 0) << what;  // nothing to share within a block of one
    } else {
      EXPECT_GT(planned.shared_tokens, 0) << what;
    }
  }
  // Without sharing the plan takes none.
  EXPECT_EQ(planned_sharing(jobs, all, 0)(9).shared_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixEngine, ::testing::Values("opt", "llama", "qwen2"),
                         fixture_param_name);

}  // namespace
}  // namespace strata
