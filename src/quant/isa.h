// The instruction-set variants of the CPU (de)quantization and conversion
// paths, and the choice among them. Every variant produces the same bytes and
// floats as the references (quant_ref.h, core/dtype.h), bit for bit; they
// differ only in speed. The choice is made once per process from the CPU's
// features: AVX-512 (F, BW, VL, DQ) > AVX2 with F16C > scalar. Tests and
// benchmarks reach each supported variant through quant_kernels(isa).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace strata {

enum class QuantIsa : uint8_t { kScalar, kAvx2, kAvx512 };

// Entry points of one variant. Preconditions (checked by the public wrappers
// in quant.h / convert.h, not here): t quantized, n a multiple of its group.
struct QuantKernels {
  QuantIsa isa;
  void (*quantize_row)(DType t, const float* x, void* y, int64_t n);
  void (*dequantize_row)(DType t, const void* x, float* y, int64_t n);
  void (*dequantize_row_bf16)(DType t, const void* x, uint16_t* y, int64_t n);
  // Any n >= 0.
  void (*f16_to_f32_row)(const uint16_t* x, float* y, int64_t n);
  void (*f32_to_f16_row)(const float* x, uint16_t* y, int64_t n);
  void (*bf16_to_f32_row)(const uint16_t* x, float* y, int64_t n);
  void (*f32_to_bf16_row)(const float* x, uint16_t* y, int64_t n);
};

std::string_view quant_isa_name(QuantIsa isa);  // "scalar", "avx2", "avx512"
bool quant_isa_supported(QuantIsa isa);         // by this CPU and this build

// The variant for isa (asserted supported).
const QuantKernels& quant_kernels(QuantIsa isa);
// The variant the public functions use: the best supported one. The first
// call logs the choice, and why a faster one was not taken.
const QuantKernels& quant_kernels();

namespace quant_detail {
const QuantKernels& kernels_scalar();
#if defined(__x86_64__)
const QuantKernels& kernels_avx2();
const QuantKernels& kernels_avx512();
#endif
}  // namespace quant_detail

}  // namespace strata
