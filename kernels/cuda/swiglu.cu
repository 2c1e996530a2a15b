// SwiGLU on the GPU: y = silu(gate) * up = gate / (1 + expf(-gate)) * up,
// element-wise over [n_rows, d] rows (grid-stride). y may alias gate or up.
#include "kernels/cuda/common.cuh"

namespace strata::cuda {

namespace {

__global__ void swiglu_kernel(float* y, int64_t y_stride, const float* gate, int64_t gate_stride,
                              const float* up, int64_t up_stride, int64_t n_rows, int64_t d) {
  const int64_t total = n_rows * d;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t r = idx / d;
    const int64_t c = idx - r * d;
    const float g = gate[r * gate_stride + c];
    y[r * y_stride + c] = g / (1.0f + expf(-g)) * up[r * up_stride + c];
  }
}

}  // namespace

Status swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride, const float* up,
              int64_t up_stride, int64_t n_rows, int64_t d, cudaStream_t stream) {
  if (n_rows < 0 || d < 0 || !view_ok(y, y_stride, n_rows, d) ||
      !view_ok(gate, gate_stride, n_rows, d) || !view_ok(up, up_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  const int64_t blocks = grid_blocks(n_rows * d, kBlockThreads);
  if (blocks == 0) return Status::kOk;
  swiglu_kernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
      y, y_stride, gate, gate_stride, up, up_stride, n_rows, d);
  return launch_status();
}

}  // namespace strata::cuda
