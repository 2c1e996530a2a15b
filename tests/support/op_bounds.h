// Cases and derived bounds of the row ops that several suites check (the
// CPU kernels, the CUDA launchers, every Backend): written once here. Each
// bound is per element, from the dtype's unit roundoff and the data
// (support/all_close.h); the error of an implementation's exp, where one
// enters, is a parameter (the CPU's vec_math.h, CUDA's expf).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "support/all_close.h"

namespace strata::test {

// The accuracy of an activation relative to |ref| for an implementation
// whose exp and erfc are within exp_err and erfc_err (relative).
inline double activation_rel_bound(ActFn a, double x, double exp_err, double erfc_err) {
  switch (a) {
    case ActFn::kRelu:
      return 0;
    case ActFn::kSilu:
      return exp_err + 4 * kU32;
    case ActFn::kGeluTanh: {
      const double v = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
      return exp_err + (14 * std::fabs(v) + 4) * kU32;
    }
    case ActFn::kGelu:
      return erfc_err + (2.5 * x * x + 8) * kU32;
  }
  return 0;
}

// Rows of a row op: `rows` rows of `d` values, input and output rows padded
// by x_pad and y_pad elements (strides d + pad).
struct RowCase {
  int64_t rows, d, x_pad, y_pad;
};
// Odd sizes, the demo model's width, and a wide row.
inline const std::vector<RowCase> kNormCases = {{1, 1, 0, 0},   {3, 7, 3, 5},   {17, 17, 0, 1},
                                                {7, 111, 2, 0}, {5, 576, 0, 3}, {111, 989, 1, 1},
                                                {2, 4096, 0, 0}};

// rms_norm over d values, in any summation order: the sum of squares within
// (d + 1) u, the mean, + eps, sqrt (halves it), the reciprocal and two
// products add 5 u: (0.5 (d + 3) + 6) u |ref|.
inline double rms_norm_rel_bound(int64_t d) {
  return (0.5 * static_cast<double>(d + 3) + 6) * kU32;
}

// Bound for one row of layer_norm from the data (first order in u):
//   the mean is x_0 + sum(x_i - x_0) / d, so |d mean| <= (d + 2) u
//   mean|x - x_0| + u |mean|; each centred value c_i is off by
//   |d mean| + u |c_i|; the variance by 2 |d mean| mean|c| + (d + 4) u var;
//   r = 1/sqrt(var + eps) by half that relative to var + eps, plus 2 u;
//   y_i = c_i r w_i + b_i adds 3 u |y_i|; the reference's rounding u |y_i|.
inline std::vector<double> layer_norm_bound(const float* x, const float* w, const std::vector<double>& ref,
                                     int64_t d, double eps) {
  double sum = 0, sum_abs = 0;
  for (int64_t i = 0; i < d; ++i) {
    sum += x[i];
    sum_abs += std::fabs(static_cast<double>(x[i]) - x[0]);
  }
  const double mean = sum / d;
  double var = 0, mean_abs_c = 0;
  for (int64_t i = 0; i < d; ++i) {
    var += (x[i] - mean) * (x[i] - mean);
    mean_abs_c += std::fabs(x[i] - mean);
  }
  var /= d;
  mean_abs_c /= d;
  const double d_mean = (d + 2) * kU32 * sum_abs / d + kU32 * std::fabs(mean);
  const double d_var = 2 * d_mean * mean_abs_c + (d + 4) * kU32 * var;
  const double r = 1.0 / std::sqrt(var + eps);
  const double rel_r = 0.5 * d_var / (var + eps) + 2 * kU32;
  std::vector<double> tol(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) {
    const double c = std::fabs(x[i] - mean);
    const double wi = w != nullptr ? std::fabs(w[i]) : 1.0;
    tol[static_cast<size_t>(i)] = wi * r * (d_mean + kU32 * c + c * rel_r) +
                                  4 * kU32 * std::fabs(ref[static_cast<size_t>(i)]) + kTiny;
  }
  return tol;
}

// softmax per entry: exp of the shifted value within exp_err + |x - max| u,
// the sum's relative error, and 3 u for the reciprocal, product, rounding.
inline std::vector<double> softmax_bound(const std::vector<float>& x, const std::vector<double>& ref,
                                         int64_t rows, int64_t d, double exp_err) {
  std::vector<double> tol(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int64_t i = 0; i < d; ++i) m = std::max(m, static_cast<double>(x[r * d + i]));
    // Entries with ref == 0 (exp(-inf), or below f32's range) contribute nothing.
    double sum_err = (d + 1) * kU32;
    for (int64_t i = 0; i < d; ++i) {
      const double dj = exp_err + std::fabs(x[r * d + i] - m) * kU32;
      if (ref[r * d + i] > 0) sum_err += ref[r * d + i] * dj;
    }
    for (int64_t i = 0; i < d; ++i) {
      const double di = exp_err + std::fabs(x[r * d + i] - m) * kU32;
      tol[r * d + i] =
          ref[r * d + i] > 0 ? (di + sum_err + 3 * kU32) * ref[r * d + i] + kTiny : kTiny;
    }
  }
  return tol;
}

}  // namespace strata::test
