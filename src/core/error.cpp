#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace strata {

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "strata: internal error: %s:%d: assertion failed: %s%s%s\n", file, line,
               cond, msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace strata
