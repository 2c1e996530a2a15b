// The benchmark harness (bench.h).
#include "core/bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

Spread spread_of(std::vector<double> t) {
  STRATA_ASSERT(!t.empty());
  std::sort(t.begin(), t.end());
  const size_t h = t.size() / 2;
  return {t.size() % 2 == 1 ? t[h] : 0.5 * (t[h - 1] + t[h]), t.front(), t.back()};
}

RunTimes time_runs(const std::function<void()>& body, const TimingPlan& plan) {
  STRATA_ASSERT(plan.min_reps >= 1 && plan.max_reps >= plan.min_reps && plan.warmup >= 0);
  for (int i = 0; i < plan.warmup; ++i) body();
  std::vector<double> t;
  const double cpu0 = process_cpu_seconds();
  const auto start = Clock::now();
  while (static_cast<int>(t.size()) < plan.min_reps ||
         (seconds_since(start) < plan.min_seconds && static_cast<int>(t.size()) < plan.max_reps)) {
    const auto t0 = Clock::now();
    const double c0 = plan.cpu_time_threads > 0 ? process_cpu_seconds() : 0;
    body();
    t.push_back(plan.cpu_time_threads > 0 ? (process_cpu_seconds() - c0) / plan.cpu_time_threads
                                          : seconds_since(t0));
  }
  RunTimes r;
  r.wall_s = seconds_since(start);
  r.cpu_s = process_cpu_seconds() - cpu0;
  r.n = static_cast<int>(t.size());
  const Spread s = spread_of(std::move(t));
  r.median = s.median;
  r.lo = s.lo;
  r.hi = s.hi;
  if (!(r.lo > 0) || !std::isfinite(r.hi)) {
    fail("a measured run took {} s; the clock cannot time it", r.lo);
  }
  return r;
}

// ---- the machine ----

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string build_commit() {
#ifdef STRATA_GIT_COMMIT
  const std::string c = STRATA_GIT_COMMIT;
  if (!c.empty()) return c;
#endif
  return "unknown";
}

std::string bench_banner(const std::string& what) {
  char date[32] = {};
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string load = "?";
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  if (f >> a >> b >> c) load = fmt::format("{:.2f} {:.2f} {:.2f}", a, b, c);
  return fmt::format("# strata {}  {}  commit {}\n# {}  {} cores  load {}\n", what, date,
                     build_commit(), cpu_model_name(), ::sysconf(_SC_NPROCESSORS_ONLN), load);
}

std::string vs_ceiling(double value, double ceiling, const char* f) {
  const std::string v = fmt::format(fmt::runtime(f), value);
  if (!(ceiling > 0)) return v;
  return fmt::format("{} ({:.0f}% of {})", v, 100 * value / ceiling, fmt::format(fmt::runtime(f), ceiling));
}

}  // namespace strata
