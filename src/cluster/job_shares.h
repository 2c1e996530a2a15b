// How the prompts of one batch job are split between the ranks of an MPI
// job (cluster/mpi_world.h): every rank computes the same split from the same
// jobs, so no list is sent.
//
// The prompts still to compute (not recorded by an earlier, interrupted run
// and not skipped) go, largest first, each to the rank with the least work
// so far (ties: the lowest rank); a prompt's work is its prompt tokens plus
// the tokens it may generate. The driver then sorts each rank's share into
// blocks as in one process.
// Skipped prompts and recorded ones belong to rank 0 (it writes the output).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "generate/driver.h"

namespace strata {

// The rank of each job (by position in `jobs`), for `n_ranks` ranks.
// `done(i)`: job i is recorded already.
std::vector<int> assign_shares(std::span<const Job> jobs, int n_ranks,
                               const std::function<bool(size_t)>& done);

// The work of one job in the split: prompt tokens + max_new_tokens.
int64_t job_work(const Job& job);

}  // namespace strata
