// Public (de)quantization entry points: check the preconditions, then call the
// variant chosen in isa.cpp.
#include "quant/quant.h"

#include "core/error.h"
#include "quant/convert.h"
#include "quant/isa.h"

namespace strata {

namespace {

void check_row(DType t, int64_t n) {
  const auto& info = dtype_info(t);
  STRATA_ASSERT_MSG(info.quantized, "{} is not a quantized type", info.name);
  STRATA_ASSERT_MSG(row_elems_ok(t, n), "{} values are not a whole number of {} groups", n,
                    info.name);
}

void check_writable(DType t) {
  STRATA_ASSERT_MSG(!dtype_info(t).dequant_only, "{} is read from GGUF files, never written",
                    dtype_name(t));
}

}  // namespace

void quantize_row(DType t, const float* x, void* y, int64_t n) {
  check_row(t, n);
  check_writable(t);
  quant_kernels().quantize_row(t, x, y, n);
}

void dequantize_row(DType t, const void* x, float* y, int64_t n) {
  check_row(t, n);
  quant_kernels().dequantize_row(t, x, y, n);
}

void dequantize_row_bf16(DType t, const void* x, uint16_t* y, int64_t n) {
  check_row(t, n);
  quant_kernels().dequantize_row_bf16(t, x, y, n);
}

void quantize_rows(DType t, const float* x, int64_t x_stride, void* y, size_t y_stride,
                   int64_t n_rows, int64_t n) {
  check_row(t, n);
  check_writable(t);
  const auto& k = quant_kernels();
  for (int64_t r = 0; r < n_rows; ++r) {
    k.quantize_row(t, x + r * x_stride, static_cast<uint8_t*>(y) + r * y_stride, n);
  }
}

void dequantize_rows(DType t, const void* x, size_t x_stride, float* y, int64_t y_stride,
                     int64_t n_rows, int64_t n) {
  check_row(t, n);
  const auto& k = quant_kernels();
  for (int64_t r = 0; r < n_rows; ++r) {
    k.dequantize_row(t, static_cast<const uint8_t*>(x) + r * x_stride, y + r * y_stride, n);
  }
}

void dequantize_rows_bf16(DType t, const void* x, size_t x_stride, uint16_t* y, int64_t y_stride,
                          int64_t n_rows, int64_t n) {
  check_row(t, n);
  const auto& k = quant_kernels();
  for (int64_t r = 0; r < n_rows; ++r) {
    k.dequantize_row_bf16(t, static_cast<const uint8_t*>(x) + r * x_stride, y + r * y_stride, n);
  }
}

}  // namespace strata
