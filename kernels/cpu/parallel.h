// How the CPU kernels use OpenMP. There is one thread budget: the OpenMP
// thread count of the calling thread (omp_get_max_threads(), set with
// OMP_NUM_THREADS or omp_set_num_threads). Our parallel regions use at most
// that many threads, and oneDNN (built on the same GNU OpenMP runtime) reads
// the same number, so the two never run more threads than the budget:
//   - oneDNN calls made outside our regions use the whole budget;
//   - oneDNN calls made inside our regions run single-threaded (oneDNN does
//     not nest), and the primitives they use are created single-threaded
//     (ScopedOmpThreads(1)) so that their work split matches.
// A caller that drives the kernels from several host threads at once gives
// each of them a share of the budget with omp_set_num_threads.
// The budget should not exceed the cores that are actually free: when another
// busy thread shares a core with a team, every region waits for the
// descheduled member (a scheduler tick, measured 4-8 ms per region here), and
// GNU OpenMP's spinning at barriers makes it worse (OMP_WAIT_POLICY=passive
// helps; the variable is read when the runtime loads, so it belongs in the
// environment of the process).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/clones.h"  // STRATA_CLONES, used with the kernels' row functions

namespace strata::cpu {

// Threads worth starting for `work` units of work (elements touched, roughly)
// when one thread should get at least `min_work`; 1 for small inputs, where
// waking a team costs more than it saves.
inline int threads_for(int64_t work, int64_t min_work = int64_t{1} << 15) {
  const int64_t budget = omp_get_max_threads();
  const int64_t useful = std::max<int64_t>(1, work / std::max<int64_t>(1, min_work));
  return static_cast<int>(std::min(budget, useful));
}

// Sets the calling thread's OpenMP thread count for a scope and restores it.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

// Static split of [0, n) over n_parts: part i gets [begin, end).
inline void split_range(int64_t n, int64_t n_parts, int64_t i, int64_t* begin, int64_t* end) {
  const int64_t base = n / n_parts;
  const int64_t extra = n % n_parts;
  *begin = i * base + std::min(i, extra);
  *end = *begin + base + (i < extra ? 1 : 0);
}

}  // namespace strata::cpu
