// Token embedding lookup on the GPU: one block per id (grid-stride over ids),
// its threads over the row. Rows of a table in any weight dtype are widened
// to f32 exactly (quantized rows with dequant_value: bit for bit
// embedding_ref). An id outside [0, n_vocab) leaves its row unwritten and is
// reported in the DeviceError.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dispatch.h"

namespace strata::cuda {

namespace {

template <typename Load>
__global__ void embedding_kernel(float* y, int64_t y_stride, const char* table, size_t row_bytes,
                                 int64_t n_vocab, int64_t d, const int32_t* ids, int64_t n_ids,
                                 DeviceError* err) {
  const Load load;
  for (int64_t i = blockIdx.x; i < n_ids; i += gridDim.x) {
    const int32_t id = ids[i];
    if (id < 0 || id >= n_vocab) {
      if (threadIdx.x == 0) raise_error(err, DeviceErrorCode::kTokenId, i, id, n_vocab);
      continue;
    }
    const void* row = table + static_cast<size_t>(id) * row_bytes;
    float* yr = y + i * y_stride;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = load(row, j);
  }
}

}  // namespace

Status embedding(float* y, int64_t y_stride, const void* table, DType dtype, size_t table_row_bytes,
                 int64_t n_vocab, int64_t d, const int32_t* ids, int64_t n_ids, DeviceError* err,
                 cudaStream_t stream) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16 &&
      !is_quantized(dtype)) {
    note_unsupported("embedding dtype", dtype_name(dtype), "f32, f16, bf16, quantized");
    return Status::kUnsupported;
  }
  if (n_ids < 0 || n_vocab < 0 || d < 1 || !row_elems_ok(dtype, d)) return Status::kInvalidArgument;
  if (n_ids == 0) return Status::kOk;
  const size_t align = row_align(dtype);
  if (y == nullptr || table == nullptr || ids == nullptr || y_stride < d ||
      table_row_bytes < row_bytes(dtype, d) || table_row_bytes % align != 0 ||
      reinterpret_cast<uintptr_t>(table) % align != 0) {
    return Status::kInvalidArgument;
  }
  const unsigned blocks = static_cast<unsigned>(grid_blocks(n_ids, 1));
  const int threads = row_threads(d);
  const char* t = static_cast<const char*>(table);
  STRATA_DISPATCH_LOAD(dtype, Load, {
    embedding_kernel<Load><<<blocks, threads, 0, stream>>>(y, y_stride, t, table_row_bytes, n_vocab,
                                                           d, ids, n_ids, err);
  })
  return launch_status();
}

}  // namespace strata::cuda
