// The reference rotary embedding (rope.h): angles in f32 as transformers
// computes them, the rotation in double.
#include <cmath>

#include "kernels/cpu/op_args.h"
#include "kernels/cpu/rope.h"

namespace strata::cpu {

Status rope_ref(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
                int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
                const float* inv_freq, int64_t rot_dim, RopeLayout layout) {
  if (Status s = op_args::rope(q, q_stride, n_head, k, k_stride, n_kv_head, head_dim, pos, n_tokens,
                               inv_freq, rot_dim, layout);
      s != Status::kOk) {
    return s;
  }
  const int64_t half = rot_dim / 2;
  auto rotate = [&](float* v, int64_t t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos[t]) * inv_freq[i];  // f32, as transformers
      const double c = std::cos(static_cast<double>(angle));
      const double s = std::sin(static_cast<double>(angle));
      const int64_t i0 = layout == RopeLayout::kHalf ? i : 2 * i;
      const int64_t i1 = layout == RopeLayout::kHalf ? i + half : 2 * i + 1;
      const double x0 = v[i0];
      const double x1 = v[i1];
      v[i0] = static_cast<float>(x0 * c - x1 * s);
      v[i1] = static_cast<float>(x0 * s + x1 * c);
    }
  };
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_head; ++h) rotate(q + t * q_stride + h * head_dim, t);
    for (int64_t h = 0; h < n_kv_head; ++h) rotate(k + t * k_stride + h * head_dim, t);
  }
  return Status::kOk;
}

}  // namespace strata::cpu
