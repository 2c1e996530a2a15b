// Chrome trace events (trace.h).
#include "offload/trace.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"

namespace strata {

Trace::Trace() : origin_(Clock::now()) {}

double Trace::us_since_origin(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

void Trace::add(Span span) {
  std::lock_guard lk(mu_);
  spans_.push_back(std::move(span));
}

std::vector<Trace::Span> Trace::spans() const {
  std::lock_guard lk(mu_);
  return spans_;
}

size_t Trace::size() const {
  std::lock_guard lk(mu_);
  return spans_.size();
}

std::string Trace::to_json() const {
  const std::vector<Span> spans = this->spans();
  // One tid per queue, in a fixed order so traces of different runs line up.
  std::map<std::string, int> tid = {{"compute", 1}, {"load", 2}, {"store", 3}};
  for (const Span& s : spans) {
    if (!tid.count(s.queue)) {
      const int next = static_cast<int>(tid.size()) + 1;
      tid[s.queue] = next;
    }
  }
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (const auto& [queue, id] : tid) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"tid", id},
                      {"args", {{"name", queue}}}});
  }
  for (const Span& s : spans) {
    nlohmann::ordered_json e;
    e["name"] = s.name;
    e["cat"] = s.cat;
    e["ph"] = "X";
    e["ts"] = s.start_us;
    e["dur"] = s.dur_us;
    e["pid"] = 1;
    e["tid"] = tid.at(s.queue);
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    if (s.step >= 0) args["step"] = s.step;
    if (s.bytes > 0) {
      args["bytes"] = s.bytes;
      if (s.dur_us > 0) args["gb_per_s"] = static_cast<double>(s.bytes) / (s.dur_us * 1e3);
    }
    e["args"] = args;
    events.push_back(std::move(e));
  }
  nlohmann::ordered_json j;
  j["traceEvents"] = events;
  j["displayTimeUnit"] = "ms";
  return j.dump(1);
}

void Trace::write_json(const std::string& path) const {
  write_file_atomically(path, to_json() + "\n", "the trace");
}

}  // namespace strata
