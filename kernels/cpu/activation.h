// Element-wise ops of a transformer layer, f32: activations (ReLU, GELU with
// exact erf, GELU tanh approximation, SiLU), SwiGLU, row softmax, residual add
// and bias add. Every op takes [n_rows, d] views with row strides in elements
// (>= d); an output may be one of the inputs (same pointer and stride).
//
// The fast ops use the approximations of vec_math.h; the *_ref ops use
// <cmath> in double. Accuracy of the fast ops (u = 2^-24, e = kExpRelErr):
//   relu, add, add_bias   exact
//   silu, swiglu          relative (|x| + 4) * u + e
//   gelu_tanh             relative (2|v| + 6) * u + e, v = sqrt(2/pi)(x + 0.044715 x^3)
//   gelu                  relative (2.5 x^2 + 8) * u + kErfcRelErr
//   softmax               see softmax_error_bound in the tests (exp and sum errors)
#pragma once

#include <cstdint>

#include "kernels/status.h"

namespace strata::cpu {

enum class Activation : uint8_t {
  kRelu,
  kGelu,      // x * Phi(x), Phi by erf (exact GELU)
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kSilu,      // x * sigmoid(x)
};

Status activation(Activation a, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                  int64_t n_rows, int64_t d);
Status activation_ref(Activation a, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                      int64_t n_rows, int64_t d);

// y = silu(gate) * up.
Status swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride, const float* up,
              int64_t up_stride, int64_t n_rows, int64_t d);
Status swiglu_ref(float* y, int64_t y_stride, const float* gate, int64_t gate_stride,
                  const float* up, int64_t up_stride, int64_t n_rows, int64_t d);

// Softmax over each row. A row of all -inf gives NaN (as PyTorch does).
Status softmax(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n_rows,
               int64_t d);
Status softmax_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n_rows,
                   int64_t d);

// y = a + b (the residual add).
Status add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
           int64_t b_stride, int64_t n_rows, int64_t d);
Status add_ref(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
               int64_t b_stride, int64_t n_rows, int64_t d);

// y[r, :] += bias[:], bias: [d].
Status add_bias(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t d);
Status add_bias_ref(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t d);

}  // namespace strata::cpu
