// Checksums of pack contents: 64-bit xxHash (XXH64, seed 0), one-shot and
// streaming, and its text form in manifests ("xxh64:" + 16 lowercase hex
// digits). This file is the only user of xxhash.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace strata {

uint64_t xxh64(const void* data, size_t n);
inline uint64_t xxh64(std::span<const std::byte> bytes) {
  return xxh64(bytes.data(), bytes.size());
}

// Incremental XXH64: update() over pieces equals xxh64() over their concatenation.
class Xxh64Stream {
 public:
  Xxh64Stream();
  ~Xxh64Stream();
  Xxh64Stream(Xxh64Stream&&) noexcept;
  Xxh64Stream& operator=(Xxh64Stream&&) noexcept;
  void update(const void* data, size_t n);
  void update_zeros(size_t n);  // n zero bytes (padding)
  uint64_t digest() const;
  void reset();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

std::string checksum_to_string(uint64_t h);                        // "xxh64:00ab..."
std::optional<uint64_t> checksum_from_string(std::string_view s);  // nullopt when malformed

}  // namespace strata
