// Argument checks of the CPU ops, shared by each fast kernel and its
// reference (*_ref.cpp), so that both answer the same Status for the same
// arguments.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rope.h"
#include "kernels/status.h"

namespace strata::cpu::op_args {

inline bool rows_view_ok(const float* p, int64_t stride, int64_t n_rows, int64_t d) {
  return n_rows == 0 || (p != nullptr && stride >= d);
}

inline bool rows_dims_ok(int64_t n_rows, int64_t d) {
  return n_rows >= 0 && d >= 0;
}

inline Status norm(const float* y, int64_t y_stride, const float* x, int64_t x_stride, float eps,
                   int64_t n_rows, int64_t d) {
  if (n_rows < 0 || d < 1 || !(eps >= 0.0f) || !std::isfinite(eps)) {
    return Status::kInvalidArgument;
  }
  if (n_rows > 0 && (y == nullptr || x == nullptr || y_stride < d || x_stride < d)) {
    return Status::kInvalidArgument;
  }
  return Status::kOk;
}

inline constexpr int64_t kMaxRotDim = 4096;  // bounds the per-token cos/sin tables on the stack

inline Status rope(const float* q, int64_t q_stride, int64_t n_head, const float* k,
                   int64_t k_stride, int64_t n_kv_head, int64_t head_dim, const int32_t* pos,
                   int64_t n_tokens, const float* inv_freq, int64_t rot_dim, RopeLayout layout) {
  if (layout != RopeLayout::kHalf && layout != RopeLayout::kInterleaved) {
    return Status::kInvalidArgument;
  }
  if (n_tokens < 0 || n_head < 0 || n_kv_head < 0 || head_dim < 1) return Status::kInvalidArgument;
  if (rot_dim < 2 || rot_dim % 2 != 0 || rot_dim > head_dim) return Status::kInvalidArgument;
  if (rot_dim > kMaxRotDim) return Status::kUnsupported;
  if (n_tokens == 0) return Status::kOk;
  if (pos == nullptr || inv_freq == nullptr) return Status::kInvalidArgument;
  if (n_head > 0 && (q == nullptr || q_stride < n_head * head_dim)) return Status::kInvalidArgument;
  if (n_kv_head > 0 && (k == nullptr || k_stride < n_kv_head * head_dim)) {
    return Status::kInvalidArgument;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (pos[t] < 0) return Status::kInvalidArgument;
  }
  return Status::kOk;
}

// A weight or embedding table the CPU ops read: f32, f16, bf16 or quantized.
inline bool stored_dtype_ok(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || is_quantized(t);
}

inline Status embedding(const float* y, int64_t y_stride, const void* table, DType dtype,
                        size_t table_row_bytes, int64_t n_vocab, int64_t d, const int32_t* ids,
                        int64_t n_ids) {
  if (!stored_dtype_ok(dtype)) return Status::kUnsupported;
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

inline const void* table_row(const void* table, size_t row_bytes, int32_t id) {
  return static_cast<const char*>(table) + static_cast<size_t>(id) * row_bytes;
}

inline Status matmul(const float* y, int64_t y_stride, const float* x, int64_t x_stride,
                     const void* w, DType w_dtype, size_t w_row_bytes, int64_t m, int64_t n,
                     int64_t k, ComputeType compute) {
  if (compute != ComputeType::kF32 && compute != ComputeType::kBF16 &&
      compute != ComputeType::kInt8)
    return Status::kInvalidArgument;
  if (!stored_dtype_ok(w_dtype)) return Status::kUnsupported;
  if (m < 0 || n < 0 || k < 0 || !row_elems_ok(w_dtype, k)) return Status::kInvalidArgument;
  if (m == 0 || n == 0) return Status::kOk;
  if (y == nullptr || y_stride < n) return Status::kInvalidArgument;
  if (k > 0 &&
      (x == nullptr || w == nullptr || x_stride < k || w_row_bytes < row_bytes(w_dtype, k))) {
    return Status::kInvalidArgument;
  }
  return Status::kOk;
}

}  // namespace strata::cpu::op_args
