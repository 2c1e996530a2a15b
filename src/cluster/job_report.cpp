#include "cluster/job_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/units.h"

namespace strata {
namespace {

template <typename T>
T field(const nlohmann::ordered_json& j, const char* name, T fallback) {
  const auto it = j.find(name);
  return it == j.end() || it->is_null() ? fallback : it->get<T>();
}

uint64_t link_bytes(const nlohmann::ordered_json& rank) {
  uint64_t bytes = 0;
  if (const auto links = rank.find("links"); links != rank.end() && links->is_object()) {
    for (const auto& [name, link] : links->items()) bytes += field<uint64_t>(link, "bytes", 0);
  }
  return bytes;
}

}  // namespace

nlohmann::ordered_json job_report(std::span<const nlohmann::ordered_json> ranks) {
  int64_t prompts = 0, resumed = 0, tokens = 0;
  double slowest_s = 0, fastest_s = -1;
  int slowest = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    prompts += field<int64_t>(ranks[r], "n_prompts", 0);
    resumed = std::max(resumed, field<int64_t>(ranks[r], "n_prompts_resumed", 0));
    tokens += field<int64_t>(ranks[r], "generated_tokens", 0);
    const double s = field<double>(ranks[r], "total_s", 0);
    if (s > slowest_s) {
      slowest_s = s;
      slowest = static_cast<int>(r);
    }
    // A rank with no share (a short or resumed job) is not the fastest.
    if (field<int64_t>(ranks[r], "n_prompts", 0) > 0) {
      fastest_s = fastest_s < 0 ? s : std::min(fastest_s, s);
    }
  }
  nlohmann::ordered_json j;
  j["n_ranks"] = ranks.size();
  j["n_prompts"] = prompts;
  j["n_prompts_resumed"] = resumed;
  j["generated_tokens"] = tokens;
  j["total_s"] = slowest_s;
  if (slowest_s > 0) {
    j["total_tokens_per_s"] = static_cast<double>(tokens) / slowest_s;
    if (fastest_s >= 0) j["balance"] = fastest_s / slowest_s;
  }
  j["slowest_rank"] = slowest;
  j["ranks"] = nlohmann::ordered_json::array();
  for (const auto& r : ranks) j["ranks"].push_back(r);
  return j;
}

void print_job_report(const nlohmann::ordered_json& job, std::FILE* out) {
  std::fprintf(out, "strata report: %d ranks\n", field<int>(job, "n_ranks", 0));
  std::fprintf(out, "  %-5s %-20s %8s %10s %9s %11s %10s\n", "rank", "host", "prompts", "tokens",
               "total s", "tok/s", "link bytes");
  auto line = [&](const std::string& rank, const std::string& host, int64_t prompts, int64_t tokens,
                  double s, uint64_t bytes) {
    const std::string rate = s > 0 ? fmt::format("{:.1f}", static_cast<double>(tokens) / s) : "-";
    std::fprintf(out, "  %-5s %-20s %8lld %10lld %9.3f %11s %10s\n", rank.c_str(),
                 host.substr(0, 20).c_str(), static_cast<long long>(prompts),
                 static_cast<long long>(tokens), s, rate.c_str(), format_bytes(bytes).c_str());
  };
  uint64_t all_bytes = 0;
  for (const auto& r : job["ranks"]) {
    const uint64_t bytes = link_bytes(r);
    all_bytes += bytes;
    line(fmt::format("{}", field<int>(r, "rank", -1)), field<std::string>(r, "host", ""),
         field<int64_t>(r, "n_prompts", 0), field<int64_t>(r, "generated_tokens", 0),
         field<double>(r, "total_s", 0), bytes);
  }
  line("job", "", field<int64_t>(job, "n_prompts", 0), field<int64_t>(job, "generated_tokens", 0),
       field<double>(job, "total_s", 0), all_bytes);
  if (const int64_t resumed = field<int64_t>(job, "n_prompts_resumed", 0); resumed > 0) {
    std::fprintf(out, "  resumed: %lld prompts recorded by an earlier run\n",
                 static_cast<long long>(resumed));
  }
  const std::string balance =
      job.contains("balance") ? fmt::format("{:.2f}", job["balance"].get<double>()) : "-";
  std::fprintf(out, "  slowest rank: %d (the job's time); fastest/slowest %s\n",
               field<int>(job, "slowest_rank", 0), balance.c_str());
  std::fflush(out);
}

}  // namespace strata
