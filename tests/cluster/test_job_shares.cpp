// The split of a job's prompts between ranks (cluster/job_shares.h): every
// prompt to compute goes to exactly one rank, skipped and recorded ones to
// rank 0, the split is the same every time, and the ranks' work differs by
// no more than the largest prompt's.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "cluster/job_shares.h"

namespace strata {
namespace {

std::vector<Job> random_jobs(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs(n);
  for (size_t i = 0; i < n; ++i) {
    jobs[i].index = i;
    jobs[i].tokens.assign(1 + rng() % 300, 7);
    jobs[i].max_new_tokens = static_cast<int32_t>(rng() % 64);
  }
  return jobs;
}

TEST(JobShares, EveryPromptToOneRankWithinTheLargestPromptOfBalance) {
  for (int n_ranks : {1, 2, 3, 7}) {
    for (size_t n : {0, 1, 5, 100, 1001}) {
      const std::vector<Job> jobs = random_jobs(n, static_cast<uint32_t>(n * 31 + n_ranks));
      const auto owner = assign_shares(jobs, n_ranks, [](size_t) { return false; });
      ASSERT_EQ(owner.size(), n);
      std::vector<int64_t> load(static_cast<size_t>(n_ranks), 0);
      std::vector<size_t> count(static_cast<size_t>(n_ranks), 0);
      int64_t largest = 0;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_GE(owner[i], 0);
        ASSERT_LT(owner[i], n_ranks);
        load[static_cast<size_t>(owner[i])] += job_work(jobs[i]);
        ++count[static_cast<size_t>(owner[i])];
        largest = std::max(largest, job_work(jobs[i]));
      }
      const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
      EXPECT_LE(*hi - *lo, largest) << n_ranks << " ranks, " << n << " prompts";
      if (n >= static_cast<size_t>(n_ranks)) {
        for (size_t c : count) EXPECT_GT(c, 0u) << n_ranks << " ranks, " << n << " prompts";
      }
      EXPECT_EQ(assign_shares(jobs, n_ranks, [](size_t) { return false; }), owner);
    }
  }
}

TEST(JobShares, SkippedAndRecordedPromptsAreRankZerosAndWeighNothing) {
  std::vector<Job> jobs = random_jobs(40, 3);
  for (size_t i = 0; i < jobs.size(); i += 4) jobs[i].skipped = "too long";
  auto recorded = [](size_t i) { return i % 4 == 1; };
  const auto owner = assign_shares(jobs, 3, recorded);
  std::vector<Job> rest;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].skipped.empty() || recorded(i)) {
      EXPECT_EQ(owner[i], 0) << "prompt " << i;
    } else {
      rest.push_back(jobs[i]);
    }
  }
  // The others are split as if the skipped and recorded ones were not there.
  const auto rest_owner = assign_shares(rest, 3, [](size_t) { return false; });
  for (size_t i = 0, k = 0; i < jobs.size(); ++i) {
    if (jobs[i].skipped.empty() && !recorded(i)) {
      EXPECT_EQ(owner[i], rest_owner[k++]);
    }
  }
}

TEST(JobShares, WorkIsPromptPlusGeneratedTokens) {
  Job j;
  j.tokens.assign(17, 1);
  j.max_new_tokens = 5;
  EXPECT_EQ(job_work(j), 22);
}

}  // namespace
}  // namespace strata
