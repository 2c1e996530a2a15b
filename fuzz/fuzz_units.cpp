// Unit and format strings of the command line: sizes (--cpu-mem, --gpu-mem,
// --disk-mem, policy budgets), compression names (--compress-kv,
// --compress-weight, policy), dtype names, and --percent: the input split at
// spaces into arguments, parsed by CLI11 as cli/offload_flags.cpp declares
// the flag (six numbers) and checked by Placement::from_percent.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/placement.h"
#include "core/units.h"
#include "fuzz_input.h"
#include "policy/policy.h"

namespace {

void percent_flag(std::string_view text) {
  std::vector<std::string> args;
  size_t at = 0;
  while (at < text.size() && args.size() < 16) {
    const size_t end = std::min(text.find(' ', at), text.size());
    if (end > at) args.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  CLI::App app("fuzz");
  std::vector<double> percent;
  app.add_option("--percent", percent, "placement")->expected(6);
  std::vector<std::string> argv = {"--percent"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::reverse(argv.begin(), argv.end());  // CLI11 takes them last first
  try {
    app.parse(argv);
  } catch (const CLI::ParseError&) {
    return;  // the program prints CLI11's message and exits
  }
  strata::fuzz::guarded([&] { (void)strata::Placement::from_percent(percent).describe(); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const std::string_view text = fuzz::as_text(data, size);
  fuzz::guarded([&] { (void)format_bytes(static_cast<double>(parse_bytes(text, "--cpu-mem"))); });
  fuzz::guarded([&] { (void)parse_compression(text, "--compress-kv"); });
  (void)dtype_from_name(text);
  percent_flag(text);
  return 0;
}
