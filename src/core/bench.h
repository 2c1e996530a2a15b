// The harness every benchmark program (and `strata profile`) times with:
// warm-up runs, then repeats until both a count and a duration are reached,
// keeping the median and the spread; the line that says which machine and
// commit a benchmark ran on; and a measured rate printed beside its
// ceiling. A number without its ceiling says little.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace strata {

// How often to run a measured body: `warmup` untimed runs, then timed runs
// until both `min_reps` runs and `min_seconds` have passed (at most max_reps).
struct TimingPlan {
  int warmup = 1;
  int min_reps = 3;
  int max_reps = 100;
  double min_seconds = 0.2;
  // > 0: a run's time is the process's CPU seconds divided by this many
  // threads instead of wall time (steadier on a machine shared with other
  // work, as long as the threads do not wait on each other).
  int cpu_time_threads = 0;
};

// Seconds per run of a repeated measurement: median, fastest, slowest; and
// the wall and CPU time (all threads of the process) of the timed runs, whose
// ratio shows whether other processes took the cores meanwhile.
struct RunTimes {
  double median = 0, lo = 0, hi = 0;
  int n = 0;
  double wall_s = 0, cpu_s = 0;
  // `amount` (bytes, FLOPs) per second at the median, the slowest and the
  // fastest run.
  double rate(double amount) const { return amount / median; }
  double rate_lo(double amount) const { return amount / hi; }
  double rate_hi(double amount) const { return amount / lo; }
};

// Median (the mean of the middle two of an even count), smallest and largest
// of repeated samples, for measurements that are not timed bodies (rates read
// off a tool, interleaved runs). `samples` must not be empty.
struct Spread {
  double median = 0, lo = 0, hi = 0;
};
Spread spread_of(std::vector<double> samples);

// Times `body` as `plan` says. Error when the clock cannot time it.
RunTimes time_runs(const std::function<void()>& body, const TimingPlan& plan);

// CPU seconds this process has used (all threads, user and system).
double process_cpu_seconds();

// The CPU's model name ("AMD EPYC 9454"), from /proc/cpuinfo; "unknown CPU".
std::string cpu_model_name();
// The commit Strata was built from ("6bd00e0"), or "unknown".
std::string build_commit();

// "# strata <what>  <UTC date>  commit <c>\n# <cpu>  <n> cores  load <1 5 15>\n":
// the first lines of every benchmark's output.
std::string bench_banner(const std::string& what);
// "12.3 (81% of 15.2)": a measured value beside its ceiling.
std::string vs_ceiling(double value, double ceiling, const char* fmt = "{:.3g}");

}  // namespace strata
