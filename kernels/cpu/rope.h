// Rotary position embedding, in place on the query and key rows of a batch.
// The inverse frequencies depend only on the model (theta, rotary dim,
// scaling), so rope_inv_freq computes them once into a table the caller keeps
// ([rot_dim / 2] floats); rope() then rotates, per token, the first rot_dim
// dims of every head by angle pos * inv_freq[i] (computed in f32, as
// transformers does), leaving dims rot_dim..head_dim-1 unchanged.
//
// Layouts of the rotated pairs within a head:
//   kHalf         (i, i + rot_dim/2)  transformers' rotate_half (Llama, OPT-free models)
//   kInterleaved  (2i, 2i + 1)        GPT-J / GGUF-permuted Llama weights
#pragma once

#include <cstdint>

#include "kernels/status.h"

namespace strata::cpu {

enum class RopeLayout : uint8_t { kHalf, kInterleaved };
enum class RopeScaling : uint8_t { kNone, kLinear, kLlama3 };

struct RopeConfig {
  int64_t rot_dim = 0;  // rotated dims per head: even, 2 <= rot_dim <= head_dim
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;                   // kLinear and kLlama3
  double low_freq_factor = 1.0;          // kLlama3
  double high_freq_factor = 4.0;         // kLlama3
  int64_t original_max_position = 8192;  // kLlama3
};

// inv_freq: [cfg.rot_dim / 2]. inv_freq[i] = theta^(-2i/rot_dim), then scaled
// as transformers' _compute_linear_scaling / _compute_llama3_parameters do.
Status rope_inv_freq(float* inv_freq, const RopeConfig& cfg);

// q: [n_tokens, n_head, head_dim], token row stride q_stride (>= n_head * head_dim)
// k: [n_tokens, n_kv_head, head_dim], token row stride k_stride; k may be null
//    when n_kv_head is 0
// pos: [n_tokens] position of each token (>= 0)
// inv_freq: [rot_dim / 2] from rope_inv_freq
Status rope(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
            int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
            const float* inv_freq, int64_t rot_dim, RopeLayout layout);
Status rope_ref(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
                int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
                const float* inv_freq, int64_t rot_dim, RopeLayout layout);

}  // namespace strata::cpu
