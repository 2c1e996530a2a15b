// Human units for byte budgets and sizes: "16G", "1.5T", "200GB", "512MiB",
// "4096". K, M, G, T are powers of 1024 (with or without a trailing B or iB).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

// Parses a byte count; throws Error naming `what` (e.g. "--gpu-mem") and the
// text when it is not a non-negative size.
uint64_t parse_bytes(std::string_view text, std::string_view what = "size");

// "0B", "812B", "3.4K", "21.3G", "1.50T": three significant digits.
std::string format_bytes(double bytes);

}  // namespace strata
