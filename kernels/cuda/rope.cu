// Rotary position embedding on the GPU, in place: one thread per (token,
// head of q or k, rotated pair), grid-stride. The angle is pos * inv_freq[i]
// in f32 (as transformers and rope_ref), its sine and cosine by sincosf
// (2 ulp); the pair layout is (i, i + rot_dim/2) or (2i, 2i + 1).
#include "kernels/cuda/common.cuh"

namespace strata::cuda {

namespace {

__global__ void rope_kernel(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
                            int64_t n_kv_head, int64_t head_dim, const int32_t* pos,
                            int64_t n_tokens, const float* inv_freq, int64_t half, bool interleaved,
                            DeviceError* err) {
  const int64_t heads = n_head + n_kv_head;
  const int64_t total = n_tokens * heads * half;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t t = idx / (heads * half);
    const int64_t rem = idx - t * heads * half;
    const int64_t h = rem / half;
    const int64_t i = rem - h * half;
    const int32_t p = pos[t];
    if (p < 0) {
      raise_error(err, DeviceErrorCode::kPosition, t, p, 0);
      continue;
    }
    float* v =
        h < n_head ? q + t * q_stride + h * head_dim : k + t * k_stride + (h - n_head) * head_dim;
    const float angle = mul_rn(static_cast<float>(p), inv_freq[i]);
    float s, c;
    sincosf(angle, &s, &c);
    const int64_t i0 = interleaved ? 2 * i : i;
    const int64_t i1 = interleaved ? 2 * i + 1 : i + half;
    const float x0 = v[i0];
    const float x1 = v[i1];
    v[i0] = x0 * c - x1 * s;
    v[i1] = x0 * s + x1 * c;
  }
}

}  // namespace

Status rope(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
            int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
            const float* inv_freq, int64_t rot_dim, RopePairs pairs, DeviceError* err,
            cudaStream_t stream) {
  if (pairs != RopePairs::kHalf && pairs != RopePairs::kInterleaved) {
    return Status::kInvalidArgument;
  }
  if (n_tokens < 0 || n_head < 0 || n_kv_head < 0 || head_dim < 1) return Status::kInvalidArgument;
  if (rot_dim < 2 || rot_dim % 2 != 0 || rot_dim > head_dim) return Status::kInvalidArgument;
  if (n_tokens == 0 || n_head + n_kv_head == 0) return Status::kOk;
  if (pos == nullptr || inv_freq == nullptr) return Status::kInvalidArgument;
  if (n_head > 0 && (q == nullptr || q_stride < n_head * head_dim)) return Status::kInvalidArgument;
  if (n_kv_head > 0 && (k == nullptr || k_stride < n_kv_head * head_dim)) {
    return Status::kInvalidArgument;
  }
  const int64_t half = rot_dim / 2;
  const int64_t total = n_tokens * (n_head + n_kv_head) * half;
  const int64_t blocks = grid_blocks(total, kBlockThreads);
  rope_kernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
      q, q_stride, n_head, k, k_stride, n_kv_head, head_dim, pos, n_tokens, inv_freq, half,
      pairs == RopePairs::kInterleaved, err);
  return launch_status();
}

}  // namespace strata::cuda
