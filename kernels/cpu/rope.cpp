#include "kernels/cpu/rope.h"

#include <cmath>

#include "kernels/cpu/op_args.h"
#include "kernels/cpu/parallel.h"

namespace strata::cpu {

namespace {

// v: one head; c, s: [rot_dim / 2].
STRATA_CLONES void rotate_head(float* v, const float* c, const float* s, int64_t half,
                               RopeLayout layout) {
  if (layout == RopeLayout::kHalf) {
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float x0 = v[i];
      const float x1 = v[i + half];
      v[i] = x0 * c[i] - x1 * s[i];
      v[i + half] = x0 * s[i] + x1 * c[i];
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float x0 = v[2 * i];
      const float x1 = v[2 * i + 1];
      v[2 * i] = x0 * c[i] - x1 * s[i];
      v[2 * i + 1] = x0 * s[i] + x1 * c[i];
    }
  }
}

}  // namespace

Status rope_inv_freq(float* inv_freq, const RopeConfig& cfg) {
  const int64_t dim = cfg.rot_dim;
  if (inv_freq == nullptr || dim < 2 || dim % 2 != 0 || !(cfg.theta > 1.0)) {
    return Status::kInvalidArgument;
  }
  if (cfg.scaling != RopeScaling::kNone && !(cfg.factor > 0.0)) return Status::kInvalidArgument;
  if (cfg.scaling == RopeScaling::kLlama3 &&
      !(cfg.high_freq_factor > cfg.low_freq_factor && cfg.low_freq_factor > 0.0 &&
        cfg.original_max_position > 0)) {
    return Status::kInvalidArgument;
  }
  const double low_freq_wavelen = cfg.original_max_position / cfg.low_freq_factor;
  const double high_freq_wavelen = cfg.original_max_position / cfg.high_freq_factor;
  for (int64_t i = 0; i < dim / 2; ++i) {
    double f = 1.0 / std::pow(cfg.theta, static_cast<double>(2 * i) / static_cast<double>(dim));
    switch (cfg.scaling) {
      case RopeScaling::kNone:
        break;
      case RopeScaling::kLinear:
        f /= cfg.factor;
        break;
      case RopeScaling::kLlama3: {
        const double wavelen = 2.0 * M_PI / f;
        if (wavelen > low_freq_wavelen) {
          f /= cfg.factor;  // long wavelengths: interpolate fully
        } else if (wavelen >= high_freq_wavelen) {
          // medium: blend between interpolated and original
          const double smooth = (cfg.original_max_position / wavelen - cfg.low_freq_factor) /
                                (cfg.high_freq_factor - cfg.low_freq_factor);
          f = (1.0 - smooth) * f / cfg.factor + smooth * f;
        }  // short wavelengths: unchanged
        break;
      }
    }
    inv_freq[i] = static_cast<float>(f);
  }
  return Status::kOk;
}

Status rope(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
            int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
            const float* inv_freq, int64_t rot_dim, RopeLayout layout) {
  if (Status s = op_args::rope(q, q_stride, n_head, k, k_stride, n_kv_head, head_dim, pos, n_tokens,
                               inv_freq, rot_dim, layout);
      s != Status::kOk || n_tokens == 0) {
    return s;
  }
  const int64_t half = rot_dim / 2;
  const int64_t work = n_tokens * (n_head + n_kv_head) * rot_dim;
#pragma omp parallel for schedule(static) num_threads(threads_for(work))
  for (int64_t t = 0; t < n_tokens; ++t) {
    float c[op_args::kMaxRotDim / 2];
    float s[op_args::kMaxRotDim / 2];
    const float p = static_cast<float>(pos[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = p * inv_freq[i];
      c[i] = std::cos(angle);
      s[i] = std::sin(angle);
    }
    for (int64_t h = 0; h < n_head; ++h)
      rotate_head(q + t * q_stride + h * head_dim, c, s, half, layout);
    for (int64_t h = 0; h < n_kv_head; ++h) {
      rotate_head(k + t * k_stride + h * head_dim, c, s, half, layout);
    }
  }
  return Status::kOk;
}

}  // namespace strata::cpu
