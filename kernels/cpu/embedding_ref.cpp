// The reference embedding lookup (embedding.h): each element read on its
// own, quantized rows through the reference dequantization.
#include <cstddef>
#include <cstring>

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/op_args.h"
#include "quant/convert.h"
#include "quant/quant_ref.h"

namespace strata::cpu {

Status embedding_ref(float* y, int64_t y_stride, const void* table, DType dtype,
                     size_t table_row_bytes, int64_t n_vocab, int64_t d, const int32_t* ids,
                     int64_t n_ids) {
  if (Status s =
          op_args::embedding(y, y_stride, table, dtype, table_row_bytes, n_vocab, d, ids, n_ids);
      s != Status::kOk) {
    return s;
  }
  for (int64_t i = 0; i < n_ids; ++i) {
    const void* row = op_args::table_row(table, table_row_bytes, ids[i]);
    float* yr = y + i * y_stride;
    // Rows need not be aligned to their element (a safetensors tensor may
    // start at any byte): elements are read with memcpy.
    const auto* bytes = static_cast<const std::byte*>(row);
    auto element = [&]<typename T>(int64_t j, T) {
      T v;
      std::memcpy(&v, bytes + j * static_cast<int64_t>(sizeof(T)), sizeof(T));
      return v;
    };
    switch (dtype) {
      case DType::kF32:
        for (int64_t j = 0; j < d; ++j) yr[j] = element(j, float{});
        break;
      case DType::kF16:
        for (int64_t j = 0; j < d; ++j) yr[j] = f16_to_f32(element(j, uint16_t{}));
        break;
      case DType::kBF16:
        for (int64_t j = 0; j < d; ++j) yr[j] = bf16_to_f32(element(j, uint16_t{}));
        break;
      default:
        dequantize_row_ref(dtype, row, yr, d);
        break;
    }
  }
  return Status::kOk;
}

}  // namespace strata::cpu
