// Per-group quantization parameters: from a group's statistics (max |x|, the
// signed first max, min and max, whether it is constant or holds a non-finite
// value) to the f16 scale and minimum to store and the f32 numbers that map
// each x to its integer. Shared by the reference and the fast paths so that
// both apply the same rules (quant_ref.h states them); the per-element work is
// what differs between them. Internal to src/quant.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace strata::quant_detail {

inline constexpr uint16_t kF16Nan = 0x7e00;
inline constexpr uint16_t kF16Max = 0x7bff;  // 65504
inline constexpr float kF16MaxValue = 65504.0f;

// What to store for one group and how to compute each q.
//   Q8S:        q = clamp(roundf(x*id), -127, 127)
//   Q4S:        q = clamp(trunc(x*id + 8.5), 0, 15)
//   asymmetric: q = clamp(trunc((x - base)*id + 0.5), 0, L)
// unless `fixed`, in which case every q of the group is q_fixed.
struct GroupParams {
  uint16_t d = 0;  // f16 scale to store
  uint16_t m = 0;  // f16 minimum to store (asymmetric formats)
  float base = 0;  // asymmetric: subtracted before scaling
  float id = 0;    // multiplier
  bool fixed = false;
  int q_fixed = 0;  // stored integer for every element when fixed
};

inline bool f16_is_inf(uint16_t h) {
  return (h & 0x7fffu) == 0x7c00u;
}

// 1/d, or 0 when d is 0 or 1/d overflows.
inline float inverse_or_zero(float d) {
  if (d == 0.0f) return 0.0f;
  const float id = 1.0f / d;
  return std::isinf(id) ? 0.0f : id;
}

// amax = max |x|. constant: every x == v.
inline GroupParams params_q8s(bool nonfinite, float amax, bool constant, float v) {
  GroupParams p;
  if (nonfinite) {
    p.d = kF16Nan;
    p.fixed = true;
    return p;
  }
  if (constant && v != 0.0f && !f16_is_inf(f32_to_f16(v))) {
    p.d = f32_to_f16(v);
    p.fixed = true;
    p.q_fixed = 1;
    return p;
  }
  const float d = amax / 127.0f;
  p.d = f32_to_f16(d);
  if (f16_is_inf(p.d)) {
    p.d = kF16Max;
    p.id = 1.0f / kF16MaxValue;
  } else {
    p.id = inverse_or_zero(d);
  }
  return p;
}

// max = the first x of largest |x| (+0 when all are zero).
inline GroupParams params_q4s(bool nonfinite, float max, bool constant, float v) {
  GroupParams p;
  if (nonfinite) {
    p.d = kF16Nan;
    p.fixed = true;
    return p;
  }
  if (constant && v != 0.0f && !f16_is_inf(f32_to_f16(v))) {
    p.d = f32_to_f16(v);
    p.fixed = true;
    p.q_fixed = 9;
    return p;
  }
  const float d = max / -8.0f;
  p.d = f32_to_f16(d);
  if (f16_is_inf(p.d)) {
    p.d = static_cast<uint16_t>((p.d & 0x8000u) | kF16Max);
    p.id = 1.0f / f16_to_f32(p.d);
  } else {
    p.id = inverse_or_zero(d);
  }
  return p;
}

// levels = 2^bits - 1. min, max with zeros of either sign as +0.
inline GroupParams params_asym(bool nonfinite, float min, float max, int levels) {
  GroupParams p;
  if (nonfinite) {
    p.d = kF16Nan;
    p.m = kF16Nan;
    p.fixed = true;
    return p;
  }
  const float l = static_cast<float>(levels);
  const float d = (max - min) / l;
  p.d = f32_to_f16(d);
  p.m = f32_to_f16(min);
  if (!f16_is_inf(p.d) && !f16_is_inf(p.m)) {
    p.base = min;
    p.id = inverse_or_zero(d);
    return p;
  }
  // Saturated: the stored minimum and scale clip to +-65504; q is computed
  // against what is stored.
  if (f16_is_inf(p.m)) p.m = static_cast<uint16_t>((p.m & 0x8000u) | kF16Max);
  p.base = f16_to_f32(p.m);
  const float d_sat = max > p.base ? (max - p.base) / l : 0.0f;
  p.d = f32_to_f16(d_sat);
  if (f16_is_inf(p.d)) p.d = kF16Max;
  p.id = inverse_or_zero(f16_to_f32(p.d));
  return p;
}

}  // namespace strata::quant_detail
