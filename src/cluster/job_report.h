// The report of a batch job run by several MPI ranks (rank_job.h): one table
// on rank 0's stdout, one JSON (--report). Each rank's own report
// (RunReport::to_json with "rank" and "host" added) is kept whole under
// "ranks"; the job's totals come first:
//   n_ranks, n_prompts, n_prompts_resumed, generated_tokens, total_s (the
//   slowest rank's), total_tokens_per_s (all generated tokens over total_s),
//   slowest_rank, balance (the time of the fastest rank that had prompts over
//   the slowest's), ranks.
#pragma once

#include <cstdio>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace strata {

// `ranks`: every rank's report, in rank order.
nlohmann::ordered_json job_report(std::span<const nlohmann::ordered_json> ranks);

// The table: a row per rank (host, prompts, tokens, seconds, tok/s, bytes
// over its links) and the job's totals.
void print_job_report(const nlohmann::ordered_json& job, std::FILE* out);

}  // namespace strata
