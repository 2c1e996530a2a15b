// LayerNorm on the GPU: one block per row (grid-stride over rows). Two
// reductions as on the CPU: the mean as x_0 + sum(x - x_0) / d (its error
// scales with the row's spread, not its magnitude), then the centred sum of
// squares; y = (x - mean) * r * w + b.
#include "kernels/cuda/common.cuh"

namespace strata::cuda {

namespace {

__global__ void layer_norm_kernel(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                  const float* w, const float* b, float eps, int64_t n_rows,
                                  int64_t d) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    const float x0 = xr[0];
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i] - x0;
    s = block_sum(s, scratch);
    const float mean = x0 + s / static_cast<float>(d);
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float c = xr[i] - mean;
      ss = fmaf(c, c, ss);
    }
    ss = block_sum(ss, scratch);  // its barriers order every read of xr before the writes
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      float v = (xr[i] - mean) * inv;
      if (w != nullptr) v *= w[i];
      if (b != nullptr) v += b[i];
      yr[i] = v;
    }
  }
}

}  // namespace

Status layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                  const float* b, float eps, int64_t n_rows, int64_t d, cudaStream_t stream) {
  if (n_rows < 0 || d < 1 || !(eps >= 0.0f) || !std::isfinite(eps)) return Status::kInvalidArgument;
  if (!view_ok(y, y_stride, n_rows, d) || !view_ok(x, x_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  if (n_rows == 0) return Status::kOk;
  const int64_t blocks = grid_blocks(n_rows, 1);
  layer_norm_kernel<<<static_cast<unsigned>(blocks), row_threads(d), 0, stream>>>(
      y, y_stride, x, x_stride, w, b, eps, n_rows, d);
  return launch_status();
}

}  // namespace strata::cuda
