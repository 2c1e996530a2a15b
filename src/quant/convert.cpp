// Public row converters: dispatch to the variant chosen in isa.cpp.
#include "quant/convert.h"

#include <cstring>

#include "core/error.h"
#include "quant/isa.h"
#include "quant/quant.h"

namespace strata {

void f16_to_f32_row(const uint16_t* x, float* y, int64_t n) {
  STRATA_ASSERT(n >= 0);
  quant_kernels().f16_to_f32_row(x, y, n);
}

void f32_to_f16_row(const float* x, uint16_t* y, int64_t n) {
  STRATA_ASSERT(n >= 0);
  quant_kernels().f32_to_f16_row(x, y, n);
}

void bf16_to_f32_row(const uint16_t* x, float* y, int64_t n) {
  STRATA_ASSERT(n >= 0);
  quant_kernels().bf16_to_f32_row(x, y, n);
}

void f32_to_bf16_row(const float* x, uint16_t* y, int64_t n) {
  STRATA_ASSERT(n >= 0);
  quant_kernels().f32_to_bf16_row(x, y, n);
}

void row_to_f32(DType t, const void* x, float* y, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      return f16_to_f32_row(static_cast<const uint16_t*>(x), y, n);
    case DType::kBF16:
      return bf16_to_f32_row(static_cast<const uint16_t*>(x), y, n);
    default:
      break;
  }
  STRATA_ASSERT_MSG(is_quantized(t), "cannot widen {} to f32", dtype_name(t));
  dequantize_row(t, x, y, n);
}

void row_to_bf16(DType t, const void* x, uint16_t* y, int64_t n) {
  switch (t) {
    case DType::kF32:
      return f32_to_bf16_row(static_cast<const float*>(x), y, n);
    case DType::kBF16:
      std::memcpy(y, x, static_cast<size_t>(n) * sizeof(uint16_t));
      return;
    case DType::kF16: {
      // Through f32 (exact) in chunks that stay in cache.
      constexpr int64_t kChunk = 1024;
      float tmp[kChunk];
      const auto* h = static_cast<const uint16_t*>(x);
      for (int64_t i = 0; i < n; i += kChunk) {
        const int64_t m = n - i < kChunk ? n - i : kChunk;
        f16_to_f32_row(h + i, tmp, m);
        f32_to_bf16_row(tmp, y + i, m);
      }
      return;
    }
    default:
      break;
  }
  STRATA_ASSERT_MSG(is_quantized(t), "cannot convert {} to bf16", dtype_name(t));
  dequantize_row_bf16(t, x, y, n);
}

}  // namespace strata
