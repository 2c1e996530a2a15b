// Run report (report.h).
#include "generate/report.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"

namespace strata {
namespace {

std::optional<double> rate(double n, double s) {
  if (s > 0 && n >= 0) return n / s;
  return std::nullopt;
}

int64_t decode_tokens(const RunReport& r) {
  return std::max<int64_t>(0, r.engine.generated_tokens - r.n_sequences);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.2f} {}", b, units[u]);
}

}  // namespace

nlohmann::ordered_json RunReport::to_json() const {
  nlohmann::ordered_json j;
  j["model"] = model;
  if (!policy.is_null()) j["policy"] = policy;
  if (!hardware.empty()) j["hardware"] = hardware;
  j["n_prompts"] = n_prompts;
  if (n_prompts_resumed > 0) j["n_prompts_resumed"] = n_prompts_resumed;
  j["prompt_tokens"] = engine.prompt_tokens;
  j["generated_tokens"] = engine.generated_tokens;
  j["prefill_s"] = engine.prefill_s;
  j["decode_s"] = decode_s();
  if (draft_s > 0) j["draft_s"] = draft_s;
  j["total_s"] = total_s;
  if (auto v = rate(static_cast<double>(engine.prompt_tokens), engine.prefill_s)) {
    j["prefill_tokens_per_s"] = *v;
  }
  if (auto v = rate(static_cast<double>(decode_tokens(*this)), decode_s())) {
    j["decode_tokens_per_s"] = *v;
  }
  if (auto v = rate(static_cast<double>(engine.generated_tokens), total_s)) {
    j["total_tokens_per_s"] = *v;
  }
  nlohmann::ordered_json links = nlohmann::ordered_json::object();
  for (const auto& [name, l] : engine.links) {
    nlohmann::ordered_json e;
    e["bytes"] = l.bytes;
    e["busy_s"] = l.busy_s;
    if (auto v = rate(static_cast<double>(l.bytes) / 1e9, l.busy_s)) e["gb_per_s"] = *v;
    for (const auto& [kind, part] : l.by_kind) {
      nlohmann::ordered_json k;
      k["bytes"] = part.bytes;
      k["busy_s"] = part.busy_s;
      if (auto v = rate(static_cast<double>(part.bytes) / 1e9, part.busy_s)) k["gb_per_s"] = *v;
      e["by_kind"][kind] = k;
    }
    links[name] = e;
  }
  j["links"] = links;
  nlohmann::ordered_json peak = nlohmann::ordered_json::object();
  for (const auto& [tier, b] : engine.peak_bytes) peak[tier] = b;
  j["peak_bytes"] = peak;
  nlohmann::ordered_json busy = nlohmann::ordered_json::object();
  const double engine_s = engine.prefill_s + engine.decode_s;
  for (const auto& [queue, s] : engine.queue_busy_s) {
    if (engine_s > 0) busy[queue] = s / engine_s;
  }
  j["queue_busy"] = busy;
  j["decode_steps"] = engine.decode_steps;
  j["prefill_tokens_computed"] = engine.prompt_tokens - engine.reused_prompt_tokens;
  j["prefix_reused_tokens"] = engine.reused_prompt_tokens;
  j["prefix_steps"] = engine.prefix_steps;
  j["prefix_step_tokens"] = engine.prefix_step_tokens;
  j["kv_shared_bytes"] = engine.kv_shared_bytes;
  j["drafted_tokens"] = engine.drafted_tokens;
  j["accepted_tokens"] = engine.accepted_tokens;
  j["kv_attended_bytes"] = engine.kv_attended_bytes;
  j["kv_skipped_bytes"] = engine.kv_skipped_bytes;
  j["sparse_prefetch_hits"] = engine.sparse_hits;
  j["sparse_misses"] = engine.sparse_misses;
  j["sparse_prefetch_unused"] = engine.sparse_unused;
  j["sparse_stall_s"] = engine.sparse_stall_s;
  if (predicted) {
    nlohmann::ordered_json p;
    p["prefill_tokens_per_s"] = predicted->prefill_tokens_per_s;
    p["decode_tokens_per_s"] = predicted->decode_tokens_per_s;
    p["total_tokens_per_s"] = predicted->total_tokens_per_s;
    if (!predicted->bound.empty()) p["bound"] = predicted->bound;
    if (predicted->prefill_s > 0 || predicted->decode_s > 0) {
      p["block_prefill_s"] = predicted->prefill_s;
      p["block_decode_s"] = predicted->decode_s;
    }
    if (!predicted->decode_layer_terms.empty()) {
      p["prefill_layer_terms_s"] = predicted->prefill_layer_terms;
      p["decode_layer_terms_s"] = predicted->decode_layer_terms;
    }
    if (!predicted->block_busy_s.empty()) p["block_busy_s"] = predicted->block_busy_s;
    if (!predicted->workload.is_null()) p["workload"] = predicted->workload;
    if (auto e = prediction_error()) p["total_error"] = *e;
    j["predicted"] = p;
  }
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) j[k] = v;
  }
  return j;
}

std::optional<double> RunReport::prediction_error() const {
  if (!predicted || predicted->total_tokens_per_s <= 0) return std::nullopt;
  const auto measured = rate(static_cast<double>(engine.generated_tokens), total_s);
  if (!measured) return std::nullopt;
  return *measured / predicted->total_tokens_per_s - 1;
}

std::string RunReport::prediction_warning() const {
  const auto e = prediction_error();
  if (!e || std::fabs(*e) <= kPredictionTolerance) return "";
  std::string profile;
  if (predicted->workload.is_object() && predicted->workload.contains("hardware"))
    profile = fmt::format(" ({})", predicted->workload["hardware"].get<std::string>());
  return fmt::format(
      "measured total {:.1f} tok/s is {:.0f}% {} the predicted {:.1f}{}: if the hardware "
      "profile{} is old or from another machine, measure this one again (strata profile)",
      (1 + *e) * predicted->total_tokens_per_s, std::fabs(*e) * 100, *e > 0 ? "above" : "below",
      predicted->total_tokens_per_s, busy_miss(*e > 0), profile);
}

std::string RunReport::busy_miss(bool faster) const {
  if (!predicted || engine.blocks <= 0 || !(predicted->total_tokens_per_s > 0)) return "";
  // A link or queue busy for less than half the run cannot have set its
  // pace: measured so when the run was slower than predicted (a KV store's
  // latency behind the weight reads on the same disk, off the critical
  // path, can be many times its prediction), predicted so when faster.
  const double run_s =
      faster ? static_cast<double>(engine.generated_tokens) / predicted->total_tokens_per_s
             : total_s;
  std::string worst;
  double worst_excess = 0, worst_measured = 0, worst_predicted = 0;
  for (const auto& [name, block_s] : predicted->block_busy_s) {
    const double want = block_s * static_cast<double>(engine.blocks);
    if (want <= 0) continue;
    double got = 0;
    if (auto it = engine.links.find(name); it != engine.links.end()) {
      got = it->second.busy_s;
    } else if (auto q = engine.queue_busy_s.find(name); q != engine.queue_busy_s.end()) {
      got = q->second;
    } else {
      continue;  // not measured here
    }
    // Beyond the tolerance, the most seconds off in the total's direction.
    const double excess = faster ? want - got : got - want;
    if ((faster ? want : got) < kPaceShare * run_s) continue;
    if (excess > kPredictionTolerance * want && excess > worst_excess) {
      worst = name;
      worst_excess = excess;
      worst_measured = got;
      worst_predicted = want;
    }
  }
  if (worst.empty()) return "";
  return fmt::format(" ({} was busy {:.2f} s, {:.2f}x the {:.2f} s predicted)", worst,
                     worst_measured, worst_measured / worst_predicted, worst_predicted);
}

void RunReport::print(std::FILE* out) const {
  auto row = [&](std::string_view name, const std::string& value) {
    std::fprintf(out, "  %-22.*s %s\n", static_cast<int>(name.size()), name.data(), value.c_str());
  };
  auto rate_text = [](std::optional<double> v) {
    return v ? fmt::format("{:.1f} tok/s", *v) : std::string("-");
  };
  std::fprintf(out, "strata report\n");
  row("model", model);
  if (!policy.is_null()) row("policy", policy.dump());
  if (!hardware.empty()) row("hardware", hardware);
  row("prompts", n_prompts_resumed > 0
                     ? fmt::format("{} (+{} resumed)", n_prompts, n_prompts_resumed)
                     : fmt::format("{}", n_prompts));
  row("prompt tokens", fmt::format("{}", engine.prompt_tokens));
  row("generated tokens", fmt::format("{}", engine.generated_tokens));
  row("prefill",
      fmt::format("{:.3f} s  {}", engine.prefill_s,
                  rate_text(rate(static_cast<double>(engine.prompt_tokens), engine.prefill_s))));
  row("decode",
      fmt::format("{:.3f} s  {}", decode_s(),
                  rate_text(rate(static_cast<double>(decode_tokens(*this)), decode_s()))));
  row("total", fmt::format("{:.3f} s  {}", total_s,
                           rate_text(rate(static_cast<double>(engine.generated_tokens), total_s))));
  if (engine.decode_steps > 0) {
    row("decode steps", fmt::format("{}  {:.2f} tokens per weight pass", engine.decode_steps,
                                    static_cast<double>(decode_tokens(*this)) /
                                        static_cast<double>(engine.decode_steps)));
  }
  if (engine.reused_prompt_tokens > 0) {
    row("shared prefixes",
        fmt::format("{} of {} prompt tokens taken from a shared prefix ({:.1f} %), {} computed; "
                    "{} of KV not stored again",
                    engine.reused_prompt_tokens, engine.prompt_tokens,
                    100.0 * static_cast<double>(engine.reused_prompt_tokens) /
                        static_cast<double>(engine.prompt_tokens),
                    engine.prompt_tokens - engine.reused_prompt_tokens,
                    human_bytes(static_cast<double>(engine.kv_shared_bytes))));
  }
  if (engine.drafted_tokens > 0) {
    row("speculation", fmt::format("accepted {} of {} draft tokens ({:.1f} %)",
                                   engine.accepted_tokens, engine.drafted_tokens,
                                   100.0 * static_cast<double>(engine.accepted_tokens) /
                                       static_cast<double>(engine.drafted_tokens)));
  }
  if (draft_s > 0) row("draft model", fmt::format("{:.3f} s of the decode", draft_s));
  auto link_text = [](const EngineStats::LinkPart& l) {
    auto gbs = rate(static_cast<double>(l.bytes) / 1e9, l.busy_s);
    return fmt::format("{} in {:.3f} s busy  {}", human_bytes(static_cast<double>(l.bytes)),
                       l.busy_s, gbs ? fmt::format("{:.2f} GB/s", *gbs) : "-");
  };
  for (const auto& [name, l] : engine.links) {
    row("link " + name, link_text(l));
    // What moved on it, when more than one kind did.
    if (l.by_kind.size() > 1) {
      for (const auto& [kind, part] : l.by_kind) row("  " + kind, link_text(part));
    }
  }
  for (const auto& [tier, b] : engine.peak_bytes) {
    row("peak " + tier, human_bytes(static_cast<double>(b)));
  }
  const double engine_s = engine.prefill_s + engine.decode_s;
  for (const auto& [queue, s] : engine.queue_busy_s) {
    if (engine_s > 0) row("busy " + queue, fmt::format("{:.1f} %", 100.0 * s / engine_s));
  }
  if (engine.kv_skipped_bytes > 0) {
    const double all = static_cast<double>(engine.kv_attended_bytes + engine.kv_skipped_bytes);
    row("sparse attention",
        fmt::format("attended {} of {} KV bytes in decode ({:.1f} %); skipped {}",
                    human_bytes(static_cast<double>(engine.kv_attended_bytes)), human_bytes(all),
                    100.0 * static_cast<double>(engine.kv_attended_bytes) / all,
                    human_bytes(static_cast<double>(engine.kv_skipped_bytes))));
  }
  if (const uint64_t sel = engine.sparse_hits + engine.sparse_misses; sel > 0) {
    row("sparse KV from disk",
        fmt::format("{:.1f} % of selected pages prefetched ({} of {}), {} prefetched unused, "
                    "{:.3f} s waiting for the misses",
                    100.0 * static_cast<double>(engine.sparse_hits) / static_cast<double>(sel),
                    engine.sparse_hits, sel, engine.sparse_unused, engine.sparse_stall_s));
  }
  if (predicted) {
    row("predicted prefill", fmt::format("{:.1f} tok/s", predicted->prefill_tokens_per_s));
    row("predicted decode", fmt::format("{:.1f} tok/s", predicted->decode_tokens_per_s));
    row("predicted total", fmt::format("{:.1f} tok/s", predicted->total_tokens_per_s));
    if (!predicted->bound.empty()) row("predicted bound", predicted->bound);
    if (const std::string w = prediction_warning(); !w.empty()) row("prediction", w);
  }
  std::fflush(out);
}

void RunReport::write_json(const std::string& path) const {
  write_file_atomically(
      path, to_json().dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n",
      "the report");
}

SpeculationRates measured_speculation(const EngineStats& s, int64_t n_sequences, double draft_s) {
  const int64_t kept = s.generated_tokens - n_sequences;  // tokens of decode steps
  const int64_t seq_steps = kept - s.accepted_tokens;
  if (s.drafted_tokens == 0 || seq_steps <= 0) return {};
  const auto steps = static_cast<double>(seq_steps);
  return {(steps + static_cast<double>(s.drafted_tokens)) / steps,
          static_cast<double>(kept) / steps,
          s.decode_steps > 0 ? draft_s / static_cast<double>(s.decode_steps) : 0};
}

SharingRates measured_sharing(const EngineStats& s, int64_t n_sequences) {
  if (s.prefix_steps <= 0 || n_sequences <= 0 || s.blocks <= 0) return {};
  const auto steps = static_cast<double>(s.prefix_steps);
  SharingRates r;
  r.shared_tokens = static_cast<double>(s.reused_prompt_tokens + s.prefix_step_tokens) /
                    static_cast<double>(n_sequences);
  r.prefix_step_tokens = static_cast<double>(s.prefix_step_tokens) / steps;
  r.prefix_steps = steps / static_cast<double>(s.blocks);
  return r;
}

EngineStats stats_since(const EngineStats& now, const EngineStats& before) {
  EngineStats d = now;
  d.prefill_s -= before.prefill_s;
  d.decode_s -= before.decode_s;
  d.prompt_tokens -= before.prompt_tokens;
  d.generated_tokens -= before.generated_tokens;
  d.decode_steps -= before.decode_steps;
  d.reused_prompt_tokens -= before.reused_prompt_tokens;
  d.blocks -= before.blocks;
  d.prefix_steps -= before.prefix_steps;
  d.prefix_step_tokens -= before.prefix_step_tokens;
  d.kv_shared_bytes -= std::min(d.kv_shared_bytes, before.kv_shared_bytes);
  d.drafted_tokens -= before.drafted_tokens;
  d.accepted_tokens -= before.accepted_tokens;
  d.kv_attended_bytes -= std::min(d.kv_attended_bytes, before.kv_attended_bytes);
  d.kv_skipped_bytes -= std::min(d.kv_skipped_bytes, before.kv_skipped_bytes);
  d.sparse_hits -= std::min(d.sparse_hits, before.sparse_hits);
  d.sparse_misses -= std::min(d.sparse_misses, before.sparse_misses);
  d.sparse_unused -= std::min(d.sparse_unused, before.sparse_unused);
  d.sparse_stall_s -= before.sparse_stall_s;
  for (auto& [name, l] : d.links) {
    auto it = before.links.find(name);
    if (it == before.links.end()) continue;
    l.bytes -= std::min(l.bytes, it->second.bytes);
    l.busy_s -= it->second.busy_s;
    for (auto& [kind, part] : l.by_kind) {
      auto was = it->second.by_kind.find(kind);
      if (was == it->second.by_kind.end()) continue;
      part.bytes -= std::min(part.bytes, was->second.bytes);
      part.busy_s -= was->second.busy_s;
    }
  }
  for (auto& [queue, s] : d.queue_busy_s) {
    auto it = before.queue_busy_s.find(queue);
    if (it != before.queue_busy_s.end()) s -= it->second;
  }
  return d;
}

std::string describe_cpu(int threads) {
  std::ifstream f("/proc/cpuinfo");
  std::string line, name;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        name = line.substr(colon + 1);
        const size_t b = name.find_first_not_of(' ');
        name = b == std::string::npos ? "" : name.substr(b);
      }
      break;
    }
  }
  if (name.empty()) return {};
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  return fmt::format("{} ({} threads)", name, threads);
}

}  // namespace strata
