// Perplexity (perplexity.h).
#include "generate/perplexity.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace strata {

double token_nll(std::span<const float> logits, int32_t target) {
  STRATA_ASSERT(target >= 0 && static_cast<size_t>(target) < logits.size());
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  return (mx + std::log(sum)) - static_cast<double>(logits[target]);
}

PerplexityResult perplexity(Engine& engine, std::span<const int32_t> ids, int64_t n_ctx,
                            int32_t bos_id) {
  if (n_ctx < 2) fail("--ctx {} is too small; use at least 2", n_ctx);
  if (n_ctx > engine.config().n_ctx) {
    fail("--ctx {} is longer than the model's context of {} tokens; use at most {}", n_ctx,
         engine.config().n_ctx, engine.config().n_ctx);
  }
  const int64_t n_text = bos_id >= 0 ? n_ctx - 1 : n_ctx;  // text tokens per chunk
  const int64_t n_chunks = static_cast<int64_t>(ids.size()) / n_text;
  if (n_chunks == 0) {
    fail("the text has {} tokens, less than one chunk of {}; use a longer text or a smaller --ctx",
         ids.size(), n_text);
  }
  const int64_t n_vocab = engine.config().n_vocab;
  PerplexityResult res;
  res.n_chunks = n_chunks;
  std::vector<int32_t> chunk;
  for (int64_t c = 0; c < n_chunks; ++c) {
    chunk.clear();
    if (bos_id >= 0) chunk.push_back(bos_id);
    chunk.insert(chunk.end(), ids.begin() + c * n_text, ids.begin() + (c + 1) * n_text);
    const std::vector<float> logits = engine.score(chunk);  // [n_ctx, n_vocab]
    STRATA_ASSERT(logits.size() == chunk.size() * static_cast<size_t>(n_vocab));
    double sum = 0;
    for (size_t t = 0; t + 1 < chunk.size(); ++t) {
      sum += token_nll({logits.data() + t * n_vocab, static_cast<size_t>(n_vocab)}, chunk[t + 1]);
    }
    res.chunk_nll_sum.push_back(sum);
    res.nll_sum += sum;
    res.n_scored += static_cast<int64_t>(chunk.size()) - 1;
  }
  res.ppl = std::exp(res.nll_sum / static_cast<double>(res.n_scored));
  return res;
}

}  // namespace strata
