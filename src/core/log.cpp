#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace strata {

void init_logging() {
  static bool done = false;
  if (done) return;
  done = true;
  auto logger = spdlog::stderr_color_mt("strata");
  logger->set_pattern("%^[%l]%$ %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::info);
}

void set_log_level(std::string_view level) {
  init_logging();
  auto lvl = spdlog::level::from_str(std::string(level));
  // from_str returns off for unknown names; only accept "off" when asked for.
  if (lvl == spdlog::level::off && level != "off") {
    fail("unknown log level '{}': use trace, debug, info, warn, error or off", level);
  }
  spdlog::set_level(lvl);
}

}  // namespace strata
