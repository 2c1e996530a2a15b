// Activations on the GPU, element-wise over [n_rows, d] rows (grid-stride):
// ReLU (exact, NaN kept), SiLU x / (1 + expf(-x)), GELU-tanh as
// x / (1 + expf(-2v)) (= 0.5 x (1 + tanh v) without its cancellation for
// negative x), exact GELU as 0.5 x erfcf(-x / sqrt 2) (relative accuracy in
// the negative tail). The same formulas as kernels/cpu with CUDA's expf
// (2 ulp) and erfcf (4 ulp) in place of the polynomial approximations.
#include "kernels/cuda/common.cuh"

namespace strata::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.797884560802865355f;
constexpr float kInvSqrt2 = 0.707106781186547524f;

template <ActFn F>
__device__ __forceinline__ float act(float x) {
  if constexpr (F == ActFn::kRelu) {
    return x > 0.0f ? x : (x != x ? x : 0.0f);
  } else if constexpr (F == ActFn::kSilu) {
    return x / (1.0f + expf(-x));
  } else if constexpr (F == ActFn::kGeluTanh) {
    const float v = kSqrt2OverPi * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * v));
  } else {
    return 0.5f * x * erfcf(-x * kInvSqrt2);
  }
}

template <ActFn F>
__global__ void activation_kernel(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                  int64_t n_rows, int64_t d) {
  const int64_t total = n_rows * d;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t r = idx / d;
    const int64_t c = idx - r * d;
    y[r * y_stride + c] = act<F>(x[r * x_stride + c]);
  }
}

}  // namespace

Status activation(ActFn f, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                  int64_t n_rows, int64_t d, cudaStream_t stream) {
  if (n_rows < 0 || d < 0 || !view_ok(y, y_stride, n_rows, d) || !view_ok(x, x_stride, n_rows, d)) {
    return Status::kInvalidArgument;
  }
  const int64_t blocks = grid_blocks(n_rows * d, kBlockThreads);
  if (blocks == 0) return Status::kOk;
  const unsigned g = static_cast<unsigned>(blocks);
  switch (f) {
    case ActFn::kRelu:
      activation_kernel<ActFn::kRelu>
          <<<g, kBlockThreads, 0, stream>>>(y, y_stride, x, x_stride, n_rows, d);
      break;
    case ActFn::kGelu:
      activation_kernel<ActFn::kGelu>
          <<<g, kBlockThreads, 0, stream>>>(y, y_stride, x, x_stride, n_rows, d);
      break;
    case ActFn::kGeluTanh:
      activation_kernel<ActFn::kGeluTanh>
          <<<g, kBlockThreads, 0, stream>>>(y, y_stride, x, x_stride, n_rows, d);
      break;
    case ActFn::kSilu:
      activation_kernel<ActFn::kSilu>
          <<<g, kBlockThreads, 0, stream>>>(y, y_stride, x, x_stride, n_rows, d);
      break;
    default:
      return Status::kInvalidArgument;
  }
  return launch_status();
}

}  // namespace strata::cuda
