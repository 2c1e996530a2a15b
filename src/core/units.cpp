#include "core/units.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

uint64_t parse_bytes(std::string_view text, std::string_view what) {
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  size_t n = 0;
  while (n < s.size() && (std::isdigit(static_cast<unsigned char>(s[n])) || s[n] == '.')) ++n;
  std::string_view num = s.substr(0, n);
  std::string suffix;
  for (char c : s.substr(n)) suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double value = 0;
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), value);
  if (num.empty() || ec != std::errc() || ptr != num.data() + num.size()) {
    fail("{}: '{}' is not a size; use a number with an optional unit, e.g. 16G, 512M, 1.5T", what,
         text);
  }
  double mult = 1;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else {
    const char u = suffix[0];
    std::string_view rest = std::string_view(suffix).substr(1);
    if (!(rest.empty() || rest == "B" || rest == "IB")) {
      fail("{}: unknown unit in '{}'; use K, M, G or T", what, text);
    }
    switch (u) {
      case 'K': mult = 1024.0; break;
      case 'M': mult = 1024.0 * 1024; break;
      case 'G': mult = 1024.0 * 1024 * 1024; break;
      case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
      default: fail("{}: unknown unit in '{}'; use K, M, G or T", what, text);
    }
  }
  const double bytes = value * mult;
  if (!std::isfinite(bytes) || bytes > 1.8e19) fail("{}: '{}' is too large", what, text);
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "K", "M", "G", "T", "P"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{}B", static_cast<long long>(std::llround(v)));
  if (std::fabs(v) >= 100) return fmt::format("{:.0f}{}", v, kUnits[u]);
  if (std::fabs(v) >= 10) return fmt::format("{:.1f}{}", v, kUnits[u]);
  return fmt::format("{:.2f}{}", v, kUnits[u]);
}

}  // namespace strata
