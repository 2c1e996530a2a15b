// Random weight matrices in any stored dtype, for the kernel tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "quant/convert.h"
#include "quant/quant_ref.h"
#include "support/random.h"

namespace strata::test {

// n rows of k values `vals` stored as t into `out`, rows row_stride bytes
// apart (the bytes between rows untouched); the GGUF-only formats, which
// have no quantizer, from random_gguf_row(seed + row) instead.
inline void encode_weights(DType t, const float* vals, int64_t n, int64_t k, size_t row_stride,
                           uint32_t seed, char* out) {
  for (int64_t j = 0; j < n; ++j) {
    const float* src = vals + j * k;
    char* dst = out + static_cast<size_t>(j) * row_stride;
    switch (t) {
      case DType::kF32:
        std::memcpy(dst, src, static_cast<size_t>(k) * 4);
        break;
      case DType::kF16:
        f32_to_f16_row(src, reinterpret_cast<uint16_t*>(dst), k);
        break;
      case DType::kBF16:
        f32_to_bf16_row(src, reinterpret_cast<uint16_t*>(dst), k);
        break;
      default:
        if (dtype_info(t).dequant_only) {
          random_gguf_row(t, dst, k, seed + static_cast<uint32_t>(j));
        } else {
          quantize_row_ref(t, src, dst, k);
        }
        break;
    }
  }
}

// n rows of k random values in [lo, hi) stored as t, rows row_stride bytes
// apart (the bytes between rows `fill`); the GGUF-only formats, which have no
// quantizer, from random_gguf_row.
inline std::vector<char> random_weights(DType t, int64_t n, int64_t k, size_t row_stride,
                                        uint32_t seed, float lo = -1.0f, float hi = 1.0f,
                                        char fill = 0x5a) {
  const auto vals = random_floats(static_cast<size_t>(n * k), lo, hi, seed);
  std::vector<char> w(row_stride * static_cast<size_t>(n), fill);
  encode_weights(t, vals.data(), n, k, row_stride, seed, w.data());
  return w;
}

}  // namespace strata::test
