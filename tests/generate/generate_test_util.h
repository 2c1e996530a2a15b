// Helpers shared by the driver tests: a scratch directory per test, file
// reading and writing, the fixture tokenizer (tests/data/models/llama, a
// 904-token byte-level BPE), and a small deterministic Engine.
//
// FakeEngine is a test double of the Engine interface: the logits of a
// sequence depend only on its own tokens (prompt + generated): the row is a
// fixed pseudo-random pattern of the last token, plus a large bonus on
// favourite(tokens) (by default (last + 1) mod n_vocab). It checks the
// interface's rules (non-empty prompts, prompt + max_new_tokens within the
// context, at most block_size sequences, every sequence finished by its
// max_new_tokens) and records what it was asked to run. With max_draft > 0
// it verifies draft tokens as the engine does: a row per fed token.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "generate/engine.h"
#include "support/files.h"
#include "tokenizer/tokenizer.h"

namespace strata::test {

inline const Tokenizer& fixture_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_path(test_data("models/llama"));
  return *tok;
}

class FakeEngine : public Engine {
 public:
  explicit FakeEngine(int64_t n_vocab, int64_t block_size = 4, int64_t n_ctx = 512)
      : block_size_(block_size) {
    config_.n_vocab = n_vocab;
    config_.n_ctx = n_ctx;
  }

  const ModelConfig& config() const override { return config_; }
  int64_t block_size() const override { return block_size_; }
  int64_t shared_prefix_page() const override { return shared_page; }
  int64_t shared_page = 0;  // as the engine's: 0 for none

  // The logits row that follows `tokens`.   row: [n_vocab]
  void logits_for(const std::vector<int32_t>& tokens, float* row) const {
    const int32_t last = tokens.back();
    for (int64_t t = 0; t < config_.n_vocab; ++t) {
      row[t] = static_cast<float>(std::sin(0.37 * static_cast<double>(t) + 0.11 * last));
    }
    row[favourite(tokens)] += bonus;
  }

  void run_block(std::span<const SeqInput> seqs, const StepFn& on_step) override {
    if (throw_after_blocks >= 0 && n_blocks_run >= throw_after_blocks) {
      fail("interrupted (test)");
    }
    ++n_blocks_run;
    EXPECT_LE(static_cast<int64_t>(seqs.size()), block_size_);
    std::vector<size_t> sizes;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<int32_t> generated(seqs.size(), 0);
    for (const SeqInput& s : seqs) {
      if (s.prompt.empty()) fail("empty prompt");
      if (static_cast<int64_t>(s.prompt.size()) + s.max_new_tokens > config_.n_ctx) {
        fail("prompt does not fit the context");
      }
      sizes.push_back(s.prompt.size());
      tokens.push_back(s.prompt);
      stats_.prompt_tokens += static_cast<int64_t>(s.prompt.size());
    }
    block_prompt_sizes.push_back(sizes);
    // drafts[s]: the draft tokens fed after the last of tokens[s] (at most
    // max_draft, none past the sequence's limit); a row each.
    std::vector<std::vector<int32_t>> drafts(seqs.size());
    std::vector<int32_t> order(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) order[i] = static_cast<int32_t>(i);
    for (int step = 0; !order.empty(); ++step) {
      // Sequences in reverse order on odd steps: the caller must follow `active`.
      if (step % 2 == 1) std::reverse(order.begin(), order.end());
      std::vector<int32_t> active;
      std::vector<float> logits;
      for (const int32_t s : order) {
        std::vector<int32_t> ctx = tokens[s];
        for (size_t i = 0; i <= drafts[s].size(); ++i) {
          if (i > 0) ctx.push_back(drafts[s][i - 1]);
          active.push_back(s);
          logits.resize(active.size() * config_.n_vocab);
          logits_for(ctx, logits.data() + (active.size() - 1) * config_.n_vocab);
        }
      }
      std::vector<SeqAction> actions(active.size());
      on_step(step, active, logits.data(), actions);
      std::vector<int32_t> next;
      for (size_t r = 0, n = 0; r < active.size(); r += n) {
        const int32_t s = active[r];
        n = 1 + drafts[s].size();
        const SeqAction& a = actions[r];
        EXPECT_GE(a.accepted, 0);
        EXPECT_LE(static_cast<size_t>(a.accepted), drafts[s].size());
        stats_.drafted_tokens += static_cast<int64_t>(drafts[s].size());
        stats_.accepted_tokens += a.accepted;
        tokens[s].insert(tokens[s].end(), drafts[s].begin(), drafts[s].begin() + a.accepted);
        generated[s] += 1 + a.accepted;
        stats_.generated_tokens += 1 + a.accepted;
        drafts[s].clear();
        if (a.finished) continue;
        EXPECT_LT(generated[s], seqs[s].max_new_tokens) << "sequence not finished at its limit";
        if (generated[s] >= seqs[s].max_new_tokens) continue;
        tokens[s].push_back(a.next_token);
        const int64_t room =
            std::min<int64_t>(max_draft, seqs[s].max_new_tokens - generated[s] - 1);
        drafts[s].assign(a.draft.begin(),
                         a.draft.begin() + std::min<int64_t>(room, std::ssize(a.draft)));
        next.push_back(s);
      }
      order = next;
      ++n_steps;
    }
    n_seqs_run += static_cast<int64_t>(seqs.size());
  }

  std::vector<float> score(std::span<const int32_t> tokens) override {
    std::vector<float> out(tokens.size() * config_.n_vocab);
    std::vector<int32_t> prefix;
    for (size_t t = 0; t < tokens.size(); ++t) {
      prefix.push_back(tokens[t]);
      logits_for(prefix, out.data() + t * config_.n_vocab);
    }
    scored_lengths.push_back(tokens.size());
    return out;
  }

  EngineStats stats() const override { return stats_; }

  std::function<int32_t(const std::vector<int32_t>&)> favourite =
      [this](const std::vector<int32_t>& t) {
        return static_cast<int32_t>((t.back() + 1) % config_.n_vocab);
      };
  float bonus = 6.0f;
  int64_t max_draft =
      0;  // draft tokens a step verifies per sequence (EngineOptions::max_draft_tokens)
  int throw_after_blocks = -1;  // >= 0: run_block throws once this many blocks ran
  int n_blocks_run = 0;
  int64_t n_seqs_run = 0;
  int64_t n_steps = 0;
  std::vector<std::vector<size_t>> block_prompt_sizes;
  std::vector<size_t> scored_lengths;

 private:
  ModelConfig config_;
  int64_t block_size_;
  EngineStats stats_;
};

}  // namespace strata::test
