// A trace of a run: one span per compute step, load and store, each on the
// queue that ran it, written as Chrome trace events (the JSON that
// chrome://tracing and Perfetto open): {"traceEvents": [{"name", "cat",
// "ph": "X", "ts", "dur", "pid", "tid", "args"}, ...]} with ts and dur in
// microseconds since the trace began and one tid per queue ("compute",
// "load", "store"), named by thread_name metadata events.
//
// Spans are recorded from several threads (compute on the caller's, loads
// and stores on the transfer queues'); thread-safe. Recording is cheap (a
// lock and a push); nothing is written until write_json().
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace strata {

class Trace {
 public:
  using Clock = std::chrono::steady_clock;

  struct Span {
    std::string name;   // "layer 3 k=1", "weights blk.4", "kv layer 2 k=0"
    std::string queue;  // "compute", "load", "store"
    std::string cat;    // "compute", "weights", "kv", "activations"
    double start_us = 0, dur_us = 0;
    uint64_t bytes = 0;  // moved by a load or store; 0 for compute
    int32_t step = -1;   // generation step, -1 when none
  };

  Trace();

  Clock::time_point origin() const { return origin_; }
  double us_since_origin(Clock::time_point t) const;

  void add(Span span);
  std::vector<Span> spans() const;
  size_t size() const;

  // The Chrome trace JSON. write_json writes it to `path` through a
  // temporary file and a rename; Error naming the path when it cannot.
  std::string to_json() const;
  void write_json(const std::string& path) const;

 private:
  Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Span> spans_;
};

}  // namespace strata
