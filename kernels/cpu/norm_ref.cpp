// The reference RMS and layer norms (norm.h): in double, one row after
// another; the fast kernels are checked against them.
#include <cmath>

#include "kernels/cpu/norm.h"
#include "kernels/cpu/op_args.h"

namespace strata::cpu {

Status rms_norm_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                    float eps, int64_t n_rows, int64_t d) {
  if (Status s = op_args::norm(y, y_stride, x, x_stride, eps, n_rows, d); s != Status::kOk)
    return s;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) {
      yr[i] = static_cast<float>(xr[i] * inv * (w != nullptr ? w[i] : 1.0));
    }
  }
  return Status::kOk;
}

Status layer_norm_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                      const float* b, float eps, int64_t n_rows, int64_t d) {
  if (Status s = op_args::norm(y, y_stride, x, x_stride, eps, n_rows, d); s != Status::kOk)
    return s;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    double s = 0.0;
    for (int64_t i = 0; i < d; ++i) s += xr[i];
    const double mean = s / static_cast<double>(d);
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) {
      double v = (xr[i] - mean) * inv;
      if (w != nullptr) v *= w[i];
      if (b != nullptr) v += b[i];
      yr[i] = static_cast<float>(v);
    }
  }
  return Status::kOk;
}

}  // namespace strata::cpu
