// Subcommand registry of the strata executable. Each cli/cmd_*.cpp registers
// one subcommand with a static Command object: its setup adds the options to
// the CLI11 subcommand and returns the function that runs it. main.cpp parses,
// runs the chosen one and is the only place that turns exceptions into
// messages and exit codes.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace strata::cli {

// Returns the process exit code.
using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App& sub)>;

struct CommandSpec {
  std::string name;
  std::string description;
  Setup setup;
  int order;  // position in --help
};

std::vector<CommandSpec>& command_registry();

struct Command {
  Command(std::string name, std::string description, int order, Setup setup) {
    command_registry().push_back(
        {std::move(name), std::move(description), std::move(setup), order});
  }
};

}  // namespace strata::cli
