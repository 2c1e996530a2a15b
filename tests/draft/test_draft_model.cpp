// The draft model (draft/draft_model.h) on the fixture models: its
// proposals are the model's own greedy tokens (as the engine computes
// them), whatever it computed for the sequence before, one sequence at a
// time or batched, with long prompts cut into passes; the keys it keeps
// are those of its context; its vocabulary check.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "draft/draft_model.h"
#include "generate/driver.h"
#include "offload/block_budget.h"
#include "offload/fixture_runs.h"
#include "offload/offload_engine.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

using fixture_runs::Fixture;

constexpr int32_t kNew = 12;  // new tokens per sequence
constexpr int64_t kMaxDraft = 6;

struct Ref {
  Fixture f;
  fixture_runs::GenRun greedy;  // kNew + kMaxDraft greedy tokens of every prompt
};

Ref reference(const std::string& name) {
  Ref r{fixture_runs::load(name), {}};
  fixture_runs::TempDir dir("draft-" + name);
  r.greedy = fixture_runs::generate(
      *make_engine(*r.f.model, fixture_runs::fixture_options(r.f, 4, 2, dir.path)), r.f.prompts,
      kNew + kMaxDraft);
  return r;
}

std::vector<SeqInput> block_of(const Fixture& f) {
  std::vector<SeqInput> in;
  for (const auto& p : f.prompts) in.push_back({p, kNew});
  return in;
}

// The prompt of sequence s and its first n greedy tokens.
std::vector<int32_t> context(const Ref& r, size_t s, size_t n) {
  std::vector<int32_t> c = r.f.prompts[s];
  c.insert(c.end(), r.greedy.tokens[s].begin(), r.greedy.tokens[s].begin() + static_cast<long>(n));
  return c;
}

std::vector<int32_t> greedy_after(const Ref& r, size_t s, size_t n, size_t k) {
  const auto& g = r.greedy.tokens[s];
  EXPECT_LE(n + k, g.size());
  return {g.begin() + static_cast<long>(n), g.begin() + static_cast<long>(n + k)};
}

DraftModelOptions options() {
  DraftModelOptions o;
  o.threads = 2;
  return o;
}

std::vector<int32_t> propose_one(DraftModel& d, int32_t seq, std::span<const int32_t> ctx,
                                 int64_t k) {
  std::vector<std::vector<int32_t>> out(1);
  const Drafter::Request q{seq, ctx, k};
  d.propose(std::span(&q, 1), out);
  return out[0];
}

class DraftModelTest : public ::testing::TestWithParam<const char*> {};

// Every sequence, drafts of 1 to 5 tokens at several points of its output,
// in one call each step: the model's own greedy continuation.
TEST_P(DraftModelTest, ProposesTheModelsGreedyTokensBatched) {
  const Ref r = reference(GetParam());
  DraftModel d(*r.f.model, options());
  d.begin_block(block_of(r.f), 5);
  for (size_t n = 0; n + 1 < kNew; n += 3) {
    std::vector<std::vector<int32_t>> ctx(r.f.prompts.size());
    std::vector<Drafter::Request> q;
    for (size_t s = 0; s < ctx.size(); ++s) {
      ctx[s] = context(r, s, n);
      q.push_back({static_cast<int32_t>(s), ctx[s], static_cast<int64_t>(1 + (s + n) % 5)});
    }
    std::vector<std::vector<int32_t>> out(q.size());
    d.propose(q, out);
    for (size_t s = 0; s < q.size(); ++s) {
      EXPECT_EQ(out[s], greedy_after(r, s, n, static_cast<size_t>(q[s].k)))
          << "sequence " << s << " after " << n << " tokens";
      // It keeps the keys of its context and of the drafts but the last.
      std::vector<int32_t> want = ctx[s];
      want.insert(want.end(), out[s].begin(), out[s].end() - 1);
      EXPECT_EQ(std::vector<int32_t>(d.cached(q[s].seq).begin(), d.cached(q[s].seq).end()), want);
    }
  }
  const DraftStats& st = d.stats();
  EXPECT_GT(st.passes, 0);
  EXPECT_GT(st.proposed, 0);
}

// A context that left the draft behind: the target rejected draft tokens
// and chose another. The keys of the rejected ones are dropped and the
// proposal is what a new draft model proposes for that context.
TEST_P(DraftModelTest, RejectedDraftKeysAreDroppedBeforeTheNextProposal) {
  const Ref r = reference(GetParam());
  const int64_t V = r.f.model->config().n_vocab;
  const size_t s = 2;
  DraftModel d(*r.f.model, options());
  d.begin_block(block_of(r.f), 6);
  const std::vector<int32_t> first = propose_one(d, 2, context(r, s, 1), 6);
  ASSERT_EQ(first, greedy_after(r, s, 1, 6));
  // Two draft tokens accepted, then another token than the third.
  std::vector<int32_t> ctx = context(r, s, 3);
  ctx.push_back(static_cast<int32_t>((r.greedy.tokens[s][3] + 7) % V));
  const std::vector<int32_t> second = propose_one(d, 2, ctx, 3);
  DraftModel fresh(*r.f.model, options());
  fresh.begin_block(block_of(r.f), 6);
  EXPECT_EQ(second, propose_one(fresh, 2, ctx, 3));
  std::vector<int32_t> want = ctx;
  want.insert(want.end(), second.begin(), second.end() - 1);
  EXPECT_EQ(std::vector<int32_t>(d.cached(2).begin(), d.cached(2).end()), want);
  // The pages are those of what it holds (page size 16).
  EXPECT_EQ(d.pages_in_use(), (static_cast<int64_t>(want.size()) + 15) / 16);
  // Fewer drafts than the last time: the keys past the context go too.
  const std::vector<int32_t> third = propose_one(d, 2, ctx, 1);
  EXPECT_EQ(third, std::vector<int32_t>(second.begin(), second.begin() + 1));
  EXPECT_EQ(std::vector<int32_t>(d.cached(2).begin(), d.cached(2).end()), ctx);
  d.finished(2);
  EXPECT_EQ(d.pages_in_use(), 0);
  EXPECT_TRUE(d.cached(2).empty());
}

// Passes of at most 3 tokens: every prompt is cut, and the proposals stay.
TEST_P(DraftModelTest, LongPromptsAreCutIntoPasses) {
  const Ref r = reference(GetParam());
  DraftModelOptions o = options();
  o.max_pass_tokens = 3;
  DraftModel d(*r.f.model, o);
  d.begin_block(block_of(r.f), 4);
  std::vector<std::vector<int32_t>> ctx(r.f.prompts.size());
  std::vector<Drafter::Request> q;
  int64_t fed = 0;
  for (size_t s = 0; s < ctx.size(); ++s) {
    ctx[s] = context(r, s, 2);
    fed += static_cast<int64_t>(ctx[s].size()) + 3;
    q.push_back({static_cast<int32_t>(s), ctx[s], 4});
  }
  std::vector<std::vector<int32_t>> out(q.size());
  d.propose(q, out);
  for (size_t s = 0; s < q.size(); ++s) EXPECT_EQ(out[s], greedy_after(r, s, 2, 4)) << s;
  EXPECT_EQ(d.stats().fed_tokens, fed);
  size_t longest = 0;
  for (const auto& c : ctx) longest = std::max(longest, c.size());
  EXPECT_GE(d.stats().passes, static_cast<int64_t>((longest + 2) / 3) + 3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DraftModelTest, ::testing::Values("llama", "opt", "qwen2"));

// A context whose draft would pass the model's context gets none; a new
// block drops what the last one kept.
TEST(DraftModel, NoProposalPastTheContextAndANewBlockStartsEmpty) {
  const Fixture f = fixture_runs::load("llama");
  const int64_t n_ctx = f.model->config().n_ctx;
  DraftModel d(*f.model, options());
  std::vector<int32_t> ctx(static_cast<size_t>(n_ctx - 2), 5);
  d.begin_block(std::vector<SeqInput>{{ctx, 2}, {f.prompts[0], 4}}, 4);
  EXPECT_TRUE(propose_one(d, 0, ctx, 4).empty());   // positions up to n_ctx + 1
  EXPECT_EQ(propose_one(d, 0, ctx, 3).size(), 3u);  // up to n_ctx - 1
  EXPECT_EQ(propose_one(d, 1, f.prompts[0], 4).size(), 4u);
  EXPECT_GT(d.pages_in_use(), 0);
  d.begin_block(std::vector<SeqInput>{{f.prompts[1], 4}}, 4);
  EXPECT_EQ(d.pages_in_use(), 0);
  EXPECT_TRUE(d.cached(0).empty());
}

// What it tells the engine it takes (DraftModel::memory, counted with
// offload/block_budget.h: draft_block_bytes) holds its KV pages when every
// sequence of a block proposes at its longest (its whole context and a full
// draft), with at most a page to spare per sequence.
TEST(DraftModel, MemoryHoldsItsPagesAtTheLongest) {
  const Fixture f = fixture_runs::load("qwen2");
  DraftModel d(*f.model, options());
  const DraftMemory m = d.memory();
  EXPECT_GT(m.fixed, f.model->config().n_layer * 1000u);  // weights and working memory
  EXPECT_EQ(m.row_bytes, f.model->config().n_vocab * sizeof(float));
  const std::vector<SeqInput> in = block_of(f);
  d.begin_block(in, kMaxDraft);
  std::vector<std::vector<int32_t>> ctx;
  std::vector<Drafter::Request> q;
  for (size_t s = 0; s < in.size(); ++s) {
    // The last step's context: the prompt and all but the last new token.
    ctx.push_back(in[s].prompt);
    ctx.back().insert(ctx.back().end(), kNew - 1, 7);
  }
  for (size_t s = 0; s < in.size(); ++s) q.push_back({static_cast<int32_t>(s), ctx[s], kMaxDraft});
  std::vector<std::vector<int32_t>> out(q.size());
  d.propose(q, out);
  for (const auto& o : out) ASSERT_EQ(std::ssize(o), kMaxDraft);
  BlockShape shape;
  shape.decode_tokens = 1 + kMaxDraft;
  shape.stored.emplace_back();
  for (const SeqInput& s : in) {
    shape.stored.back().push_back(static_cast<int64_t>(s.prompt.size()) + s.max_new_tokens - 1);
  }
  const auto n = static_cast<int64_t>(in.size());
  const uint64_t counted =
      draft_block_bytes(m, shape) - static_cast<uint64_t>(std::min(n, m.max_rows)) * m.row_bytes;
  ASSERT_EQ(counted % m.page_bytes, 0u);
  const auto pages = static_cast<int64_t>(counted / m.page_bytes);
  EXPECT_LE(d.pages_in_use(), pages);
  EXPECT_LE(pages - d.pages_in_use(), n);
}

TEST(DraftModel, VocabularyCheck) {
  const Fixture llama = fixture_runs::load("llama"), opt = fixture_runs::load("opt");
  const auto a = tokenizer_for(*llama.model), b = tokenizer_for(*opt.model);
  EXPECT_NO_THROW(check_same_vocabulary(*a, *tokenizer_for(*llama.model), "same"));
  try {
    check_same_vocabulary(*a, *b, "other/model");
    FAIL() << "a draft model with another vocabulary was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--draft-model other/model"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
