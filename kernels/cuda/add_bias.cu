// Bias add on the GPU: y[r, :] += bias[:] over [n_rows, d] rows
// (grid-stride), exact. Used after the GEMMs of biased linear layers.
#include "kernels/cuda/common.cuh"

namespace strata::cuda {

namespace {

__global__ void add_bias_kernel(float* y, int64_t y_stride, const float* bias, int64_t n_rows,
                                int64_t d) {
  const int64_t total = n_rows * d;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t r = idx / d;
    const int64_t c = idx - r * d;
    y[r * y_stride + c] += bias[c];
  }
}

}  // namespace

Status add_bias(float* y, int64_t y_stride, const float* bias, int64_t n_rows, int64_t d,
                cudaStream_t stream) {
  if (n_rows < 0 || d < 0 || !view_ok(y, y_stride, n_rows, d) || (n_rows > 0 && bias == nullptr)) {
    return Status::kInvalidArgument;
  }
  const int64_t blocks = grid_blocks(n_rows * d, kBlockThreads);
  if (blocks == 0) return Status::kOk;
  add_bias_kernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(y, y_stride, bias,
                                                                               n_rows, d);
  return launch_status();
}

}  // namespace strata::cuda
