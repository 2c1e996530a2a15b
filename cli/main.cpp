// The strata executable: global options, subcommand dispatch, and the one
// place where exceptions become one-line messages and exit codes:
//   0 success, 1 a failure the user can fix (bad input, impossible request),
//   2 bad command line, 3 an unexpected internal error.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"

namespace strata::cli {
std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> registry;
  return registry;
}
}  // namespace strata::cli

int main(int argc, char** argv) {
  using namespace strata;
  init_logging();
  CLI::App app{
      "strata: high-throughput batch generation with large language models on one machine.\n"
      "Spreads a model over GPU, RAM and disk and streams it with overlap."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "strata 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();

  auto& registry = cli::command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const auto& a, const auto& b) { return a.order < b.order; });
  std::vector<std::pair<CLI::App*, cli::Runner>> runners;
  for (auto& spec : registry) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.description);
    runners.emplace_back(sub, spec.setup(*sub));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; any other parse error is one
    // line, like every other error, and exit status 2.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::string where = "strata";
    for (const CLI::App* sub = &app; sub;) {
      const auto subs = sub->get_subcommands();
      sub = subs.empty() ? nullptr : subs.front();
      if (sub) where += " " + sub->get_name();
    }
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::fprintf(stderr, "strata: error: %s; see '%s --help'\n", what.c_str(), where.c_str());
    return 2;
  }

  try {
    set_log_level(log_level);
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
    return 2;
  } catch (const Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "strata: error: out of memory; lower the batch size or the memory budgets\n");
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: internal error: %s\n", e.what());
    return 3;
  }
}
