// The reference activations, softmax and adds (activation.h): in double,
// one row after another; the fast kernels are checked against them.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/op_args.h"

namespace strata::cpu {

namespace {

double gelu_exact(double x) {
  return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
}

// 0.5 x (1 + tanh v) written as x / (1 + e^-2v): the same function, without
// the cancellation of 1 + tanh(v) that loses all digits for x below about -5.
double gelu_tanh_exact(double x) {
  const double v = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * v));
}

double silu_exact(double x) {
  return x / (1.0 + std::exp(-x));
}

}  // namespace

Status activation_ref(Activation a, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                      int64_t n_rows, int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      !op_args::rows_view_ok(x, x_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  double (*fn)(double) = nullptr;
  switch (a) {
    case Activation::kRelu:
      fn = [](double v) { return v > 0.0 ? v : (v != v ? v : 0.0); };
      break;
    case Activation::kGelu:
      fn = gelu_exact;
      break;
    case Activation::kGeluTanh:
      fn = gelu_tanh_exact;
      break;
    case Activation::kSilu:
      fn = silu_exact;
      break;
    default:
      return Status::kInvalidArgument;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < d; ++i)
      y[r * y_stride + i] = static_cast<float>(fn(x[r * x_stride + i]));
  }
  return Status::kOk;
}

Status swiglu_ref(float* y, int64_t y_stride, const float* gate, int64_t gate_stride,
                  const float* up, int64_t up_stride, int64_t n_rows, int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      !op_args::rows_view_ok(gate, gate_stride, n_rows, d) ||
      !op_args::rows_view_ok(up, up_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < d; ++i) {
      const double g = gate[r * gate_stride + i];
      y[r * y_stride + i] = static_cast<float>(silu_exact(g) * up[r * up_stride + i]);
    }
  }
  return Status::kOk;
}

Status softmax_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n_rows,
                   int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      !op_args::rows_view_ok(x, x_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    bool nan = false;
    double m = -INFINITY;
    for (int64_t i = 0; i < d; ++i) {
      nan = nan || std::isnan(xr[i]);
      m = std::max(m, static_cast<double>(xr[i]));
    }
    double s = 0.0;
    for (int64_t i = 0; i < d; ++i) s += std::exp(xr[i] - m);
    for (int64_t i = 0; i < d; ++i) {
      yr[i] = nan ? NAN : static_cast<float>(std::exp(xr[i] - m) / s);
    }
  }
  return Status::kOk;
}

Status add_ref(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
               int64_t b_stride, int64_t n_rows, int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      !op_args::rows_view_ok(a, a_stride, n_rows, d) ||
      !op_args::rows_view_ok(b, b_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < d; ++i) y[r * y_stride + i] = a[r * a_stride + i] + b[r * b_stride + i];
  }
  return Status::kOk;
}

Status add_bias_ref(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      (n_rows > 0 && bias == nullptr)) {
    return Status::kInvalidArgument;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < d; ++i) y[r * y_stride + i] += bias[i];
  }
  return Status::kOk;
}

}  // namespace strata::cpu
