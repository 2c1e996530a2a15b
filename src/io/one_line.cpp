#include "io/one_line.h"

#include <fmt/format.h>

namespace strata {

std::string one_line(std::string_view text, size_t max_chars) {
  std::string out;
  out.reserve(text.size() < max_chars ? text.size() : max_chars + 8);
  const size_t head = max_chars / 2;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.size() > max_chars && i == head) {
      out += "...";
      i = text.size() - (max_chars - head);  // continue with the tail
    }
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace strata
