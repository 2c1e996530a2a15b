// Perplexity on a deterministic FakeEngine: chunks scored by the golden
// procedure, decode mode, and one token's negative log-likelihood.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "generate/generate_test_util.h"
#include "generate/perplexity.h"

namespace strata {
namespace {

using test::FakeEngine;
using test::fixture_tokenizer;

int64_t vocab() {
  return fixture_tokenizer().n_vocab();
}

TEST(Perplexity, ChunksAndScoresByTheGoldenProcedure) {
  FakeEngine e(vocab(), 1, 64);
  std::vector<int32_t> ids(100);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % vocab());
  const PerplexityResult r = perplexity(e, ids, 32);
  EXPECT_EQ(r.n_chunks, 3);  // 100 / 32, the tail of 4 dropped
  EXPECT_EQ(r.n_scored, 3 * 31);
  EXPECT_EQ(e.scored_lengths, (std::vector<size_t>{32, 32, 32}));
  // Independent sum over the same positions.
  double sum = 0;
  std::vector<float> row(vocab());
  for (int c = 0; c < 3; ++c) {
    std::vector<int32_t> prefix;
    double chunk = 0;
    for (int t = 0; t < 31; ++t) {
      prefix.push_back(ids[c * 32 + t]);
      e.logits_for(prefix, row.data());
      double mx = -1e300, z = 0;
      for (float l : row) mx = std::max(mx, static_cast<double>(l));
      for (float l : row) z += std::exp(static_cast<double>(l) - mx);
      chunk += mx + std::log(z) - row[ids[c * 32 + t + 1]];
    }
    EXPECT_NEAR(r.chunk_nll_sum[c], chunk, 1e-9 * std::abs(chunk));
    sum += chunk;
  }
  EXPECT_NEAR(r.ppl, std::exp(sum / 93), 1e-9 * r.ppl);

  // With BOS: chunks of BOS + 31 text tokens, still 31 scored each.
  FakeEngine e2(vocab(), 1, 64);
  const PerplexityResult rb = perplexity(e2, ids, 32, 900);
  EXPECT_EQ(rb.n_chunks, 3);
  EXPECT_EQ(rb.n_scored, 93);

  EXPECT_THROW(perplexity(e, std::vector<int32_t>(10, 1), 32), Error);
  EXPECT_THROW(perplexity(e, ids, 128), Error);  // longer than the context
  EXPECT_THROW(perplexity(e, ids, 1), Error);
}

// Decode mode: the first N tokens of each chunk a prompt, the rest fed one
// at a time; positions from N - 1 on scored, chunks a block at a time.
TEST(Perplexity, DecodeModeScoresTheFedPositions) {
  FakeEngine e(vocab(), 2, 64);
  std::vector<int32_t> ids(100);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % vocab());
  const int64_t from = 10;
  const PerplexityResult r = perplexity(e, ids, 32, -1, from);
  EXPECT_EQ(r.n_chunks, 3);
  EXPECT_EQ(r.n_scored, 3 * (32 - from));
  std::vector<float> row(vocab());
  double sum = 0;
  for (int c = 0; c < 3; ++c) {
    double chunk = 0;
    for (int t = static_cast<int>(from) - 1; t < 31; ++t) {
      const std::vector<int32_t> prefix(ids.begin() + c * 32, ids.begin() + c * 32 + t + 1);
      e.logits_for(prefix, row.data());
      double mx = -1e300, z = 0;
      for (float l : row) mx = std::max(mx, static_cast<double>(l));
      for (float l : row) z += std::exp(static_cast<double>(l) - mx);
      chunk += mx + std::log(z) - row[ids[c * 32 + t + 1]];
    }
    EXPECT_NEAR(r.chunk_nll_sum[c], chunk, 1e-9 * std::abs(chunk)) << "chunk " << c;
    sum += chunk;
  }
  EXPECT_NEAR(r.ppl, std::exp(sum / static_cast<double>(3 * (32 - from))), 1e-9 * r.ppl);
}

TEST(Perplexity, TokenNll) {
  const std::vector<float> l = {0.0f, static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(token_nll(l, 1), -std::log(0.75), 1e-7);
  EXPECT_NEAR(token_nll(l, 0), -std::log(0.25), 1e-7);
  // Shift invariance with large logits (no overflow).
  const std::vector<float> big = {1000.0f, 1000.0f + static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(token_nll(big, 1), -std::log(0.75), 1e-4);
}

}  // namespace
}  // namespace strata
