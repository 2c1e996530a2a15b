// The scalar variant: the reference (de)quantizers themselves and element by
// element loops over core's conversions. Used where no vector variant is
// supported, and the yardstick the others are tested against.
#include "core/dtype.h"
#include "quant/isa.h"
#include "quant/quant_ref.h"

namespace strata::quant_detail {

namespace {

void f16_to_f32_scalar(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(x[i]);
}
void f32_to_f16_scalar(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}
void bf16_to_f32_scalar(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}
void f32_to_bf16_scalar(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

}  // namespace

const QuantKernels& kernels_scalar() {
  static const QuantKernels k = {
      QuantIsa::kScalar, quantize_row_ref,  dequantize_row_ref, dequantize_row_bf16_ref,
      f16_to_f32_scalar, f32_to_f16_scalar, bf16_to_f32_scalar, f32_to_bf16_scalar,
  };
  return k;
}

}  // namespace strata::quant_detail
