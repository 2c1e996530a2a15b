// RMSNorm on the GPU: one block per row (grid-stride over rows), the sum of
// squares reduced in f32 across the block, then y = x * r * w with
// r = 1 / sqrt(mean + eps) (correctly rounded sqrt and division).
#include "kernels/cuda/common.cuh"

namespace strata::cuda {

namespace {

__global__ void rms_norm_kernel(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                const float* w, float eps, int64_t n_rows, int64_t d) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, scratch);  // its barriers order every read of xr before the writes
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      float v = xr[i] * inv;
      if (w != nullptr) v *= w[i];
      yr[i] = v;
    }
  }
}

}  // namespace

Status rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                float eps, int64_t n_rows, int64_t d, cudaStream_t stream) {
  if (n_rows < 0 || d < 1 || !(eps >= 0.0f) || !std::isfinite(eps)) return Status::kInvalidArgument;
  if (!view_ok(y, y_stride, n_rows, d) || !view_ok(x, x_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  if (n_rows == 0) return Status::kOk;
  const int64_t blocks = grid_blocks(n_rows, 1);
  rms_norm_kernel<<<static_cast<unsigned>(blocks), row_threads(d), 0, stream>>>(
      y, y_stride, x, x_stride, w, eps, n_rows, d);
  return launch_status();
}

}  // namespace strata::cuda
