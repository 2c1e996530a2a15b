// The reference matmul (matmul.h): weights dequantized by the reference
// path and rounded as the compute type rounds them, sums in double; int8
// compute over quantized weights goes to matmul_int8_ref.
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/op_args.h"
#include "quant/convert.h"
#include "quant/quant_ref.h"

namespace strata::cpu {

Status matmul_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, const void* w,
                  DType w_dtype, size_t w_row_bytes, const float* bias, int64_t m, int64_t n,
                  int64_t k, ComputeType compute) {
  if (Status s =
          op_args::matmul(y, y_stride, x, x_stride, w, w_dtype, w_row_bytes, m, n, k, compute);
      s != Status::kOk) {
    return s;
  }
  if (m == 0 || n == 0) return Status::kOk;
  if (compute == ComputeType::kInt8) {
    if (matmul_int8_ok(w_dtype) && k > 0) {
      matmul_int8_ref(y, y_stride, x, x_stride, w, w_dtype, w_row_bytes, bias, m, n, k);
      return Status::kOk;
    }
    compute = ComputeType::kBF16;
  }
  const bool bf16 = compute == ComputeType::kBF16;
  auto round = [bf16](float v) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; };
  std::vector<float> wf(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) {
    const void* row = static_cast<const char*>(w) + static_cast<size_t>(j) * w_row_bytes;
    float* dst = wf.data() + j * k;
    switch (w_dtype) {
      case DType::kF32:
        std::memcpy(dst, row, static_cast<size_t>(k) * 4);
        break;
      case DType::kF16:
        for (int64_t l = 0; l < k; ++l) dst[l] = f16_to_f32(static_cast<const uint16_t*>(row)[l]);
        break;
      case DType::kBF16:
        for (int64_t l = 0; l < k; ++l) dst[l] = bf16_to_f32(static_cast<const uint16_t*>(row)[l]);
        break;
      default:
        dequantize_row_ref(w_dtype, row, dst, k);
        break;
    }
    for (int64_t l = 0; l < k; ++l) dst[l] = round(dst[l]);
  }
  std::vector<float> xr(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t l = 0; l < k; ++l) xr[l] = round(x[i * x_stride + l]);
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias != nullptr ? bias[j] : 0.0;
      const float* wr = wf.data() + j * k;
      for (int64_t l = 0; l < k; ++l) acc += static_cast<double>(xr[l]) * wr[l];
      y[i * y_stride + j] = static_cast<float>(acc);
    }
  }
  return Status::kOk;
}

}  // namespace strata::cpu
