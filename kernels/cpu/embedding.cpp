#include "kernels/cpu/embedding.h"

#include <cstddef>
#include <cstring>

#include "kernels/cpu/parallel.h"
#include "quant/convert.h"
#include "quant/quant_ref.h"

namespace strata::cpu {

namespace {

bool table_dtype_ok(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || is_quantized(t);
}

Status check(const float* y, int64_t y_stride, const void* table, DType dtype,
             size_t table_row_bytes, int64_t n_vocab, int64_t d, const int32_t* ids,
             int64_t n_ids) {
  if (!table_dtype_ok(dtype)) return Status::kUnsupported;
  if (n_ids < 0 || n_vocab < 0 || d < 1 || !row_elems_ok(dtype, d)) return Status::kInvalidArgument;
  if (n_ids == 0) return Status::kOk;
  if (y == nullptr || table == nullptr || ids == nullptr || y_stride < d ||
      table_row_bytes < row_bytes(dtype, d)) {
    return Status::kInvalidArgument;
  }
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab) return Status::kInvalidArgument;
  }
  return Status::kOk;
}

const void* table_row(const void* table, size_t row_bytes, int32_t id) {
  return static_cast<const char*>(table) + static_cast<size_t>(id) * row_bytes;
}

}  // namespace

Status embedding(float* y, int64_t y_stride, const void* table, DType dtype, size_t table_row_bytes,
                 int64_t n_vocab, int64_t d, const int32_t* ids, int64_t n_ids) {
  if (Status s = check(y, y_stride, table, dtype, table_row_bytes, n_vocab, d, ids, n_ids);
      s != Status::kOk) {
    return s;
  }
#pragma omp parallel for schedule(static) num_threads(threads_for(n_ids* d))
  for (int64_t i = 0; i < n_ids; ++i) {
    row_to_f32(dtype, table_row(table, table_row_bytes, ids[i]), y + i * y_stride, d);
  }
  return Status::kOk;
}

Status embedding_ref(float* y, int64_t y_stride, const void* table, DType dtype,
                     size_t table_row_bytes, int64_t n_vocab, int64_t d, const int32_t* ids,
                     int64_t n_ids) {
  if (Status s = check(y, y_stride, table, dtype, table_row_bytes, n_vocab, d, ids, n_ids);
      s != Status::kOk) {
    return s;
  }
  for (int64_t i = 0; i < n_ids; ++i) {
    const void* row = table_row(table, table_row_bytes, ids[i]);
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
