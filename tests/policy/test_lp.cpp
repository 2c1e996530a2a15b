// The GLPK wrapper, the placement LP and the search: hand-checkable
// programs, exact placements when a tier is full, the infeasibility message
// and its "smallest budget", monotonicity in GPU memory, and agreement
// between the LP's objective and the evaluation of the policy it returns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"
#include "policy/lp_solver.h"
#include "policy/placement_lp.h"
#include "policy/policy_fixtures.h"
#include "policy/search.h"

namespace strata {
namespace {

// GLPK's simplex meets its rows to a relative tolerance of 1e-7 (tol_bnd),
// and memory rows are scaled to their budget: a fraction set by a full tier
// is exact to about 1e-7; 1e-6 leaves room for the scaling.
constexpr double kFracTol = 1e-6;

TEST(PolicyLinearProgram, SolvesASmallProgramByHand) {
  // min x + y  s.t.  x + 2y >= 4,  3x + y >= 6,  x, y >= 0
  // The optimum is the corner x = 8/5, y = 6/5, objective 14/5.
  LinearProgram lp;
  const int x = lp.add_var(0, INFINITY, "x");
  const int y = lp.add_var(0, INFINITY, "y");
  lp.add_ge({{x, 1}, {y, 2}}, 4);
  lp.add_ge({{x, 3}, {y, 1}}, 6);
  lp.minimize({{x, 1}, {y, 1}});
  ASSERT_EQ(lp.solve(), LinearProgram::Status::kOptimal);
  EXPECT_NEAR(lp.value(x), 1.6, 1e-12);
  EXPECT_NEAR(lp.value(y), 1.2, 1e-12);
  EXPECT_NEAR(lp.objective(), 2.8, 1e-12);
  // A second objective from the same basis: min x with the first kept.
  lp.add_le({{x, 1}, {y, 1}}, 2.8);
  lp.minimize({{x, 1}});
  ASSERT_EQ(lp.solve(), LinearProgram::Status::kOptimal);
  EXPECT_NEAR(lp.value(x), 1.6, 1e-12);
}

TEST(PolicyLinearProgram, ReportsInfeasibleAndFixedVariables) {
  LinearProgram lp;
  const int x = lp.add_var(0, 1);
  lp.add_ge({{x, 1}}, 2);
  lp.minimize({{x, 1}});
  EXPECT_EQ(lp.solve(), LinearProgram::Status::kInfeasible);

  LinearProgram fixed;
  const int a = fixed.add_var(0, 1);
  const int b = fixed.add_var(0, 1);
  fixed.fix_var(a, 0.25);
  fixed.add_le({{a, 1}, {b, 1}}, 1);
  fixed.minimize({{b, -1}});
  ASSERT_EQ(fixed.solve(), LinearProgram::Status::kOptimal);
  EXPECT_EQ(fixed.value(a), 0.25);
  EXPECT_NEAR(fixed.value(b), 0.75, 1e-12);
}

TEST(PolicyPlacementLp, EverythingOnTheGpuWhenItFits) {
  const ModelShape shape = test::tiny_shape();
  const HardwareProfile hw = test::tiny_gpu();  // 1G of GPU for a 340K model
  const SearchResult r = search_policy(shape, hw, {8, 4}, budgets_of(hw), {});
  EXPECT_EQ(r.policy.placement[Share::kWGpu], 1.0);
  EXPECT_EQ(r.policy.placement[Share::kKvGpu], 1.0);
  EXPECT_EQ(r.policy.placement[Share::kActGpu], 1.0);
  EXPECT_EQ(r.policy.placement[Share::kWCpu] + r.policy.placement[Share::kKvCpu] +
                r.policy.placement[Share::kActCpu],
            0.0);
  EXPECT_TRUE(r.prediction.fits);
  EXPECT_EQ(r.prediction.prefill_terms[0].first, "cpu->gpu");
  EXPECT_EQ(r.prediction.prefill_terms[0].second, 0.0);

  // A real model that fits a T4 at a small batch: OPT-1.3B.
  SearchOptions o;
  o.gpu_batch_size = 4;
  o.num_gpu_batches = 1;
  const HardwareProfile t4 = find_hardware_profile("t4-flexgen");
  const SearchResult r13 =
      search_policy(find_model_preset("opt-1.3b"), t4, {512, 32}, budgets_of(t4), o);
  EXPECT_EQ(r13.policy.placement[Share::kWGpu], 1.0);
  EXPECT_EQ(r13.policy.placement[Share::kKvGpu], 1.0);
  EXPECT_EQ(r13.policy.placement[Share::kActGpu], 1.0);
}

// Weights larger than GPU + CPU: with KV and activations pinned to the GPU,
// the LP fills the GPU, then the CPU, and leaves exactly the rest on disk.
TEST(PolicyPlacementLp, WeightsLargerThanGpuAndCpuSpillExactlyToDisk) {
  ModelShape shape = test::tiny_shape();
  shape.n_layer = 32;  // 2.4 MB of weights; budgets of under a MB
  const HardwareProfile hw = test::tiny_gpu();
  Policy batch;
  batch.gpu_batch_size = 2;
  batch.num_gpu_batches = 2;
  const CostModel m = build_cost_model(shape, hw, {8, 4}, batch);
  // Budgets that the target placement fills exactly in its tighter phase.
  Placement target{{0.4, 0.35, 1, 0, 1, 0}};
  Budgets b;
  for (int ph = 0; ph < kNumPhases; ++ph) {
    b.gpu = std::max(b.gpu, m.bytes(0, ph, target));  // staging granules included
    b.cpu = std::max(b.cpu, m.bytes(1, ph, target));
  }
  b.disk = 1e12;
  PlacementPins fixed;
  fixed[static_cast<int>(Share::kKvGpu)] = 1.0;
  fixed[static_cast<int>(Share::kKvCpu)] = 0.0;
  fixed[static_cast<int>(Share::kActGpu)] = 1.0;
  fixed[static_cast<int>(Share::kActCpu)] = 0.0;
  const PlacementResult r = solve_placement(m, b, fixed);
  ASSERT_TRUE(r.feasible);
  EXPECT_NEAR(r.x.share[0], 0.4, kFracTol);
  EXPECT_NEAR(r.x.share[1], 0.35, kFracTol);
  EXPECT_NEAR(1 - r.x.share[0] - r.x.share[1], 0.25, kFracTol);
  // Sanity of the hand numbers: the weights are larger than both budgets.
  EXPECT_GT(static_cast<double>(shape.n_params()) * 2, b.gpu + b.cpu);

  // Less CPU by what 10% of the weights take there (their bytes less the
  // relay buffer they would need on disk): the disk takes those 10%.
  EXPECT_EQ(m.memory[1][0].total().coef[1], m.memory[1][1].total().coef[1]);
  Budgets less = b;
  less.cpu -= 0.1 * m.memory[1][1].total().coef[1];
  const PlacementResult r2 = solve_placement(m, less, fixed);
  ASSERT_TRUE(r2.feasible);
  EXPECT_NEAR(r2.x.share[0], 0.4, kFracTol);
  EXPECT_NEAR(r2.x.share[1], 0.25, kFracTol);
}

TEST(PolicyPlacementLp, ObjectiveMatchesTheEvaluationOfItsPolicy) {
  const HardwareProfile hw = find_hardware_profile("t4");
  for (const char* model : {"opt-30b", "llama-3-8b", "opt-175b"}) {
    SearchOptions o;
    o.max_block_size = 512;
    const SearchResult r =
        search_policy(find_model_preset(model), hw, {512, 32}, budgets_of(hw), o);
    const Prediction& p = r.prediction;
    const double per_token = p.total_s / (static_cast<double>(p.block_size) * 32);
    // The LP's times are its rows met to 1e-7 relative; the tie-break keeps
    // the optimum to 1e-9.
    EXPECT_NEAR(per_token, r.lp_seconds_per_token, 1e-6 * r.lp_seconds_per_token) << model;
    EXPECT_TRUE(p.fits) << model << ": " << over_budget_message(p);
    // Evaluating the returned policy afresh gives the same prediction.
    const Prediction again =
        predict(find_model_preset(model), hw, {512, 32}, r.policy, budgets_of(hw));
    EXPECT_EQ(again.total_tokens_per_s, p.total_tokens_per_s) << model;
  }
}

TEST(PolicySearch, MoreGpuMemoryNeverPredictsLess) {
  const HardwareProfile hw = find_hardware_profile("t4");
  for (const char* model : {"opt-30b", "llama-3-8b"}) {
    double prev = 0;
    for (int gib = 6; gib <= 24; gib += 3) {
      Budgets b = budgets_of(hw);
      b.gpu = gib * 1073741824.0;
      SearchOptions o;
      o.max_block_size = 512;
      const SearchResult r = search_policy(find_model_preset(model), hw, {512, 32}, b, o);
      // Each LP's optimum can only improve with a larger budget; the
      // simplex meets it to 1e-7 relative, so allow 1e-6.
      EXPECT_GE(r.prediction.total_tokens_per_s, prev * (1 - 1e-6))
          << model << " at " << gib << "G";
      prev = r.prediction.total_tokens_per_s;
    }
  }
}

// OPT-30B with 32G of CPU memory and no disk: weights do not fit anywhere.
// The message names the smallest extra budget, and that budget is exact:
// slightly more fits, slightly less does not.
TEST(PolicySearch, InfeasibleBudgetNamesTheSmallestBudgetThatWorks) {
  const HardwareProfile hw = find_hardware_profile("t4");
  const ModelShape shape = find_model_preset("opt-30b");
  Budgets b = budgets_of(hw);
  b.cpu = 32.0 * 1073741824;
  b.disk = 0;
  std::string msg;
  try {
    search_policy(shape, hw, {512, 32}, b, {});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find("opt-30b does not fit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("weights that do not fit elsewhere"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--disk-mem is 0B"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--cpu-mem is 32.0G"), std::string::npos) << msg;

  // The smallest disk budget: the need of the smallest batch, the better of
  // the two attention choices.
  double need = INFINITY;
  for (bool att : {false, true}) {
    Policy p;
    p.cpu_attention = att;
    const auto needs = min_tier_needs(build_cost_model(shape, hw, {512, 32}, p), b);
    ASSERT_TRUE(needs[2].possible);
    need = std::min(need, needs[2].bytes);
  }
  EXPECT_NE(msg.find("at least " + format_bytes(need) + " of disk"), std::string::npos) << msg;
  Budgets enough = b;
  enough.disk = need * (1 + 1e-6);
  EXPECT_NO_THROW(search_policy(shape, hw, {512, 32}, enough, {}));
  Budgets short_of = b;
  short_of.disk = need * (1 - 1e-3);
  EXPECT_THROW(search_policy(shape, hw, {512, 32}, short_of, {}), Error);
}

TEST(PolicySearch, TooLittleCpuForDiskRelaysNamesCpuMemory) {
  const HardwareProfile hw = find_hardware_profile("t4");
  Budgets b = budgets_of(hw);
  b.cpu = 4.0 * 1073741824;  // OPT-175B streams from disk through CPU buffers
  try {
    search_policy(find_model_preset("opt-175b"), hw, {512, 32}, b, {});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("of CPU memory for buffers that do not fit elsewhere, --cpu-mem is 4.00G"),
              std::string::npos)
        << msg;
  }
}

TEST(PolicySearch, PinnedChoicesAreKept) {
  const HardwareProfile hw = find_hardware_profile("t4");
  SearchOptions o;
  o.gpu_batch_size = 32;
  o.cpu_attention = true;
  o.fixed[static_cast<int>(Share::kWGpu)] = 0.1;
  o.compress_weight = parse_compression("q4", "test");
  o.max_block_size = 256;
  const SearchResult r =
      search_policy(find_model_preset("opt-30b"), hw, {512, 32}, budgets_of(hw), o);
  EXPECT_EQ(r.policy.gpu_batch_size, 32);
  EXPECT_TRUE(r.policy.cpu_attention);
  EXPECT_EQ(r.policy.placement[Share::kWGpu], 0.1);
  EXPECT_EQ(r.policy.compress_weight.bits, 4);
  EXPECT_LE(r.policy.block_size(), 256);
}

// --plan-rank: the k-th plan is another batch shape, predicted no faster
// than the (k-1)-th; rank 1 is the search's choice; past the plans that
// fit is an Error naming how many did.
TEST(PolicySearch, RanksThePlansByPredictedThroughput) {
  const HardwareProfile hw = find_hardware_profile("t4");
  const ModelShape shape = find_model_preset("opt-30b");
  SearchOptions o;
  o.max_block_size = 256;
  const SearchResult first = search_policy(shape, hw, {512, 32}, budgets_of(hw), o);
  ASSERT_GE(first.n_plans, 5);
  double prev = first.prediction.total_tokens_per_s;
  std::set<std::tuple<int64_t, int64_t, bool>> shapes{
      {first.policy.gpu_batch_size, first.policy.num_gpu_batches, first.policy.cpu_attention}};
  for (int64_t k = 2; k <= 5; ++k) {
    o.rank = k;
    const SearchResult r = search_policy(shape, hw, {512, 32}, budgets_of(hw), o);
    EXPECT_EQ(r.n_plans, first.n_plans);
    EXPECT_LE(r.prediction.total_tokens_per_s, prev * (1 + 1e-6)) << "rank " << k;
    EXPECT_TRUE(r.prediction.fits);
    prev = r.prediction.total_tokens_per_s;
    EXPECT_TRUE(
        shapes.insert({r.policy.gpu_batch_size, r.policy.num_gpu_batches, r.policy.cpu_attention})
            .second)
        << "rank " << k << " repeats a batch shape";
  }
  o.rank = first.n_plans + 1;
  try {
    search_policy(shape, hw, {512, 32}, budgets_of(hw), o);
    FAIL() << "a rank past the plans was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("found {} plans", first.n_plans)),
              std::string::npos)
        << e.what();
  }
  o.rank = 0;
  EXPECT_THROW(search_policy(shape, hw, {512, 32}, budgets_of(hw), o), Error);
}

// The workload of a candidate's block size (what its sequences share of
// their prompts) prices it: the plan returned is predicted with its own
// block size's workload, and sharing a prefix predicts more than not.
TEST(PolicySearch, EachBlockSizeIsPricedWithItsOwnWorkload) {
  const HardwareProfile hw = find_hardware_profile("t4");
  const ModelShape shape = find_model_preset("opt-1.3b");
  const Workload work{512, 32};
  SearchOptions o;
  o.max_block_size = 256;
  std::set<int64_t> asked;
  o.adapt_workload = [&](Workload& w, int64_t block_size) {
    asked.insert(block_size);
    if (block_size < 2) return;
    w.shared_tokens = 384;
    w.prefix_step_tokens = 384;
    w.prefix_steps = 1;
  };
  const SearchResult shared = search_policy(shape, hw, work, budgets_of(hw), o);
  EXPECT_GT(asked.size(), 5u);
  Workload own = work;
  o.adapt_workload(own, shared.policy.block_size());
  const Prediction again = predict(shape, hw, own, shared.policy, budgets_of(hw));
  EXPECT_NEAR(again.total_tokens_per_s, shared.prediction.total_tokens_per_s,
              1e-9 * again.total_tokens_per_s);
  const SearchResult plain = search_policy(shape, hw, work, budgets_of(hw), {});
  EXPECT_GT(shared.prediction.prefill_tokens_per_s, plain.prediction.prefill_tokens_per_s);
  EXPECT_GT(shared.prediction.total_tokens_per_s, plain.prediction.total_tokens_per_s);
}

TEST(PolicySearch, CpuDeviceStreamsFromDiskIntoRam) {
  ModelShape shape = test::tiny_shape();
  shape.n_layer = 16;  // 1.2 MB of weights
  HardwareProfile hw = test::tiny_cpu();
  Budgets b = budgets_of(hw);
  const SearchResult fits = search_policy(shape, hw, {8, 4}, b, {});
  EXPECT_EQ(fits.policy.placement[Share::kWGpu], 0.0);
  EXPECT_EQ(fits.policy.placement[Share::kWCpu], 1.0);
  EXPECT_FALSE(fits.policy.cpu_attention);
  EXPECT_FALSE(fits.prediction.memory[0].used);
  // Less RAM than the weights: part streams from disk, RAM is full.
  b.cpu = 600000;  // bytes
  SearchOptions o;
  o.gpu_batch_size = 1;
  o.num_gpu_batches = 1;
  const SearchResult spill = search_policy(shape, hw, {8, 4}, b, o);
  EXPECT_GT(spill.policy.placement.disk(DataKind::kWeights), 0.0);
  EXPECT_NEAR(spill.prediction.memory[1].peak, b.cpu, 1e-6 * b.cpu);
}

// A KV read from disk is a sequence's disk pages of a layer: its size, and
// the disk's rate for it, follow the KV disk share. The search solves again
// at the share the LP found, so the plan it returns is priced at its own
// share (the LP's objective is its evaluation), not at all pages on disk.
TEST(PolicySearch, KvReadsArePricedAtTheShareOnDisk) {
  const ModelShape shape = test::tiny_shape();
  HardwareProfile hw = test::tiny_cpu();
  hw.disk_to_cpu_kv = {{4096, 10}, {65536, 40}};  // smaller requests are slower
  const Workload work{200, 56};
  SearchOptions o;
  o.gpu_batch_size = 2;
  o.num_gpu_batches = 8;  // staging for one micro-batch's KV is small beside the cache
  o.fixed[static_cast<int>(Share::kWGpu)] = 0.0;  // the weights in RAM: the KV gives way
  o.fixed[static_cast<int>(Share::kWCpu)] = 1.0;
  Budgets b = budgets_of(hw);
  const SearchResult all = search_policy(shape, hw, work, b, o);
  ASSERT_EQ(all.policy.placement.disk(DataKind::kKv), 0.0);
  // RAM for everything but most of the KV cache (a disk share of it needs
  // staging in RAM): part of it goes to disk.
  b.cpu = all.prediction.memory[1].peak - 0.8 * all.prediction.memory[1].kv_cache;
  const SearchResult r = search_policy(shape, hw, work, b, o);
  const double f = r.policy.placement.disk(DataKind::kKv);
  EXPECT_GT(f, 0.05);
  EXPECT_LT(f, 0.95);
  const Prediction& p = r.prediction;
  const double per_token = p.total_s / (static_cast<double>(p.block_size) * 56);
  EXPECT_NEAR(per_token, r.lp_seconds_per_token, 1e-6 * r.lp_seconds_per_token);
  // Priced at all pages (larger requests, a faster rate) the same plan
  // would read its KV in less time.
  Policy at_all_pages = r.policy;
  at_all_pages.placement = Placement{};
  const CostModel m = build_cost_model(shape, hw, work, at_all_pages);
  const auto read_s = [](const auto& terms, const auto& seconds_of) {
    for (const auto& t : terms) {
      if (seconds_of(t).first == "disk->cpu") return seconds_of(t).second;
    }
    ADD_FAILURE() << "no disk->cpu term";
    return 0.0;
  };
  const double read = read_s(p.decode_terms, [](const auto& t) { return t; });
  const double at_all = read_s(m.decode_layer.terms, [&](const CostTerm& t) {
    return std::make_pair(t.name, t.seconds(r.policy.placement));
  });
  EXPECT_GT(read, 0);
  EXPECT_LT(at_all, read * (1 - 1e-3));
}

TEST(PolicySearch, CandidateGridsAreFixed) {
  EXPECT_EQ(gpu_batch_candidates(64),
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}));
  const std::vector<int64_t> g = nb_grid(40);
  EXPECT_EQ(g.front(), 1);
  EXPECT_EQ(g[15], 16);
  for (size_t i = 1; i < g.size(); ++i) EXPECT_GT(g[i], g[i - 1]);
  EXPECT_LE(g.back(), 40);
}

}  // namespace
}  // namespace strata
