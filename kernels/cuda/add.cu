// Residual add on the GPU: y = a + b over [n_rows, d] rows (grid-stride),
// exact; y may alias a or b.
#include "kernels/cuda/common.cuh"

namespace strata::cuda {

namespace {

__global__ void add_kernel(float* y, int64_t y_stride, const float* a, int64_t a_stride,
                           const float* b, int64_t b_stride, int64_t n_rows, int64_t d) {
  const int64_t total = n_rows * d;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t r = idx / d;
    const int64_t c = idx - r * d;
    y[r * y_stride + c] = a[r * a_stride + c] + b[r * b_stride + c];
  }
}

}  // namespace

Status add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
           int64_t b_stride, int64_t n_rows, int64_t d, cudaStream_t stream) {
  if (n_rows < 0 || d < 0 || !view_ok(y, y_stride, n_rows, d) || !view_ok(a, a_stride, n_rows, d) ||
      !view_ok(b, b_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  const int64_t blocks = grid_blocks(n_rows * d, kBlockThreads);
  if (blocks == 0) return Status::kOk;
  add_kernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(y, y_stride, a, a_stride,
                                                                          b, b_stride, n_rows, d);
  return launch_status();
}

}  // namespace strata::cuda
