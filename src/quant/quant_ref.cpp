// Reference quantizers: one scalar loop per family, written to be read next to
// the rules in quant_ref.h. Speed is not a goal here.
#include "quant/quant_ref.h"

#include "quant/gguf_blocks.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/group_params.h"

namespace strata {

namespace {

using quant_detail::GroupParams;

bool any_nonfinite(const float* x, int n) {
  for (int j = 0; j < n; ++j) {
    if (!std::isfinite(x[j])) return true;
  }
  return false;
}

bool all_equal(const float* x, int n) {
  for (int j = 1; j < n; ++j) {
    if (!(x[j] == x[0])) return false;
  }
  return true;
}

// ---- Q8S<G> ----

template <int G>
void quantize_blocks(const float* x, BlockQ8S<G>* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += G) {
    float amax = 0.0f;
    for (int j = 0; j < G; ++j) amax = std::max(amax, std::fabs(x[j]));
    const GroupParams p =
        quant_detail::params_q8s(any_nonfinite(x, G), amax, all_equal(x, G), x[0]);
    y[i].d = p.d;
    for (int j = 0; j < G; ++j) {
      int q = p.q_fixed;
      if (!p.fixed) q = static_cast<int>(std::roundf(std::clamp(x[j] * p.id, -127.0f, 127.0f)));
      y[i].qs[j] = static_cast<int8_t>(q);
    }
  }
}

template <int G>
void dequantize_blocks(const BlockQ8S<G>* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < G; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// ---- Q4S32 ----

void quantize_blocks(const float* x, BlockQ4S32* y, int64_t nb) {
  constexpr int G = 32;
  for (int64_t i = 0; i < nb; ++i, x += G) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < G; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const GroupParams p = quant_detail::params_q4s(any_nonfinite(x, G), max, all_equal(x, G), x[0]);
    y[i].d = p.d;
    uint8_t q[G];
    for (int j = 0; j < G; ++j) {
      q[j] = static_cast<uint8_t>(p.q_fixed);
      if (!p.fixed) q[j] = static_cast<uint8_t>(std::clamp(x[j] * p.id + 8.5f, 0.0f, 15.0f));
    }
    for (int j = 0; j < G / 2; ++j) y[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + G / 2] << 4));
  }
}

void dequantize_blocks(const BlockQ4S32* x, float* y, int64_t nb) {
  constexpr int G = 32;
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < G / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0f) - 8) * d;
      y[j + G / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// ---- asymmetric: Q8A<G>, Q4A<G> ----

// q[0..G) of one asymmetric group; returns the parameters.
template <int G>
GroupParams quantize_asym_group(const float* x, int levels, int* q) {
  float min = x[0];
  float max = x[0];
  for (int j = 1; j < G; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  min += 0.0f;  // a zero of either sign counts as +0
  max += 0.0f;
  const GroupParams p = quant_detail::params_asym(any_nonfinite(x, G), min, max, levels);
  for (int j = 0; j < G; ++j) {
    q[j] = p.q_fixed;
    if (!p.fixed) {
      q[j] = static_cast<int>(
          std::clamp((x[j] - p.base) * p.id + 0.5f, 0.0f, static_cast<float>(levels)));
    }
  }
  return p;
}

template <int G>
void quantize_blocks(const float* x, BlockQ8A<G>* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += G) {
    int q[G];
    const GroupParams p = quantize_asym_group<G>(x, 255, q);
    y[i].d = p.d;
    y[i].m = p.m;
    for (int j = 0; j < G; ++j) y[i].qs[j] = static_cast<uint8_t>(q[j]);
  }
}

template <int G>
void dequantize_blocks(const BlockQ8A<G>* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    for (int j = 0; j < G; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d + m;
  }
}

template <int G>
void quantize_blocks(const float* x, BlockQ4A<G>* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += G) {
    int q[G];
    const GroupParams p = quantize_asym_group<G>(x, 15, q);
    y[i].d = p.d;
    y[i].m = p.m;
    for (int j = 0; j < G / 2; ++j) y[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + G / 2] << 4));
  }
}

template <int G>
void dequantize_blocks(const BlockQ4A<G>* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += G) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    for (int j = 0; j < G / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0f) * d + m;
      y[j + G / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

int64_t n_blocks(DType t, int64_t n) {
  const auto& info = dtype_info(t);
  STRATA_ASSERT_MSG(info.quantized, "{} is not a quantized type", info.name);
  STRATA_ASSERT_MSG(row_elems_ok(t, n), "{} values are not a whole number of {} groups", n,
                    info.name);
  return n / info.block_elems;
}

}  // namespace

void quantize_row_ref(DType t, const float* x, void* y, int64_t n) {
  const int64_t nb = n_blocks(t, n);
  visit_block_type(t, [&](auto* tag) {
    using B = std::remove_pointer_t<decltype(tag)>;
    quantize_blocks(x, static_cast<B*>(y), nb);
  });
}

void dequantize_row_ref(DType t, const void* x, float* y, int64_t n) {
  if (dtype_info(t).dequant_only) return dequantize_gguf_row_ref(t, x, y, n);
  const int64_t nb = n_blocks(t, n);
  visit_block_type(t, [&](auto* tag) {
    using B = std::remove_pointer_t<decltype(tag)>;
    dequantize_blocks(static_cast<const B*>(x), y, nb);
  });
}

void dequantize_row_bf16_ref(DType t, const void* x, uint16_t* y, int64_t n) {
  const int64_t nb = n_blocks(t, n);
  const int g = dtype_info(t).block_elems;
  const size_t block_bytes = static_cast<size_t>(dtype_info(t).block_bytes);
  float tmp[256];
  for (int64_t i = 0; i < nb; ++i) {
    dequantize_row_ref(t, static_cast<const uint8_t*>(x) + i * block_bytes, tmp, g);
    for (int j = 0; j < g; ++j) y[i * g + j] = f32_to_bf16(tmp[j]);
  }
}

}  // namespace strata
