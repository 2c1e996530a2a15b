// XXH64 through libxxhash, and its "xxh64:<16 hex digits>" text form.
#include "offload/checksum.h"

#include <xxhash.h>

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

namespace strata {

uint64_t xxh64(const void* data, size_t n) {
  return XXH64(data, n, 0);
}

struct Xxh64Stream::State {
  XXH64_state_t* st = nullptr;
  State() : st(XXH64_createState()) {
    if (!st) throw std::bad_alloc();
    XXH64_reset(st, 0);
  }
  ~State() { XXH64_freeState(st); }
};

Xxh64Stream::Xxh64Stream() : s_(std::make_unique<State>()) {}
Xxh64Stream::~Xxh64Stream() = default;
Xxh64Stream::Xxh64Stream(Xxh64Stream&&) noexcept = default;
Xxh64Stream& Xxh64Stream::operator=(Xxh64Stream&&) noexcept = default;

void Xxh64Stream::update(const void* data, size_t n) {
  STRATA_ASSERT(s_);
  XXH64_update(s_->st, data, n);
}

void Xxh64Stream::update_zeros(size_t n) {
  static const std::byte kZeros[4096] = {};
  while (n > 0) {
    const size_t k = std::min(n, sizeof(kZeros));
    update(kZeros, k);
    n -= k;
  }
}

uint64_t Xxh64Stream::digest() const {
  STRATA_ASSERT(s_);
  return XXH64_digest(s_->st);
}

void Xxh64Stream::reset() {
  STRATA_ASSERT(s_);
  XXH64_reset(s_->st, 0);
}

std::string checksum_to_string(uint64_t h) {
  return fmt::format("xxh64:{:016x}", h);
}

std::optional<uint64_t> checksum_from_string(std::string_view s) {
  constexpr std::string_view kPrefix = "xxh64:";
  if (!s.starts_with(kPrefix) || s.size() != kPrefix.size() + 16) return std::nullopt;
  uint64_t h = 0;
  for (char c : s.substr(kPrefix.size())) {
    int v;
    if (c >= '0' && c <= '9')
      v = c - '0';
    else if (c >= 'a' && c <= 'f')
      v = c - 'a' + 10;
    else
      return std::nullopt;
    h = (h << 4) | static_cast<uint64_t>(v);
  }
  return h;
}

}  // namespace strata
