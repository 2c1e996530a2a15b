// Row gather on the GPU: y[i, :] = x[rows[i], :], one block per output row
// (grid-stride). A negative row index leaves its row unwritten and is
// reported in the DeviceError (the number of rows of x is not known here).
#include "kernels/cuda/common.cuh"

namespace strata::cuda {

namespace {

__global__ void gather_rows_kernel(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                   const int32_t* rows, int64_t n_rows, int64_t d,
                                   DeviceError* err) {
  for (int64_t i = blockIdx.x; i < n_rows; i += gridDim.x) {
    const int32_t r = rows[i];
    if (r < 0) {
      if (threadIdx.x == 0) raise_error(err, DeviceErrorCode::kGatherRow, i, r, 0);
      continue;
    }
    const float* xr = x + static_cast<int64_t>(r) * x_stride;
    float* yr = y + i * y_stride;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = xr[j];
  }
}

}  // namespace

Status gather_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                   const int32_t* rows, int64_t n_rows, int64_t d, DeviceError* err,
                   cudaStream_t stream) {
  if (n_rows < 0 || d < 0) return Status::kInvalidArgument;
  if (n_rows == 0 || d == 0) return Status::kOk;
  if (y == nullptr || x == nullptr || rows == nullptr || y_stride < d || x_stride < d) {
    return Status::kInvalidArgument;
  }
  gather_rows_kernel<<<static_cast<unsigned>(grid_blocks(n_rows, 1)), row_threads(d), 0, stream>>>(
      y, y_stride, x, x_stride, rows, n_rows, d, err);
  return launch_status();
}

}  // namespace strata::cuda
