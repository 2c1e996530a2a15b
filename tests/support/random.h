// Seeded random test inputs, the same on every machine: floats uniform in a
// range, and byte patterns without a short period.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace strata::test {

inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Byte i of a pattern seeded by `seed`: no period shorter than 2^32.
inline std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<std::byte>(x >> 32);
  }
  return v;
}

}  // namespace strata::test
