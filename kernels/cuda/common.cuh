// Device-side helpers of the CUDA kernels (included by kernels/cuda/*.cu
// only): warp and block reductions, the device error report, grid-stride
// index helpers and the launch status. Reductions use butterfly shuffles, so
// every lane ends with the same value; block reductions need blockDim.x a
// multiple of 32 and at most 1024.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/gguf_numeric.h"
#include "kernels/cuda/ops.h"

namespace strata::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Max over the warp; NaN lanes are ignored by fmaxf (callers that must
// propagate NaN do it through the values themselves).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block; `scratch` holds 32 floats of shared memory. Every
// thread of the block must call it; all get the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// Records the first device-side argument error of an op (later ones are
// dropped). err may be null.
__device__ __forceinline__ void raise_error(DeviceError* err, DeviceErrorCode code, int64_t row,
                                            int64_t value, int64_t limit) {
  if (err == nullptr) return;
  if (atomicCAS(&err->code, 0u, static_cast<uint32_t>(code)) == 0u) {
    err->row = row;
    err->value = value;
    err->limit = limit;
  }
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// After a launch: kOk, or kBackendError leaving the error for the caller to
// read with cudaGetLastError().
inline Status launch_status() {
  return cudaPeekAtLastError() == cudaSuccess ? Status::kOk : Status::kBackendError;
}

// Row views of the element-wise ops: n_rows == 0 needs nothing; otherwise a
// pointer and a stride of at least d.
inline bool view_ok(const void* p, int64_t stride, int64_t n_rows, int64_t d) {
  return n_rows == 0 || (p != nullptr && stride >= d);
}

// Threads of a one-block-per-row kernel: d rounded up to a warp, 32..256.
inline int row_threads(int64_t d) {
  const int64_t t = (d + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : (t > 256 ? 256 : t));
}

}  // namespace strata::cuda
