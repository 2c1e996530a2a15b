// Perplexity of a model on a text, by the procedure of the golden files
// (tests/data/golden/*.json, "perplexity"): the token ids of the whole text
// (no BOS) are cut into non-overlapping chunks of n_ctx tokens from the
// start, the incomplete tail chunk dropped; each chunk is scored alone
// (fresh context); in each chunk positions 0..n_ctx-2 predict tokens
// 1..n_ctx-1, all scored; nll = -log_softmax(logits)[next token] (in double
// over the f32 logits); ppl = exp(sum nll / n_scored).
//
// With a BOS id (--bos), each chunk is BOS followed by n_ctx - 1 text tokens
// and the prediction of the first text token from BOS is scored too (n_ctx
// - 1 scored tokens per chunk, as without BOS).
//
// Decode mode (decode_from = N > 0): each chunk's first N tokens are a
// prompt (one prefill) and the rest are fed one token at a time through the
// decode path, as generation would (so decode-only features such as sparse
// attention apply); the positions from N - 1 on are scored (n_ctx - N per
// chunk), chunks a block of the engine at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "generate/engine.h"

namespace strata {

struct PerplexityResult {
  double ppl = 0;
  double nll_sum = 0;
  int64_t n_scored = 0;
  int64_t n_chunks = 0;
  std::vector<double> chunk_nll_sum;  // [n_chunks]
};

// Throws Error when `ids` hold less than one chunk or n_ctx < 2.
PerplexityResult perplexity(Engine& engine, std::span<const int32_t> ids, int64_t n_ctx,
                            int32_t bos_id = -1, int64_t decode_from = 0);

// The chunks `n_ids` text tokens make: n_ids / (n_ctx - 1 with a BOS, else
// n_ctx), the tail dropped.
int64_t perplexity_chunks(size_t n_ids, int64_t n_ctx, bool bos);

// -log_softmax(logits)[target] in double.  logits: [n_vocab]
double token_nll(std::span<const float> logits, int32_t target);

}  // namespace strata
