// Sampling: greedy ties, top-k and top-p masks on hand-made logits, the
// repetition penalty's arithmetic, temperature, the draw-to-token mapping,
// per-prompt streams (same seed same tokens; streams independent of each
// other) and the empirical distribution of many draws.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "generate/sampler.h"

namespace strata {
namespace {

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double v : p) l.push_back(static_cast<float>(std::log(v)));
  return l;
}

SamplingParams sampled(float t = 1.0f, int32_t k = 0, float p = 1.0f) {
  SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  return s;
}

TEST(Sampler, ArgmaxTakesTheLowestIdAmongTies) {
  EXPECT_EQ(argmax(std::vector<float>{1, 5, 3, 5, 2}), 1);
  EXPECT_EQ(argmax(std::vector<float>{7}), 0);
  EXPECT_EQ(argmax(std::vector<float>{-1, -1, -1}), 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(argmax(std::vector<float>{nan, 2, nan, 3, 3}), 3);
  EXPECT_THROW(argmax(std::vector<float>{nan, nan}), Error);
}

// A row long enough for argmax's lanes, with the largest value planted in
// several places (ties across lanes, in the tail past the last full block),
// NaN and infinities about: the first index of the largest non-NaN value,
// as one scalar pass finds it.
TEST(Sampler, ArgmaxOverLongRowsMatchesOneScalarPass) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const auto scalar = [](const std::vector<float>& row) {
    int32_t best = -1;
    for (size_t i = 0; i < row.size(); ++i) {
      if (std::isnan(row[i])) continue;
      if (best < 0 || row[i] > row[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    }
    return best;
  };
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  int checked = 0;
  for (size_t n : {size_t{16}, size_t{17}, size_t{31}, size_t{100}, size_t{49152}, size_t{49155}}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> row(n);
      for (float& v : row) v = normal(rng);
      std::uniform_int_distribution<size_t> at(0, n - 1);
      const float top = 100.0f + static_cast<float>(trial % 3);
      switch (trial % 5) {
        case 0:  // one maximum
          row[at(rng)] = top;
          break;
        case 1:  // ties, one of them in the tail
          row[at(rng)] = top;
          row[at(rng)] = top;
          row[n - 1] = top;
          break;
        case 2:  // NaN everywhere but a few values
          for (float& v : row) v = nan;
          row[at(rng)] = -5.0f;
          row[at(rng)] = -2.0f;
          break;
        case 3:  // +inf twice, -inf and NaN about
          row[at(rng)] = inf;
          row[at(rng)] = inf;
          row[at(rng)] = -inf;
          row[at(rng)] = nan;
          break;
        case 4:  // -inf and NaN only
          for (size_t i = 0; i < n; ++i) row[i] = i % 3 == 0 ? nan : -inf;
          break;
      }
      EXPECT_EQ(argmax(row), scalar(row)) << "n " << n << " trial " << trial;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 240);
}

TEST(Sampler, TemperatureZeroIsGreedy) {
  std::vector<float> row = {0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(sample_row(row, SamplingParams{}, {}, 0.999), 1);
  SeqSampler a(SamplingParams{}, 1, 0, 4);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.sample(row), 1);
}

TEST(Sampler, TopKKeepsTheKLargestAndTiesAtTheKth) {
  const std::vector<float> l = {1, 5, 3, 5, 2};
  EXPECT_EQ(nucleus(l, sampled(1, 1)), (std::vector<int32_t>{1, 3}));  // tie at the 1st
  EXPECT_EQ(nucleus(l, sampled(1, 2)), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(nucleus(l, sampled(1, 3)), (std::vector<int32_t>{1, 2, 3}));
  // Nothing cut: every id, in id order.
  EXPECT_EQ(nucleus(l, sampled(1, 0)), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(nucleus(l, sampled(1, 99)), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(nucleus(std::vector<float>{4, 4, 4, 1}, sampled(1, 2)),
            (std::vector<int32_t>{0, 1, 2}));
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 in a shuffled order of ids.
  const std::vector<float> l = log_probs({0.125, 0.5, 0.125, 0.25});
  EXPECT_EQ(nucleus(l, sampled(1, 0, 0.3f)), (std::vector<int32_t>{1}));
  EXPECT_EQ(nucleus(l, sampled(1, 0, 0.6f)), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(nucleus(l, sampled(1, 0, 0.8f)), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(nucleus(l, sampled(1, 0, 0.9f)), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(nucleus(l, sampled(1, 0, 1.0f)), (std::vector<int32_t>{0, 1, 2, 3}));  // off
}

TEST(Sampler, TopPRenormalisesWithinTopK) {
  // top-k 2 leaves 0.5 and 0.25, i.e. 2/3 and 1/3: top-p 0.6 keeps only the first.
  const std::vector<float> l = log_probs({0.125, 0.5, 0.125, 0.25});
  EXPECT_EQ(nucleus(l, sampled(1, 2, 0.6f)), (std::vector<int32_t>{1}));
  EXPECT_EQ(nucleus(l, sampled(1, 2, 0.7f)), (std::vector<int32_t>{1, 3}));
}

TEST(Sampler, TopPOnALargeVocabularyMatchesAFullSort) {
  // The growing partial sort must give what sorting everything gives.
  const int n = 50000;
  std::vector<float> l(n);
  for (int i = 0; i < n; ++i) l[i] = static_cast<float>(std::sin(i * 0.731) * 4.0 + (i % 7) * 0.01);
  for (float p : {0.1f, 0.5f, 0.9f, 0.99f}) {
    const std::vector<int32_t> got = nucleus(l, sampled(1.3f, 0, p));
    // Reference: full sort by probability, then the HF rule.
    std::vector<float> scaled(n);
    for (int i = 0; i < n; ++i) scaled[i] = l[i] / 1.3f;
    std::vector<int32_t> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return scaled[a] != scaled[b] ? scaled[a] > scaled[b] : a < b; });
    const double mx = scaled[order[0]];
    double total = 0;
    for (int i = 0; i < n; ++i) total += std::exp(static_cast<double>(scaled[i]) - mx);
    std::vector<int32_t> want;
    double before = 0;
    for (int i = 0; i < n; ++i) {
      if (i > 0 && before / total >= p) break;
      before += std::exp(static_cast<double>(scaled[order[i]]) - mx);
      want.push_back(order[i]);
    }
    std::sort(want.begin(), want.end());  // the nucleus comes in id order
    EXPECT_EQ(got.size(), want.size()) << "top_p " << p;
    EXPECT_EQ(got, want) << "top_p " << p;
    EXPECT_GT(got.size(), 1u);
  }
}

TEST(Sampler, DrawMapsToTokensByCumulativeProbability) {
  const std::vector<float> l = log_probs({0.125, 0.5, 0.125, 0.25});
  auto pick = [&](double u, float top_p) {
    std::vector<float> row = l;
    return sample_row(row, sampled(1.0f, 0, top_p), {}, u);
  };
  // Nothing cut: id order, cumulative 0.125, 0.625, 0.75, 1.
  EXPECT_EQ(pick(0.0, 1.0f), 0);
  EXPECT_EQ(pick(0.12, 1.0f), 0);
  EXPECT_EQ(pick(0.13, 1.0f), 1);
  EXPECT_EQ(pick(0.62, 1.0f), 1);
  EXPECT_EQ(pick(0.63, 1.0f), 2);
  EXPECT_EQ(pick(0.74, 1.0f), 2);
  EXPECT_EQ(pick(0.76, 1.0f), 3);
  EXPECT_EQ(pick(0.999999, 1.0f), 3);
  // top-p 0.8 keeps ids 0, 1, 3 (0.125, 0.5, 0.25 of 0.875), walked in id
  // order: cumulative 1/7, 5/7, 1.
  EXPECT_EQ(pick(1.0 / 7 - 0.01, 0.8f), 0);
  EXPECT_EQ(pick(1.0 / 7 + 0.01, 0.8f), 1);
  EXPECT_EQ(pick(5.0 / 7 - 0.01, 0.8f), 1);
  EXPECT_EQ(pick(5.0 / 7 + 0.01, 0.8f), 3);
  EXPECT_EQ(pick(0.999999, 0.8f), 3);
}

TEST(Sampler, TemperatureDividesTheLogits) {
  // Logits 0 and ln 3: at T = 1, p = 1/4 and 3/4; at T = 2, p0 = 1/(1+sqrt3) = 0.366;
  // at T = 0.5, p0 = 1/10. Id order: token 0 first.
  const std::vector<float> l = {0.0f, static_cast<float>(std::log(3.0))};
  auto pick = [&](float t, double u) {
    std::vector<float> row = l;
    return sample_row(row, sampled(t), {}, u);
  };
  EXPECT_EQ(pick(1.0f, 0.24), 0);
  EXPECT_EQ(pick(1.0f, 0.26), 1);
  EXPECT_EQ(pick(2.0f, 0.36), 0);
  EXPECT_EQ(pick(2.0f, 0.37), 1);
  EXPECT_EQ(pick(0.5f, 0.09), 0);
  EXPECT_EQ(pick(0.5f, 0.11), 1);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  std::vector<float> l = {2.0f, -2.0f, 3.0f, 0.5f, 0.0f};
  const std::vector<int32_t> seen = {0, 1, 4, 99, -3};  // ids outside the row are ignored
  apply_repetition_penalty(l, seen, 2.0f);
  EXPECT_EQ(l, (std::vector<float>{1.0f, -4.0f, 3.0f, 0.5f, 0.0f}));
  // Penalty below 1 encourages repeats.
  std::vector<float> m = {2.0f, -2.0f};
  apply_repetition_penalty(m, std::vector<int32_t>{0, 1}, 0.5f);
  EXPECT_EQ(m, (std::vector<float>{4.0f, -1.0f}));
}

TEST(Sampler, RepetitionPenaltyCountsATokenOnceAndChangesGreedy) {
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  SeqSampler s(p, 0, 0, 3);
  s.observe(std::vector<int32_t>{0, 0, 0});
  // 2.0 / 1.5 = 1.333 < 1.5: token 1 wins; with three 0s still divided once.
  EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.5f, -1.0f}), 1);
  // Now 0 and 1 are both seen: 2.0/1.5 = 1.333 > 1.8/1.5 = 1.2.
  EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.8f, 1.0f}), 0);
  // Every token seen; the negative one is multiplied: -1 * 1.5 = -1.5.
  s.observe(2);
  EXPECT_EQ(s.sample(std::vector<float>{-1.2f, -2.0f, -1.0f}), 2);  // -1.8, -3, -1.5
}

TEST(Sampler, SameSeedAndIndexGiveTheSameTokens) {
  const int n = 300;
  std::vector<float> row(n);
  auto run = [&](uint64_t seed, uint64_t index) {
    SeqSampler s(sampled(0.9f, 50, 0.95f), seed, index, n);
    std::vector<int32_t> out;
    for (int step = 0; step < 64; ++step) {
      for (int i = 0; i < n; ++i) row[i] = static_cast<float>(std::cos(i * 0.05 + step) * 2);
      out.push_back(s.sample(row));
    }
    return out;
  };
  EXPECT_EQ(run(42, 3), run(42, 3));
  EXPECT_NE(run(42, 3), run(42, 4));
  EXPECT_NE(run(42, 3), run(43, 3));
}

TEST(Sampler, StreamsAreIndependentOfInterleaving) {
  // Two prompts sampled alternately give what each gives alone.
  const int n = 64;
  std::vector<float> row(n);
  for (int i = 0; i < n; ++i) row[i] = static_cast<float>((i % 9) * 0.3);
  SeqSampler a1(sampled(), 5, 0, n), b1(sampled(), 5, 1, n);
  std::vector<int32_t> a_alone, b_alone, a_mixed, b_mixed;
  for (int i = 0; i < 50; ++i) a_alone.push_back(a1.sample(row));
  for (int i = 0; i < 50; ++i) b_alone.push_back(b1.sample(row));
  SeqSampler a2(sampled(), 5, 0, n), b2(sampled(), 5, 1, n);
  for (int i = 0; i < 50; ++i) {
    b_mixed.push_back(b2.sample(row));
    a_mixed.push_back(a2.sample(row));
  }
  EXPECT_EQ(a_alone, a_mixed);
  EXPECT_EQ(b_alone, b_mixed);
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  // p = 0.5, 0.3, 0.2; 20000 draws; each count within 5 standard deviations
  // (the stream is fixed, so the test is deterministic).
  const std::vector<double> p = {0.5, 0.3, 0.2};
  const std::vector<float> l = log_probs(p);
  SeqSampler s(sampled(), 2024, 0, 3);
  std::vector<int> count(3, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[s.sample(l)];
  for (int k = 0; k < 3; ++k) {
    const double mean = n * p[k], sd = std::sqrt(n * p[k] * (1 - p[k]));
    EXPECT_NEAR(count[k], mean, 5 * sd) << "token " << k;
  }
}

TEST(Sampler, UniformDrawsAreInTheUnitInterval) {
  SeqRng r(0, 0);
  double lo = 1, hi = 0, sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = r.next_double();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_LT(lo, 1e-3);
  EXPECT_GT(hi, 1 - 1e-3);
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
}

TEST(Sampler, ValidateRejectsValuesOutOfRange) {
  EXPECT_NO_THROW(sampled(0.7f, 40, 0.9f).validate());
  EXPECT_THROW(sampled(-0.1f).validate(), Error);
  EXPECT_THROW(sampled(1, -1).validate(), Error);
  EXPECT_THROW(sampled(1, 0, 0.0f).validate(), Error);
  EXPECT_THROW(sampled(1, 0, 1.5f).validate(), Error);
  SamplingParams p;
  p.repetition_penalty = 0;
  EXPECT_THROW(p.validate(), Error);
  try {
    sampled(1, 0, 2.0f).validate();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--top-p 2"), std::string::npos) << e.what();
  }
}

TEST(Sampler, NaNAndMinusInfinityAreNeverSampled) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> l = {nan, 0.0f, ninf, 0.0f};
  EXPECT_EQ(nucleus(l, sampled()), (std::vector<int32_t>{1, 3}));
  SeqSampler s(sampled(), 1, 1, 4);
  for (int i = 0; i < 100; ++i) {
    const int32_t t = s.sample(l);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

}  // namespace
}  // namespace strata
