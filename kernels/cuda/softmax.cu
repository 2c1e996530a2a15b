// Row softmax on the GPU: one block per row (grid-stride over rows); the
// max, then e = expf(x - max) written to y and summed, then y *= 1 / sum.
// A NaN anywhere in the row makes the row NaN (through its e and the sum),
// a row of all -inf gives NaN (-inf - -inf), as softmax_ref.
#include "kernels/cuda/common.cuh"

namespace strata::cuda {

namespace {

__global__ void softmax_kernel(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                               int64_t n_rows, int64_t d) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = block_max(m, scratch);  // its barriers order every read of xr before the writes
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float e = expf(xr[i] - m);
      yr[i] = e;
      s += e;
    }
    s = block_sum(s, scratch);
    const float inv = 1.0f / s;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] *= inv;
  }
}

}  // namespace

Status softmax(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n_rows,
               int64_t d, cudaStream_t stream) {
  if (n_rows < 0 || d < 0 || !view_ok(y, y_stride, n_rows, d) || !view_ok(x, x_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  if (n_rows == 0 || d == 0) return Status::kOk;
  softmax_kernel<<<static_cast<unsigned>(grid_blocks(n_rows, 1)), row_threads(d), 0, stream>>>(
      y, y_stride, x, x_stride, n_rows, d);
  return launch_status();
}

}  // namespace strata::cuda
