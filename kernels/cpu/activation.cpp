#include "kernels/cpu/activation.h"

#include <cmath>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace strata::cpu {

namespace {

constexpr float kSqrt2OverPi = 0.797884560802865355f;
constexpr float kInvSqrt2 = 0.707106781186547524f;

bool view_ok(const float* p, int64_t stride, int64_t n_rows, int64_t d) {
  return n_rows == 0 || (p != nullptr && stride >= d);
}

bool dims_ok(int64_t n_rows, int64_t d) {
  return n_rows >= 0 && d >= 0;
}

STRATA_CLONES void relu_row(float* y, const float* x, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] > 0.0f ? x[i] : (x[i] != x[i] ? x[i] : 0.0f);
}

STRATA_CLONES void silu_row(float* y, const float* x, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] / (1.0f + exp_fast(-x[i]));
}

// 0.5 (1 + tanh(v)) == sigmoid(2v): no cancellation for negative x.
STRATA_CLONES void gelu_tanh_row(float* y, const float* x, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) {
    const float v = kSqrt2OverPi * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
    y[i] = x[i] / (1.0f + exp_fast(-2.0f * v));
  }
}

// Phi(x) = erfc(-x / sqrt 2) / 2: relative accuracy in the negative tail.
STRATA_CLONES void gelu_row(float* y, const float* x, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] = 0.5f * x[i] * erfc_fast(-x[i] * kInvSqrt2);
}

STRATA_CLONES void swiglu_row(float* y, const float* g, const float* u, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] = g[i] / (1.0f + exp_fast(-g[i])) * u[i];
}

STRATA_CLONES void softmax_row(float* y, const float* x, int64_t d) {
  float m = -__builtin_inff();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < d; ++i) m = x[i] > m ? x[i] : m;
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) {
    const float e = exp_fast(x[i] - m);
    y[i] = e;
    s += e;
  }
  const float inv = 1.0f / s;
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] *= inv;
}

STRATA_CLONES void add_row(float* y, const float* a, const float* b, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] = a[i] + b[i];
}

template <typename RowFn>
void for_rows(int64_t n_rows, int64_t d, RowFn fn) {
#pragma omp parallel for schedule(static) num_threads(threads_for(n_rows* d))
  for (int64_t r = 0; r < n_rows; ++r) fn(r);
}

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

Status activation(Activation a, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                  int64_t n_rows, int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) || !view_ok(x, x_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  void (*row)(float*, const float*, int64_t) = nullptr;
  switch (a) {
    case Activation::kRelu:
      row = relu_row;
      break;
    case Activation::kGelu:
      row = gelu_row;
      break;
    case Activation::kGeluTanh:
      row = gelu_tanh_row;
      break;
    case Activation::kSilu:
      row = silu_row;
      break;
    default:
      return Status::kInvalidArgument;
  }
  for_rows(n_rows, d, [&](int64_t r) { row(y + r * y_stride, x + r * x_stride, d); });
  return Status::kOk;
}

Status activation_ref(Activation a, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                      int64_t n_rows, int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) || !view_ok(x, x_stride, n_rows, d)) {
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

Status swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride, const float* up,
              int64_t up_stride, int64_t n_rows, int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) ||
      !view_ok(gate, gate_stride, n_rows, d) || !view_ok(up, up_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for_rows(n_rows, d, [&](int64_t r) {
    swiglu_row(y + r * y_stride, gate + r * gate_stride, up + r * up_stride, d);
  });
  return Status::kOk;
}

Status swiglu_ref(float* y, int64_t y_stride, const float* gate, int64_t gate_stride,
                  const float* up, int64_t up_stride, int64_t n_rows, int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) ||
      !view_ok(gate, gate_stride, n_rows, d) || !view_ok(up, up_stride, n_rows, d)) {
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

Status softmax(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n_rows,
               int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) || !view_ok(x, x_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for_rows(n_rows, d, [&](int64_t r) { softmax_row(y + r * y_stride, x + r * x_stride, d); });
  return Status::kOk;
}

Status softmax_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n_rows,
                   int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) || !view_ok(x, x_stride, n_rows, d)) {
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

Status add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
           int64_t b_stride, int64_t n_rows, int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) || !view_ok(a, a_stride, n_rows, d) ||
      !view_ok(b, b_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for_rows(n_rows, d,
           [&](int64_t r) { add_row(y + r * y_stride, a + r * a_stride, b + r * b_stride, d); });
  return Status::kOk;
}

Status add_ref(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
               int64_t b_stride, int64_t n_rows, int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) || !view_ok(a, a_stride, n_rows, d) ||
      !view_ok(b, b_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < d; ++i) y[r * y_stride + i] = a[r * a_stride + i] + b[r * b_stride + i];
  }
  return Status::kOk;
}

Status add_bias(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) || (n_rows > 0 && bias == nullptr)) {
    return Status::kInvalidArgument;
  }
  for_rows(n_rows, d, [&](int64_t r) { add_row(y + r * y_stride, y + r * y_stride, bias, d); });
  return Status::kOk;
}

Status add_bias_ref(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t d) {
  if (!dims_ok(n_rows, d) || !view_ok(y, y_stride, n_rows, d) || (n_rows > 0 && bias == nullptr)) {
    return Status::kInvalidArgument;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < d; ++i) y[r * y_stride + i] += bias[i];
  }
  return Status::kOk;
}

}  // namespace strata::cpu
