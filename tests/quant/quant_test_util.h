// Helpers shared by the quantization tests: the formats, deterministic random
// rows of several kinds, guarded buffers, bit-level float comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "quant/isa.h"
#include "support/guarded.h"

namespace strata::test {

inline std::vector<DType> quant_types() {
  std::vector<DType> out;
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    // Strata's block formats; the GGUF-only ones: tests/quant/test_gguf_kquants.cpp.
    if (is_quantized(static_cast<DType>(i)) && !dtype_info(static_cast<DType>(i)).dequant_only)
      out.push_back(static_cast<DType>(i));
  }
  return out;
}

inline int group_of(DType t) {
  return dtype_info(t).block_elems;
}
inline int levels_of(DType t) {
  return (1 << dtype_info(t).bits) - 1;
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The value f16 can hold nearest to v (what an f16 scale or minimum stores).
inline float f16_round(float v) {
  return f16_to_f32(f32_to_f16(v));
}

enum class RowKind {
  kUniform,    // uniform in [c - r, c + r] per group, r and c random per group
  kNormal,     // gaussian, a few outliers
  kWideRange,  // random finite bit patterns over the whole exponent range
  kSpecial,    // groups from a menu: constant, zeros of both signs, ties,
               // subnormals, huge, tiny ranges, one NaN/Inf, ...
};

inline const char* row_kind_name(RowKind k) {
  switch (k) {
    case RowKind::kUniform:
      return "uniform";
    case RowKind::kNormal:
      return "normal";
    case RowKind::kWideRange:
      return "wide_range";
    case RowKind::kSpecial:
      return "special";
  }
  return "?";
}

// n values (a multiple of group) of the given kind; deterministic in seed.
inline std::vector<float> make_row(RowKind kind, int64_t n, int group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    float* v = x.data() + g0;
    switch (kind) {
      case RowKind::kUniform: {
        const float r = std::ldexp(1.0f, static_cast<int>(rng() % 16) - 8) * (0.5f + u01(rng));
        const float c = r * (4.0f * u01(rng) - 2.0f);
        for (int j = 0; j < group; ++j) v[j] = c + r * (2.0f * u01(rng) - 1.0f);
        break;
      }
      case RowKind::kNormal: {
        std::normal_distribution<float> nd(0.0f, 0.02f);
        for (int j = 0; j < group; ++j) v[j] = nd(rng);
        if (rng() % 4 == 0) v[rng() % group] *= 40.0f;
        break;
      }
      case RowKind::kWideRange: {
        for (int j = 0; j < group; ++j) {
          uint32_t b;
          do {
            b = static_cast<uint32_t>(rng());
          } while ((b & 0x7f800000u) == 0x7f800000u);
          v[j] = float_of(b);
        }
        break;
      }
      case RowKind::kSpecial: {
        const int pick = static_cast<int>(rng() % 14);
        const float a = (u01(rng) - 0.5f) * 8.0f;
        for (int j = 0; j < group; ++j) {
          switch (pick) {
            case 0:
              v[j] = a;
              break;  // constant
            case 1:
              v[j] = (rng() & 1) ? 0.0f : -0.0f;
              break;  // zeros
            case 2:
              v[j] = static_cast<float>(static_cast<int>(rng() % 255) - 127) * 0.5f;
              break;  // ties
            case 3:
              v[j] = float_of(rng() & 0x807fffffu);
              break;  // subnormals
            case 4:
              v[j] = (u01(rng) - 0.5f) * 3e38f;
              break;  // huge
            case 5:
              v[j] = 1000.0f + u01(rng) * 1e-3f;
              break;  // tiny range, offset
            case 6:
              v[j] = (u01(rng) - 0.5f) * 2e-40f;
              break;  // tiny subnormal range
            case 7:
              v[j] = (u01(rng) - 0.5f) * 3e6f;
              break;  // beyond f16 scales
            case 8:
              v[j] = 70000.0f + u01(rng) * 5e5f;
              break;  // min beyond f16
            case 9:
              v[j] = -70000.0f - u01(rng) * 100.0f;
              break;  // all below -65504
            case 10:
              v[j] = (j % 3 == 0) ? 8.0f : -8.0f;
              break;  // |max| ties, sign
            case 11:
              v[j] = static_cast<float>(j) - 16.0f;
              break;  // ramp
            case 12:
              v[j] = u01(rng);
              break;
            default:
              v[j] = static_cast<float>(rng() % 7) * 0.25f;
              break;  // few levels
          }
        }
        if (pick == 12) {  // one non-finite value somewhere in the group
          const float bad[] = {NAN, INFINITY, -INFINITY, -NAN};
          v[rng() % group] = bad[rng() % 4];
        }
        break;
      }
    }
  }
  return x;
}

// Equal bit patterns, except that any NaN matches any NaN (NaN payloads are
// not part of the dequantizers' contract for arbitrary input bytes).
inline bool same_float(float a, float b) {
  return bits_of(a) == bits_of(b) || (std::isnan(a) && std::isnan(b));
}

inline std::string isa_param_name(const testing::TestParamInfo<QuantIsa>& info) {
  return std::string(quant_isa_name(info.param));
}

}  // namespace strata::test
