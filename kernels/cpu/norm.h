// Row normalisations: RMSNorm (Llama) and LayerNorm (OPT), f32 in and out.
// x and y are [n_rows, d] with row strides in elements (>= d); y may be x
// (same pointer and stride) for in-place use, any other overlap is not
// allowed. Norm weights are f32 ([d]); converting f16/bf16 weights is the
// caller's job. The *_ref functions are the scalar double-precision
// definitions the fast ones are tested against.
#pragma once

#include <cstdint>

#include "kernels/status.h"

namespace strata::cpu {

// y = x / sqrt(mean(x^2) + eps) * w; w may be null (no scale).
Status rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                float eps, int64_t n_rows, int64_t d);
Status rms_norm_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                    float eps, int64_t n_rows, int64_t d);

// y = (x - mean) / sqrt(var + eps) * w + b (biased variance); w and b may be null.
Status layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                  const float* b, float eps, int64_t n_rows, int64_t d);
Status layer_norm_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                      const float* b, float eps, int64_t n_rows, int64_t d);

}  // namespace strata::cpu
