// Logging through spdlog's default logger, to stderr. Levels: trace, debug,
// info, warn, error, off. Use the spdlog macros directly
// (spdlog::info("...", ...)); this header only adds set-up.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace strata {

// Sets up the stderr logger once with Strata's pattern; idempotent.
void init_logging();

// Parses a level name ("info", "debug", ...); throws Error naming the value
// when it is not one of them.
void set_log_level(std::string_view level);

}  // namespace strata
