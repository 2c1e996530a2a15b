// What the attention benchmarks share (bench_attention.cpp over f16/bf16/f32
// pages, bench_attention_quant.cpp over quantized ones): the model shape and
// run flags on the command line, the timing, and the machine's read
// bandwidth, the ceiling of a decode step that streams its KV from RAM.
#pragma once

#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>

#include <CLI/CLI.hpp>

#include "core/bench.h"

namespace strata::bench {

// A model's attention shape and the run's sizes, with the flags that set
// them (SmolLM2-135M's shape by default).
struct AttentionShape {
  int64_t n_seq = 32, ctx = 160, n_layer = 30, n_head = 9, n_kv = 3, hd = 64;
  int reps = 15;

  void add_flags(CLI::App& app) {
    app.add_option("--seqs", n_seq, "Sequences")->check(CLI::PositiveNumber);
    app.add_option("--ctx", ctx, "Keys per sequence")->check(CLI::PositiveNumber);
    app.add_option("--layers", n_layer, "Layers (each with KV of its own)")->check(CLI::PositiveNumber);
    app.add_option("--heads", n_head, "Query heads")->check(CLI::PositiveNumber);
    app.add_option("--kv-heads", n_kv, "KV heads")->check(CLI::PositiveNumber);
    app.add_option("--head-dim", hd, "Head dimension")->check(CLI::PositiveNumber);
    app.add_option("--reps", reps, "Measured runs")->check(CLI::PositiveNumber);
    app.add_option_function<int>(
        "--threads", [](int n) { omp_set_num_threads(n); }, "OpenMP threads (default: all)")
        ->check(CLI::PositiveNumber);
  }
};

// Two warm-up runs, then `reps` runs (core/bench.h); with
// STRATA_BENCH_CPU_TIME=1 a run's time is the process CPU time divided by
// the thread count (steadier on a machine shared with other work).
inline RunTimes time_it(int reps, const std::function<void()>& fn) {
  static const bool use_cpu = std::getenv("STRATA_BENCH_CPU_TIME") != nullptr;
  return time_runs(fn, {2, reps, reps, 0, use_cpu ? omp_get_max_threads() : 0});
}

// Bytes per second all threads read summing a 512 MiB buffer (best of reps).
inline double read_bandwidth(int reps) {
  const size_t bytes = size_t{512} << 20;
  auto* a = static_cast<int64_t*>(std::aligned_alloc(64, bytes));
  std::memset(a, 1, bytes);
  volatile int64_t sink = 0;
  const RunTimes st = time_it(reps, [&] {
    int64_t s = 0;
#pragma omp parallel for reduction(+ : s)
    for (size_t i = 0; i < bytes / 8; ++i) s += a[i];
    sink = sink + s;
  });
  std::free(a);
  return static_cast<double>(bytes) / st.lo;
}

}  // namespace strata::bench
