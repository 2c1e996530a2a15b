// Speculative decoding in the engine (generate/engine.h, SeqAction::draft)
// on the fixture models, f32 compute and KV, pages of 4 tokens: a decode
// step feeds a sequence its next token and its draft tokens, a logits row
// each, and keeps the KV rows of the accepted ones only. Whatever the drafts
// (all right, one wrong, unrelated), the greedy tokens are those of decoding
// without them, and every kept row's logits are the same within the bound
// of another summation order (a verification step runs matrix products of
// more rows); with KV on disk no draft token completes a disk page, so the
// KV bytes written to disk are those of the run without speculation; with
// sparse attention each fed token selects its own pages; a draft model's RAM
// counts in the engine's budget.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "offload/engine_options.h"
#include "offload/fixture_runs.h"
#include "offload/offload_engine.h"
#include "offload/plan_fit.h"

namespace strata {
namespace {

using namespace fixture_runs;

constexpr int64_t kDrafts = 4;

enum class Drafts { kRight, kSecondWrong, kUnrelated };

// Drafts from the reference run's own continuation of each sequence.
DraftFn drafts_from(const GenRun& ref, Drafts kind, int64_t n_vocab) {
  return [&ref, kind, n_vocab](size_t s, const std::vector<int32_t>& produced) {
    std::vector<int32_t> d;
    const std::vector<int32_t>& all = ref.tokens[s];
    for (size_t i = produced.size(); i < all.size() && std::ssize(d) < kDrafts; ++i) {
      d.push_back(all[i]);
    }
    if (kind == Drafts::kSecondWrong && d.size() >= 2) d[1] = (d[1] + 1) % n_vocab;
    if (kind == Drafts::kUnrelated) {
      for (size_t i = 0; i < d.size(); ++i) {
        d[i] = static_cast<int32_t>((d[i] * 7 + 13 + static_cast<int32_t>(i)) % n_vocab);
      }
    }
    return d;
  };
}

class SpeculativeEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativeEngine, GreedyTokensAreThoseOfDecodingWithout) {
  const Fixture f = load(GetParam());
  TempDir dir("speculative");
  const ModelConfig& c = f.model->config();
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{1, 1}, {3, 2}}) {
    int64_t drafted_in_ram = 0;
    for (const double kv_ram : {1.0, 0.5, 0.0}) {
      EngineOptions o = fixture_options(f, g, k, dir.path);
      o.placement.set(DataKind::kKv, 0, kv_ram);
      const GenRun ref = generate(*make_engine(*f.model, o), f.prompts);
      o.max_draft_tokens = kDrafts;
      for (const Drafts kind : {Drafts::kRight, Drafts::kSecondWrong, Drafts::kUnrelated}) {
        const std::string what = f.name + " " + std::to_string(g) + "x" + std::to_string(k) +
                                 " KV in RAM " + std::to_string(kv_ram) + " drafts " +
                                 std::to_string(static_cast<int>(kind));
        const GenRun r = generate_speculative(*make_engine(*f.model, o), f.prompts,
                                              drafts_from(ref, kind, c.n_vocab));
        expect_same_tokens_close_logits(c, ref, r, what);
        if (::testing::Test::HasFatalFailure()) return;
        EXPECT_EQ(r.stats.generated_tokens, ref.stats.generated_tokens) << what;
        EXPECT_GT(r.stats.drafted_tokens, 0) << what;
        if (kind == Drafts::kRight) {
          EXPECT_EQ(r.stats.accepted_tokens, r.stats.drafted_tokens) << what;
          EXPECT_LT(r.stats.decode_steps, ref.stats.decode_steps) << what;
          if (kv_ram == 1.0) drafted_in_ram = r.stats.drafted_tokens;
          // Draft tokens stop short of a disk page's end: fewer are fed.
          if (kv_ram < 1.0) {
            EXPECT_LT(r.stats.drafted_tokens, drafted_in_ram) << what;
          }
        } else {
          EXPECT_LT(r.stats.accepted_tokens, r.stats.drafted_tokens) << what;
        }
        // Rejected rows never reach the disk: the same KV pages are stored.
        EXPECT_EQ(link_bytes(r.stats, "cpu->disk"), link_bytes(ref.stats, "cpu->disk")) << what;
        if (kv_ram < 1.0) {
          EXPECT_GT(link_bytes(r.stats, "cpu->disk"), 0u) << what;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpeculativeEngine, ::testing::Values("opt", "llama", "qwen2"),
                         fixture_param_name);

// Whether some row of two runs' logits differs by more than the bound the
// comparisons here allow (so a run that matched one could not match both).
bool logits_apart(const ModelConfig& c, const GenRun& a, const GenRun& b) {
  for (size_t s = 0; s < a.logits.size(); ++s) {
    for (size_t i = 0; i < std::min(a.logits[s].size(), b.logits[s].size()); ++i) {
      double max_abs = 0;
      for (float x : a.logits[s][i]) max_abs = std::max(max_abs, std::fabs(double(x)));
      for (size_t v = 0; v < a.logits[s][i].size(); ++v) {
        if (std::fabs(double(a.logits[s][i][v]) - b.logits[s][i][v]) >
            micro_batch_bound(c, max_abs)) {
          return true;
        }
      }
    }
  }
  return false;
}

// With sparse attention (a budget of 3 pages of 4 tokens on the llama
// fixture, whose third layer is sparse) each fed token selects its own pages
// as the step that fed it alone would: the tokens are those of sparse
// decoding without drafts and the logits within the bound, with KV in RAM
// and on disk, while the dense run's are not (the selection is in effect in
// the verification rows, whose drafts cross the budget's end). Rejected
// drafts' keys leave their page's key min/max stale until the next step
// recomputes them (Backend::key_minmax): without that, the second-wrong
// drafts change later selections and tokens.
TEST(SpeculativeEngineWith, SparseAttentionGivesTheTokensOfSparseDecodingWithout) {
  const Fixture f = load("llama");
  TempDir dir("speculative-sparse");
  const ModelConfig& c = f.model->config();
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{1, 1}, {3, 2}}) {
    for (const double kv_ram : {1.0, 0.0}) {
      EngineOptions o = fixture_options(f, g, k, dir.path);
      o.placement.set(DataKind::kKv, 0, kv_ram);
      const GenRun dense = generate(*make_engine(*f.model, o), f.prompts);
      o.sparse_budget = 12;
      const GenRun ref = generate(*make_engine(*f.model, o), f.prompts);
      ASSERT_GT(ref.stats.kv_skipped_bytes, 0u);
      ASSERT_TRUE(logits_apart(c, dense, ref));
      o.max_draft_tokens = kDrafts;
      for (const Drafts kind : {Drafts::kRight, Drafts::kSecondWrong}) {
        const std::string what = std::to_string(g) + "x" + std::to_string(k) + " KV in RAM " +
                                 std::to_string(kv_ram) + " drafts " +
                                 std::to_string(static_cast<int>(kind));
        const GenRun r = generate_speculative(*make_engine(*f.model, o), f.prompts,
                                              drafts_from(ref, kind, c.n_vocab));
        expect_same_tokens_close_logits(c, ref, r, what);
        if (::testing::Test::HasFatalFailure()) return;
        EXPECT_GT(r.stats.accepted_tokens, 0) << what;
        EXPECT_LT(r.stats.decode_steps, ref.stats.decode_steps) << what;
        EXPECT_GT(r.stats.kv_skipped_bytes, 0u) << what;
        if (kv_ram == 0.0) {
          EXPECT_GT(r.stats.sparse_hits + r.stats.sparse_misses, 0u) << what;
        }
      }
    }
  }
}

// The caller's action is checked: an accepted count beyond the drafts fed,
// or a draft token outside the vocabulary, is an error naming the sequence.
TEST(SpeculativeEngineContract, BadActionsAreErrors) {
  const Fixture f = load("llama");
  TempDir dir("speculative-bad");
  EngineOptions o = fixture_options(f, 2, 1, dir.path);
  o.max_draft_tokens = 2;
  auto e = make_engine(*f.model, o);
  std::vector<SeqInput> in{{f.prompts[0], 5}, {f.prompts[1], 5}};
  auto run = [&](int32_t accepted, int32_t draft_id) {
    e->run_block(
        in, [&](int step, std::span<const int32_t> active, const float*, std::span<SeqAction> out) {
          for (size_t a = 0; a < active.size(); ++a) {
            out[a].next_token = 1;
            out[a].draft = {draft_id, 2};
            if (step > 0) out[a].accepted = accepted;
          }
        });
  };
  EXPECT_NO_THROW(run(0, 3));
  try {
    run(3, 3);
    ADD_FAILURE() << "accepting 3 of 2 draft tokens was taken";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("accepts 3 draft tokens of the 2"), std::string::npos)
        << err.what();
  }
  try {
    run(0, static_cast<int32_t>(f.model->config().n_vocab));
    ADD_FAILURE() << "a draft token outside the vocabulary was taken";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("draft token"), std::string::npos) << err.what();
  }
}

TEST(SpeculativeEngineContract, OptionsItCannotHonourAreRefused) {
  EngineOptions o;
  o.max_draft_tokens = kMaxDraftTokens + 1;
  EXPECT_THROW(validated_options(o), Error);
  o.max_draft_tokens = -1;
  EXPECT_THROW(validated_options(o), Error);
  o.max_draft_tokens = 4;
  o.sparse_budget = 64;
  EXPECT_NO_THROW(validated_options(o));
  o.sparse_budget = 0;
  o.kv_dtype = DType::kQ8A32;
  EXPECT_THROW(validated_options(o), Error);
  o.kv_dtype = DType::kF16;
  EXPECT_NO_THROW(validated_options(o));
}

// A draft model's RAM (EngineOptions::draft_memory) is the engine's too:
// its fixed part with the weights, its KV pages and logits rows with each
// block (every sequence at its longest, within the draft's context), and a
// RAM budget that holds the block without them is refused, naming them.
TEST(SpeculativeEngineContract, TheDraftModelsRamIsCountedInTheBudget) {
  const Fixture f = load("llama");
  TempDir dir("draft-ram");
  EngineOptions o = fixture_options(f, 4, 2, dir.path);
  o.max_draft_tokens = kDrafts;
  o.plan_prompt_tokens = 20;
  o.plan_new_tokens = 8;
  const DeviceCaps cpu = device_caps("cpu");
  const PlanFit without = plan_fit(*f.model, o, cpu, 0);
  ASSERT_TRUE(without.refusal.empty()) << without.refusal;
  DraftMemory d;
  d.fixed = 1 << 20;
  d.page_bytes = 4096;
  d.page_size = 8;
  d.n_ctx = 1000;
  d.row_bytes = 1000;
  d.max_rows = 5;
  // 8 sequences of 20 + 8 - 1 tokens stored and 1 + 4 fed at once: 32 at
  // their longest, 4 pages each; 5 logits rows at most.
  const BlockShape full = BlockShape::full(4, 2, 20, 8, 1 + kDrafts);
  EXPECT_EQ(draft_block_bytes(d, full), 8 * 4 * 4096 + 5 * 1000);
  o.draft_memory = d;
  const PlanFit with = plan_fit(*f.model, o, cpu, 0);
  EXPECT_EQ(with.need.ram - without.need.ram, d.fixed + 8 * 4 * 4096 + 5 * 1000);
  EXPECT_EQ(with.need.device, without.need.device);
  // Within the draft's context: 30 tokens at most, 4 pages (of 8) still;
  // 24: 3 pages.
  d.n_ctx = 24;
  EXPECT_EQ(draft_block_bytes(d, full), 8 * 3 * 4096 + 5 * 1000);
  EXPECT_EQ(draft_block_bytes(DraftMemory{}, full), 0u);

  // The engine: a budget between the two needs is refused, naming the draft.
  o.cpu_mem = without.need.ram + (with.need.ram - without.need.ram) / 2;
  o.gpu_mem = 0;
  ASSERT_EQ(plan_fit(*f.model, o, cpu, 0).budget.ram, o.cpu_mem);
  try {
    make_engine(*f.model, o);
    FAIL() << "a RAM budget below the draft model's was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft model"), std::string::npos) << e.what();
  }
  o.cpu_mem = with.need.ram;
  EXPECT_NO_THROW(make_engine(*f.model, o));
}

}  // namespace
}  // namespace strata
