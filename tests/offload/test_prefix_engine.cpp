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

#include <algorithm>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "generate/driver.h"
#include "generate/report.h"
#include "kv/shared_prefix.h"
#include "offload/block_budget.h"
#include "offload/fixture_runs.h"
#include "offload/offload_engine.h"
#include "offload/plan_fit.h"

namespace strata {
namespace {

using namespace fixture_runs;

class PrefixEngine : public ::testing::TestWithParam<std::string> {};

std::vector<Job> jobs_of(const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<Job> jobs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    jobs[i].index = i;
    jobs[i].tokens = prompts[i];
  }
  return jobs;
}

// `rows` (one per job) in the driver's block order for blocks of `block_size`.
template <class Row>
std::vector<Row> in_block_order(const std::vector<Job>& jobs, const std::vector<Row>& rows,
                                int64_t block_size, int64_t page_size) {
  std::vector<Row> out;
  for (const auto& block : plan_blocks(
           jobs, block_size, [](size_t) { return false; }, page_size)) {
    for (const size_t i : block) out.push_back(rows[i]);
  }
  return out;
}

// a then b.
std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The runs of `prompts` without prefix sharing and with it, `o` otherwise.
std::pair<GenRun, GenRun> without_and_with_sharing(
    const Fixture& f, EngineOptions o, const std::vector<std::vector<int32_t>>& prompts) {
  o.prefix_sharing = false;
  GenRun ref = generate(*make_engine(*f.model, o), prompts);
  o.prefix_sharing = true;
  GenRun got = generate(*make_engine(*f.model, o), prompts);
  return {std::move(ref), std::move(got)};
}

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
        const auto [ref, got] = without_and_with_sharing(f, o, prompts);
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

// A prefix kept across blocks: over blocks of two in the driver's order the
// preamble's group spans several blocks; the blocks after the first take
// its pages instead of computing them (the prefix steps the plan counts
// with the prefix kept, fewer than without), with its pages in RAM, on disk
// (the KV file's records stay where the first block stored them, and the
// next block's prefill loads them) and split, and the tokens and logits are
// those of the run without sharing.
TEST_P(PrefixEngine, AKeptPrefixGivesTheRunWithoutSharing) {
  const Fixture f = load(GetParam());
  TempDir dir("prefix-kept");
  const std::vector<std::vector<int32_t>> prompts = sharing_prompts(f);
  const std::vector<Job> jobs = jobs_of(prompts);
  const std::vector<std::vector<int32_t>> in_order = in_block_order(jobs, prompts, 2, 4);
  const auto all = [](size_t) { return false; };
  const double kept_steps = planned_sharing(jobs, all, 4, true)(2).prefix_steps;
  ASSERT_LT(kept_steps, planned_sharing(jobs, all, 4, false)(2).prefix_steps);
  for (const double kv_ram : {1.0, 0.0, 0.5}) {
    const std::string what = f.name + " KV in RAM " + std::to_string(kv_ram);
    EngineOptions o = fixture_options(f, 2, 1, dir.path);  // sharing off
    ASSERT_EQ(o.page_size, 4);
    o.placement.set(DataKind::kKv, 0, kv_ram);
    const auto [ref, got] = without_and_with_sharing(f, o, in_order);
    expect_same_tokens_close_logits(f.model->config(), ref, got, what);
    EXPECT_DOUBLE_EQ(measured_sharing(got.stats, static_cast<int64_t>(prompts.size())).prefix_steps,
                     kept_steps)
        << what;
    EXPECT_GT(got.stats.reused_prompt_tokens, 0) << what;
  }
}

// A prefix nested in the kept one: two documents after one system prompt,
// two questions each, blocks of two in the driver's order (a document's
// group a block). The second block's group begins with the first block's
// kept prefix for the system prompt's whole pages only: its leader takes
// those and computes the rest of its prefix (the kept pages after them go
// before the block), so the prefix steps compute the system prompt once;
// the plan counts the same, and the tokens and logits are those of the
// run without sharing, with the KV in RAM, on disk and split.
TEST_P(PrefixEngine, APrefixNestedInTheKeptOneComputesOnlyItsRest) {
  const Fixture f = load(GetParam());
  TempDir dir("prefix-nested");
  const std::vector<int32_t>& sys = f.prompts[2];
  const std::vector<int32_t> doc_a = cat(sys, cat(f.prompts[4], f.prompts[4]));
  const std::vector<int32_t> doc_b = cat(sys, cat(f.prompts[7], f.prompts[4]));
  const std::vector<std::vector<int32_t>> prompts = {
      cat(doc_a, f.prompts[0]), cat(doc_b, f.prompts[5]), cat(doc_a, f.prompts[5]),
      cat(doc_b, f.prompts[0])};
  const std::vector<Job> jobs = jobs_of(prompts);
  const int64_t ps = 4;
  const std::vector<std::vector<int32_t>> in_order = in_block_order(jobs, prompts, 2, ps);
  // Each block one group; the second's prefix shares only the system
  // prompt's whole pages (and the documents' first token) with the first's.
  std::vector<int64_t> prefix;
  for (size_t b = 0; b < 4; b += 2) {
    const std::vector<std::span<const int32_t>> block{in_order[b], in_order[b + 1]};
    const std::vector<PrefixGroup> groups = find_prefix_groups(block, ps);
    ASSERT_EQ(groups.size(), 1u);
    prefix.push_back(groups[0].tokens);
  }
  const auto [a, b] =
      std::mismatch(in_order[0].begin(), in_order[0].end(), in_order[2].begin(), in_order[2].end());
  const int64_t nested = (a - in_order[0].begin()) / ps;
  ASSERT_GE(nested, 1);
  ASSERT_LT(nested * ps, prefix[1]);
  const int64_t step_tokens = prefix[0] + prefix[1] - nested * ps;
  const auto all = [](size_t) { return false; };
  const SharingRates planned = planned_sharing(jobs, all, ps)(2);
  EXPECT_DOUBLE_EQ(planned.prefix_steps, 1.0);
  EXPECT_DOUBLE_EQ(planned.prefix_step_tokens, static_cast<double>(step_tokens) / 2);
  for (const double kv_ram : {1.0, 0.0, 0.5}) {
    const std::string what = f.name + " KV in RAM " + std::to_string(kv_ram);
    EngineOptions o = fixture_options(f, 2, 1, dir.path);  // sharing off
    ASSERT_EQ(o.page_size, ps);
    o.placement.set(DataKind::kKv, 0, kv_ram);
    const auto [ref, got] = without_and_with_sharing(f, o, in_order);
    expect_same_tokens_close_logits(f.model->config(), ref, got, what);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(got.stats.prefix_steps, 2) << what;
    EXPECT_EQ(got.stats.prefix_step_tokens, step_tokens) << what;
    EXPECT_EQ(got.stats.reused_prompt_tokens + got.stats.prefix_step_tokens,
              2 * (prefix[0] + prefix[1]))
        << what;
    const SharingRates measured = measured_sharing(got.stats, 4);
    EXPECT_DOUBLE_EQ(measured.prefix_step_tokens, planned.prefix_step_tokens) << what;
    EXPECT_DOUBLE_EQ(measured.shared_tokens, planned.shared_tokens) << what;
  }
}

// Several groups of a block take from the kept prefix: blocks of four, the
// first a document's two questions (its group kept; the longest prompts,
// so that the KV file the first block lays out holds the second's) and two
// prompts in no group, the second two other documents' two questions each,
// both groups beginning with the system prompt's whole pages of the kept
// prefix: each leader takes those and computes the rest of its prefix, and
// the tokens and logits are those of the run without sharing.
TEST_P(PrefixEngine, SeveralGroupsTakeTheirPagesOfTheKeptPrefix) {
  const Fixture f = load(GetParam());
  TempDir dir("prefix-nested-groups");
  const std::vector<int32_t>& sys = f.prompts[2];
  const std::vector<int32_t> doc_a = cat(sys, cat(f.prompts[4], cat(f.prompts[7], f.prompts[5])));
  const std::vector<int32_t> doc_b = cat(sys, cat(f.prompts[7], f.prompts[4]));
  const std::vector<int32_t> doc_c = cat(sys, cat(f.prompts[5], f.prompts[4]));
  const std::vector<std::vector<int32_t>> prompts = {cat(doc_a, f.prompts[0]),
                                                     cat(doc_a, f.prompts[5]),
                                                     f.prompts[3],
                                                     f.prompts[6],
                                                     cat(doc_b, f.prompts[0]),
                                                     cat(doc_b, f.prompts[5]),
                                                     cat(doc_c, f.prompts[0]),
                                                     cat(doc_c, f.prompts[5])};
  const int64_t ps = 4;
  std::vector<std::span<const int32_t>> first(prompts.begin(), prompts.begin() + 4);
  std::vector<std::span<const int32_t>> second(prompts.begin() + 4, prompts.end());
  const std::vector<PrefixGroup> g1 = find_prefix_groups(first, ps);
  const std::vector<PrefixGroup> g2 = find_prefix_groups(second, ps);
  ASSERT_EQ(g1.size(), 1u);
  ASSERT_EQ(g2.size(), 2u);
  const std::span<const int32_t> kept = first[0].first(static_cast<size_t>(g1[0].tokens));
  const KeptTake take = take_from_kept(g2, second, kept, ps);
  ASSERT_EQ(take.pages.size(), 2u);
  ASSERT_GE(take.pages[0], 1);
  ASSERT_GE(take.pages[1], 1);
  int64_t step_tokens = g1[0].tokens;
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_LT(take.pages[i] * ps, g2[i].tokens);
    step_tokens += g2[i].tokens - take.pages[i] * ps;
  }
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{4, 1}, {2, 2}}) {
    for (const double kv_ram : {1.0, 0.0, 0.5}) {
      const std::string what = f.name + " block " + std::to_string(g) + "x" + std::to_string(k) +
                               " KV in RAM " + std::to_string(kv_ram);
      EngineOptions o = fixture_options(f, g, k, dir.path);  // sharing off
      ASSERT_EQ(o.page_size, ps);
      o.placement.set(DataKind::kKv, 0, kv_ram);
      const auto [ref, got] = without_and_with_sharing(f, o, prompts);
      expect_same_tokens_close_logits(f.model->config(), ref, got, what);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_EQ(got.stats.prefix_steps, 2) << what;
      EXPECT_EQ(got.stats.prefix_step_tokens, step_tokens) << what;
    }
  }
}

// A kept prefix whose pages are on disk stays only while the KV file keeps
// its layout: blocks of two, the second's prompts (the same preamble, then
// longer own parts) need more disk slots than the first's file has, so the
// second block lets the kept prefix go and computes it again (two prefix
// steps; one with the KV in RAM), and the tokens are those of the run
// without sharing.
TEST_P(PrefixEngine, AKeptPrefixGoesBeforeABlockThatNeedsALargerKvFile) {
  const Fixture f = load(GetParam());
  TempDir dir("prefix-kept-grow");
  const std::vector<int32_t> preamble = cat(f.prompts[0], f.prompts[2]);
  const std::vector<int32_t> longer = cat(cat(f.prompts[3], f.prompts[5]), f.prompts[7]);
  const std::vector<std::vector<int32_t>> prompts = {
      cat(preamble, {f.prompts[1].front()}), cat(preamble, {f.prompts[6].front()}),
      cat(preamble, longer), cat(cat(preamble, f.prompts[6]), longer)};
  for (const double kv_ram : {1.0, 0.0}) {
    const std::string what = f.name + " KV in RAM " + std::to_string(kv_ram);
    EngineOptions o = fixture_options(f, 2, 1, dir.path);
    o.placement.set(DataKind::kKv, 0, kv_ram);
    const auto [ref, got] = without_and_with_sharing(f, o, prompts);
    expect_same_tokens_close_logits(f.model->config(), ref, got, what);
    EXPECT_EQ(got.stats.prefix_steps, kv_ram == 1.0 ? 1 : 2) << what;
  }
}

// A block after one that kept a prefix is checked like any: an empty
// prompt is the one-line error, before anything is grouped or run.
TEST_P(PrefixEngine, AnEmptyPromptAfterAKeptPrefixIsAnError) {
  const Fixture f = load(GetParam());
  TempDir dir("prefix-empty");
  EngineOptions o = fixture_options(f, 2, 1, dir.path);
  o.prefix_sharing = true;
  const auto engine = make_engine(*f.model, o);
  const std::vector<std::vector<int32_t>> prompts = sharing_prompts(f);
  generate(*engine, {prompts[0], prompts[1]});  // both begin with the preamble
  ASSERT_EQ(engine->stats().prefix_steps, 1);
  std::vector<SeqInput> in(2, SeqInput{prompts[3], 2});
  in[1].prompt.clear();
  try {
    engine->run_block(in, nullptr);
    FAIL() << "an empty prompt was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 1 is empty"), std::string::npos) << e.what();
  }
}

// What the plan takes a run to share (generate/driver.h: planned_sharing)
// is what the run measures (generate/report.h: measured_sharing), for
// blocks of several sizes, each block's prompts in the driver's order, a
// prefix kept across blocks (the preamble's group spans blocks), with KV in
// RAM and half on disk.
TEST_P(PrefixEngine, PlannedSharingIsWhatARunMeasures) {
  const Fixture f = load(GetParam());
  TempDir dir("prefix-plan");
  const std::vector<std::vector<int32_t>> prompts = sharing_prompts(f);
  const std::vector<Job> jobs = jobs_of(prompts);
  const auto all = [](size_t) { return false; };
  for (const auto& [g, k, kv_ram] : {std::tuple<int64_t, int64_t, double>{1, 1, 1.0},
                                     {2, 1, 1.0},
                                     {2, 2, 1.0},
                                     {3, 3, 1.0},
                                     {2, 1, 0.5},
                                     {2, 2, 0.5}}) {
    const std::string what = f.name + " block " + std::to_string(g) + "x" + std::to_string(k) +
                             " KV in RAM " + std::to_string(kv_ram);
    EngineOptions o = fixture_options(f, g, k, dir.path);
    o.prefix_sharing = true;
    o.placement.set(DataKind::kKv, 0, kv_ram);
    const SharingRates planned = planned_sharing(jobs, all, o.page_size, true)(g * k);
    const std::vector<std::vector<int32_t>> in_order =
        in_block_order(jobs, prompts, g * k, o.page_size);
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

// The KV a plan takes every block to store once (SharingRates::kv) lets a
// RAM budget too small for the full block without it hold the block, and
// every block of the run then passes the engine's check (which counts each
// block's own shared pages once) and gives the tokens of the run without
// sharing; the full block's KV pages are fewer by exactly the pages stored
// once.
TEST_P(PrefixEngine, PlannedKvSharingFitsABudgetTheBlockWithoutItDoesNot) {
  const Fixture f = load(GetParam());
  TempDir dir("prefix-budget");
  const std::vector<std::vector<int32_t>> prompts = sharing_prompts(f);
  const std::vector<Job> jobs = jobs_of(prompts);
  size_t longest = 0;
  for (const std::vector<int32_t>& p : prompts) longest = std::max(longest, p.size());
  const auto all = [](size_t) { return false; };
  const DeviceCaps cpu = device_caps("cpu");
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{2, 2}, {3, 3}}) {
    for (const double kv_ram : {1.0, 0.5}) {
      const std::string what = f.name + " block " + std::to_string(g) + "x" + std::to_string(k) +
                               " KV in RAM " + std::to_string(kv_ram);
      EngineOptions o = fixture_options(f, g, k, dir.path);
      o.placement.set(DataKind::kKv, 0, kv_ram);
      const GenRun ref = generate(*make_engine(*f.model, o), prompts);  // sharing off
      o.prefix_sharing = true;
      o.plan_prompt_tokens = static_cast<int64_t>(longest);
      o.plan_new_tokens = kNewTokens;
      const PlanSharing kv = planned_sharing(jobs, all, o.page_size)(g * k).kv;
      ASSERT_GT(kv.seqs, 0) << what;
      ASSERT_GT(kv.pages, 0) << what;
      const PlanFit without = plan_fit(*f.model, o, cpu, 0);
      o.plan_sharing = kv;
      const PlanFit with = plan_fit(*f.model, o, cpu, 0);
      ASSERT_TRUE(with.refusal.empty()) << with.refusal;
      const uint64_t page = kv_geometry_of(f.model->config(), o).bytes_per_page();
      if (kv_ram == 1.0) {
        EXPECT_EQ(without.kv_need - with.kv_need, static_cast<uint64_t>(kv.seqs * kv.pages) * page)
            << what;
      }
      ASSERT_LT(with.need.ram, without.need.ram) << what;
      o.gpu_mem = 0;
      o.cpu_mem = with.need.ram;
      const GenRun got =
          generate(*make_engine(*f.model, o), in_block_order(jobs, prompts, g * k, o.page_size));
      EXPECT_EQ(got.tokens, in_block_order(jobs, ref.tokens, g * k, o.page_size)) << what;
      o.plan_sharing = {};
      try {
        make_engine(*f.model, o);
        ADD_FAILURE() << what << ": the full block without sharing was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("is below the"), std::string::npos) << e.what();
      }
    }
  }
}

// The KV a plan takes every block to store once bounds what each block
// needs: over prompt sets of several groups (a long preamble, short ones,
// prompts in none) and blocks of several sizes, each block the driver forms
// needs no more backed pages, disk slots or staging records than the full
// block of the longest prompt with the planned sharing, for KV in RAM, on
// disk and split.
TEST(PlannedKvSharing, TheFullBlockBoundsEveryBlock) {
  KvGeometry geo;
  geo.n_layer = 2;
  geo.n_kv_head = 2;
  geo.head_dim = 8;
  geo.dtype = DType::kF32;
  geo.page_size = 4;
  std::mt19937 rng(7);
  auto tokens = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % 1000);
    return t;
  };
  std::vector<Placement> placements(4);
  placements[1].set(DataKind::kKv, 0, 0);
  placements[2].set(DataKind::kKv, 0, 0.5);
  placements[3].set(DataKind::kKv, 0, 0.3);
  const int64_t new_tokens = 6;
  int64_t shared_somewhere = 0;
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<std::vector<int32_t>> preambles;
    for (int p = 0; p < 3; ++p) preambles.push_back(tokens(4 + rng() % 40));
    std::vector<Job> jobs(10 + rng() % 20);
    size_t longest = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const size_t which = rng() % 4;  // 3: no preamble
      jobs[i].index = i;
      jobs[i].tokens = which < 3 ? preambles[which] : std::vector<int32_t>{};
      const std::vector<int32_t> own = tokens(1 + rng() % 12);
      jobs[i].tokens.insert(jobs[i].tokens.end(), own.begin(), own.end());
      longest = std::max(longest, jobs[i].tokens.size());
    }
    const auto all = [](size_t) { return false; };
    const auto sharing = planned_sharing(jobs, all, geo.page_size);
    for (const auto& [g, k] : {std::pair<int64_t, int64_t>{2, 1}, {2, 3}, {4, 2}, {5, 1}}) {
      const PlanSharing kv = sharing(g * k).kv;
      shared_somewhere += kv.seqs * kv.pages;
      const BlockShape full =
          BlockShape::full(g, k, static_cast<int64_t>(longest), new_tokens, 1, kv);
      for (const auto& block : plan_blocks(jobs, g * k, all, geo.page_size)) {
        std::vector<std::span<const int32_t>> prompts;
        for (const size_t i : block) prompts.emplace_back(jobs[i].tokens);
        const std::vector<int64_t> refs = referenced_pages(
            find_prefix_groups(prompts, geo.page_size), prompts.size(), geo.page_size);
        std::vector<std::vector<int64_t>> lengths(static_cast<size_t>(k)), shared(lengths.size());
        for (size_t i = 0; i < prompts.size(); ++i) {
          lengths[i / static_cast<size_t>(g)].push_back(static_cast<int64_t>(prompts[i].size()) +
                                                        new_tokens - 1);
          shared[i / static_cast<size_t>(g)].push_back(refs[i]);
        }
        for (const Placement& pl : placements) {
          const KvNeeds bound = kv_block_needs(geo, pl, full.stored, 1, full.shared);
          const KvNeeds need = kv_block_needs(geo, pl, lengths, 1, shared);
          const std::string what = "trial " + std::to_string(trial) + " block " +
                                   std::to_string(g) + "x" + std::to_string(k) + " KV on disk " +
                                   std::to_string(pl.disk(DataKind::kKv));
          EXPECT_LE(need.backed_pages, bound.backed_pages) << what;
          EXPECT_LE(need.disk_pages, bound.disk_pages) << what;
          EXPECT_LE(need.stage_records, bound.stage_records) << what;
        }
      }
    }
  }
  EXPECT_GT(shared_somewhere, 0);  // the plans took some KV to be stored once
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixEngine, ::testing::Values("opt", "llama", "qwen2"),
                         fixture_param_name);

}  // namespace
}  // namespace strata
