// Seeded random test inputs, the same on every machine: floats uniform in a
// range, and byte patterns without a short period.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"

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

// A row of k values of a GGUF-only (read-only) format: random bytes, with
// every scale and minimum field set to a random finite value of about
// 0.02, so the values are finite and of moderate size (the formats have no
// quantizer to make them from floats). `row` holds row_bytes(t, k) bytes.
inline void random_gguf_row(DType t, void* row, int64_t k, uint32_t seed) {
  const auto& info = dtype_info(t);
  const size_t bytes = static_cast<size_t>(info.block_bytes);
  const auto raw = pattern(row_bytes(t, k), seed);
  std::memcpy(row, raw.data(), raw.size());
  std::vector<size_t> f16_fields;
  switch (t) {
    case DType::kQ5_0:
      f16_fields = {0};
      break;
    case DType::kQ5_1:
      f16_fields = {0, 2};
      break;
    case DType::kQ2_K:
      f16_fields = {80, 82};
      break;
    case DType::kQ3_K:
      f16_fields = {108};
      break;
    case DType::kQ4_K:
    case DType::kQ5_K:
      f16_fields = {0, 2};
      break;
    case DType::kQ6_K:
      f16_fields = {208};
      break;
    default:
      break;
  }
  const auto scales = random_floats(row_bytes(t, k) / bytes * 2, -0.03f, 0.03f, seed + 7);
  for (size_t b = 0; b * bytes < row_bytes(t, k); ++b) {
    auto* block = static_cast<uint8_t*>(row) + b * bytes;
    if (t == DType::kQ8_K) {
      std::memcpy(block, &scales[2 * b], 4);
      continue;
    }
    for (size_t f = 0; f < f16_fields.size(); ++f) {
      const uint16_t h = f32_to_f16(scales[2 * b + f]);
      std::memcpy(block + f16_fields[f], &h, 2);
    }
  }
}

}  // namespace strata::test
