// The decode path of paged_attention (kernels/cpu/attention.h): every
// sequence of the batch has at most one new token. A decode step reads the
// whole KV cache for little arithmetic, so this path is built around the
// memory stream: each K and V row of a kv head is read once for all the query
// heads that share it, whole token rows of several kv heads at a time, with
// software prefetch ahead of the compute across work units; long sequences
// are split into key chunks whose partial softmax states are merged.
// Internal to kernels/cpu: paged_attention validates the batch and calls it.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.h"

namespace strata::cpu {

// Attention of the batch's decode tokens with AVX-512. Preconditions: the
// batch passed paged_attention's checks, kv.dtype is f32, f16 or bf16, and no
// sequence has more than one new token. `work` is the batch's multiply-adds
// (sets the thread count). Returns false, having written nothing, when the
// CPU lacks AVX-512 (the caller then takes its general path).
// out: [n_tokens, n_head, head_dim] f32; q: [n_tokens, n_head, head_dim] f32
bool paged_attention_decode(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                            int64_t n_head, const KvPages& kv, const AttentionBatch& batch,
                            float scale, int64_t work);

}  // namespace strata::cpu
