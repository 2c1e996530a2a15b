#include "cluster/job_shares.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace strata {

int64_t job_work(const Job& job) {
  return static_cast<int64_t>(job.tokens.size()) + job.max_new_tokens;
}

std::vector<int> assign_shares(std::span<const Job> jobs, int n_ranks,
                               const std::function<bool(size_t)>& done) {
  STRATA_ASSERT(n_ranks >= 1);
  std::vector<int> rank(jobs.size(), 0);
  std::vector<size_t> todo;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].skipped.empty() && !done(i)) todo.push_back(i);
  }
  // Largest first; equal work in input order, so the split is deterministic.
  std::stable_sort(todo.begin(), todo.end(),
                   [&](size_t a, size_t b) { return job_work(jobs[a]) > job_work(jobs[b]); });
  std::vector<int64_t> load(static_cast<size_t>(n_ranks), 0);
  for (size_t i : todo) {
    const auto least = std::min_element(load.begin(), load.end());  // first of equals
    *least += job_work(jobs[i]);
    rank[i] = static_cast<int>(least - load.begin());
  }
  return rank;
}

}  // namespace strata
