// Errors. Three kinds of failure (see STYLE): an assertion for a broken
// invariant (STRATA_ASSERT: file, line, condition, then abort); an Error
// exception with an actionable one-line message for bad input or an impossible
// request (thrown by the library, caught only in cli/); a status code from
// kernels (kernels/status.h). Messages name the file and the value involved.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace strata {

// Bad input or an impossible request. what() is one line meant for the user.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Formats and throws an Error.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);

}  // namespace strata

// Broken invariant: a bug in Strata, not bad input. Always on.
#define STRATA_ASSERT(cond)                                                  \
  do {                                                                       \
    if (!(cond)) ::strata::assert_fail(#cond, __FILE__, __LINE__, {});       \
  } while (0)

#define STRATA_ASSERT_MSG(cond, ...)                                                  \
  do {                                                                                \
    if (!(cond)) ::strata::assert_fail(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
