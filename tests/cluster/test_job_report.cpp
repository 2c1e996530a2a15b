// The report of a job over many ranks (cluster/job_report.h): totals over
// the ranks, the slowest rank's time as the job's, every rank's report kept.
#include <gtest/gtest.h>

#include <cstdio>

#include "cluster/job_report.h"

namespace strata {
namespace {

nlohmann::ordered_json rank_report(int rank, int64_t prompts, int64_t tokens, double s,
                                   uint64_t disk_bytes) {
  nlohmann::ordered_json j;
  j["n_prompts"] = prompts;
  j["generated_tokens"] = tokens;
  j["total_s"] = s;
  j["links"]["disk->cpu"]["bytes"] = disk_bytes;
  j["rank"] = rank;
  j["host"] = "node" + std::to_string(rank);
  return j;
}

TEST(JobReport, TotalsOverRanksAndTheSlowestRanksTime) {
  const std::vector<nlohmann::ordered_json> ranks = {rank_report(0, 10, 300, 2.0, 100),
                                                     rank_report(1, 12, 340, 4.0, 200),
                                                     rank_report(2, 11, 320, 3.0, 300)};
  const auto job = job_report(ranks);
  EXPECT_EQ(job["n_ranks"], 3);
  EXPECT_EQ(job["n_prompts"], 33);
  EXPECT_EQ(job["generated_tokens"], 960);
  EXPECT_EQ(job["total_s"], 4.0);
  EXPECT_DOUBLE_EQ(job["total_tokens_per_s"].get<double>(), 960 / 4.0);
  EXPECT_EQ(job["slowest_rank"], 1);
  EXPECT_DOUBLE_EQ(job["balance"].get<double>(), 0.5);
  ASSERT_EQ(job["ranks"].size(), 3u);
  EXPECT_EQ(job["ranks"][2]["host"], "node2");

  char* text = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&text, &len);
  print_job_report(job, f);
  std::fclose(f);
  const std::string table(text, len);
  std::free(text);
  EXPECT_NE(table.find("strata report: 3 ranks"), std::string::npos) << table;
  EXPECT_NE(table.find("node1"), std::string::npos) << table;
  EXPECT_NE(table.find("slowest rank: 1"), std::string::npos) << table;
  EXPECT_NE(table.find("600B"), std::string::npos) << table;  // the job's link bytes
}

TEST(JobReport, ARankWithoutPromptsIsNotTheFastest) {
  const std::vector<nlohmann::ordered_json> ranks = {
      rank_report(0, 3, 90, 2.0, 0), rank_report(1, 0, 0, 0.001, 0), rank_report(2, 2, 60, 1.5, 0)};
  const auto job = job_report(ranks);
  EXPECT_DOUBLE_EQ(job["balance"].get<double>(), 0.75);
  EXPECT_EQ(job["slowest_rank"], 0);
}

TEST(JobReport, NoTimeNoRate) {
  const std::vector<nlohmann::ordered_json> ranks = {rank_report(0, 0, 0, 0, 0)};
  const auto job = job_report(ranks);
  EXPECT_FALSE(job.contains("total_tokens_per_s"));
  EXPECT_FALSE(job.contains("balance"));
}

}  // namespace
}  // namespace strata
