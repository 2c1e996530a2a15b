#include "kernels/cpu/norm.h"

#include <cmath>

#include "kernels/cpu/op_args.h"
#include "kernels/cpu/parallel.h"

namespace strata::cpu {

namespace {

// Sums in f32 with the vector lanes as independent partial sums.
STRATA_CLONES void rms_norm_row(float* y, const float* x, const float* w, float eps, int64_t d) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) ss += x[i] * x[i];
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
  if (w != nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) y[i] = x[i] * r * w[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) y[i] = x[i] * r;
  }
}

// Two passes (mean, then the centred sum of squares) so that a large mean
// does not cancel the variance away; the mean sums x - x[0], so its error
// scales with the spread of the row, not with its magnitude.
STRATA_CLONES void layer_norm_row(float* y, const float* x, const float* w, const float* b,
                                  float eps, int64_t d) {
  const float x0 = x[0];
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += x[i] - x0;
  const float mean = x0 + s / static_cast<float>(d);
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) {
    float v = (x[i] - mean) * r;
    if (w != nullptr) v *= w[i];
    if (b != nullptr) v += b[i];
    y[i] = v;
  }
}

}  // namespace

Status rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                float eps, int64_t n_rows, int64_t d) {
  if (Status s = op_args::norm(y, y_stride, x, x_stride, eps, n_rows, d); s != Status::kOk)
    return s;
#pragma omp parallel for schedule(static) num_threads(threads_for(n_rows* d))
  for (int64_t r = 0; r < n_rows; ++r) rms_norm_row(y + r * y_stride, x + r * x_stride, w, eps, d);
  return Status::kOk;
}

Status layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                  const float* b, float eps, int64_t n_rows, int64_t d) {
  if (Status s = op_args::norm(y, y_stride, x, x_stride, eps, n_rows, d); s != Status::kOk)
    return s;
#pragma omp parallel for schedule(static) num_threads(threads_for(n_rows* d))
  for (int64_t r = 0; r < n_rows; ++r) {
    layer_norm_row(y + r * y_stride, x + r * x_stride, w, b, eps, d);
  }
  return Status::kOk;
}

}  // namespace strata::cpu
