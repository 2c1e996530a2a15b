#include "kernels/cpu/activation.h"

#include <cmath>

#include "kernels/cpu/op_args.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace strata::cpu {

namespace {

constexpr float kSqrt2OverPi = 0.797884560802865355f;
constexpr float kInvSqrt2 = 0.707106781186547524f;

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

}  // namespace

Status activation(Activation a, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                  int64_t n_rows, int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      !op_args::rows_view_ok(x, x_stride, n_rows, d)) {
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

Status swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride, const float* up,
              int64_t up_stride, int64_t n_rows, int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      !op_args::rows_view_ok(gate, gate_stride, n_rows, d) ||
      !op_args::rows_view_ok(up, up_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for_rows(n_rows, d, [&](int64_t r) {
    swiglu_row(y + r * y_stride, gate + r * gate_stride, up + r * up_stride, d);
  });
  return Status::kOk;
}

Status softmax(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n_rows,
               int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      !op_args::rows_view_ok(x, x_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for_rows(n_rows, d, [&](int64_t r) { softmax_row(y + r * y_stride, x + r * x_stride, d); });
  return Status::kOk;
}

Status add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
           int64_t b_stride, int64_t n_rows, int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      !op_args::rows_view_ok(a, a_stride, n_rows, d) ||
      !op_args::rows_view_ok(b, b_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  for_rows(n_rows, d,
           [&](int64_t r) { add_row(y + r * y_stride, a + r * a_stride, b + r * b_stride, d); });
  return Status::kOk;
}

Status add_bias(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t d) {
  if (!op_args::rows_dims_ok(n_rows, d) || !op_args::rows_view_ok(y, y_stride, n_rows, d) ||
      (n_rows > 0 && bias == nullptr)) {
    return Status::kInvalidArgument;
  }
  for_rows(n_rows, d, [&](int64_t r) { add_row(y + r * y_stride, y + r * y_stride, bias, d); });
  return Status::kOk;
}

}  // namespace strata::cpu
