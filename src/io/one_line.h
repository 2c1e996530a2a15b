// Makes text read from a file safe to put in a one-line message: names and
// keys in model files are arbitrary bytes, and an error must stay one line on
// a terminal. Control characters become escapes (\n, \x01), and very long
// text is clipped in the middle.
#pragma once

#include <string>
#include <string_view>

namespace strata {

// `text` with every byte below 0x20 and 0x7f escaped, clipped to about
// `max_chars` characters ("..." marks the cut). UTF-8 passes through.
std::string one_line(std::string_view text, size_t max_chars = 2000);

}  // namespace strata
