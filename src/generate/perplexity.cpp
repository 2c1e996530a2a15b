// Perplexity (perplexity.h).
#include "generate/perplexity.h"

#include <algorithm>
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

namespace {

// Decode mode: the chunks a block at a time, each one sequence whose prompt
// is its first `from` tokens and whose next tokens are the chunk's own.
void score_by_decode(Engine& engine, const std::vector<std::vector<int32_t>>& chunks, int64_t from,
                     PerplexityResult& res) {
  const int64_t n_vocab = engine.config().n_vocab;
  for (size_t c0 = 0; c0 < chunks.size(); c0 += static_cast<size_t>(engine.block_size())) {
    const size_t n = std::min(chunks.size() - c0, static_cast<size_t>(engine.block_size()));
    std::vector<SeqInput> in(n);
    std::vector<double> sums(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      const std::vector<int32_t>& ch = chunks[c0 + i];
      in[i].prompt.assign(ch.begin(), ch.begin() + from);
      in[i].max_new_tokens = static_cast<int32_t>(static_cast<int64_t>(ch.size()) - from);
    }
    engine.run_block(in, [&](int step, std::span<const int32_t> active, const float* logits,
                             std::span<SeqAction> out) {
      for (size_t a = 0; a < active.size(); ++a) {
        const std::vector<int32_t>& ch = chunks[c0 + static_cast<size_t>(active[a])];
        const size_t target = static_cast<size_t>(from + step);  // the token this row predicts
        sums[static_cast<size_t>(active[a])] += token_nll(
            {logits + a * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab)}, ch[target]);
        out[a].next_token = ch[target];
        out[a].finished = target + 1 == ch.size();
      }
    });
    for (size_t i = 0; i < n; ++i) {
      res.chunk_nll_sum.push_back(sums[i]);
      res.nll_sum += sums[i];
      res.n_scored += static_cast<int64_t>(chunks[c0 + i].size()) - from;
    }
  }
}

// Prefill mode: each chunk scored alone, every position predicting the next.
void score_by_prefill(Engine& engine, const std::vector<std::vector<int32_t>>& chunks,
                      PerplexityResult& res) {
  const int64_t n_vocab = engine.config().n_vocab;
  for (const std::vector<int32_t>& chunk : chunks) {
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
}

}  // namespace

int64_t perplexity_chunks(size_t n_ids, int64_t n_ctx, bool bos) {
  return static_cast<int64_t>(n_ids) / std::max<int64_t>(1, bos ? n_ctx - 1 : n_ctx);
}

PerplexityResult perplexity(Engine& engine, std::span<const int32_t> ids, int64_t n_ctx,
                            int32_t bos_id, int64_t decode_from) {
  if (n_ctx < 2) fail("--ctx {} is too small; use at least 2", n_ctx);
  if (n_ctx > engine.config().n_ctx) {
    fail("--ctx {} is longer than the model's context of {} tokens; use at most {}", n_ctx,
         engine.config().n_ctx, engine.config().n_ctx);
  }
  const int64_t n_text = bos_id >= 0 ? n_ctx - 1 : n_ctx;  // text tokens per chunk
  const int64_t n_chunks = perplexity_chunks(ids.size(), n_ctx, bos_id >= 0);
  if (n_chunks == 0) {
    fail("the text has {} tokens, less than one chunk of {}; use a longer text or a smaller --ctx",
         ids.size(), n_text);
  }
  STRATA_ASSERT_MSG(decode_from >= 0 && decode_from < n_ctx, "decode_from {} outside [0, n_ctx {})",
                    decode_from, n_ctx);
  std::vector<std::vector<int32_t>> chunks;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t>& ch = chunks.emplace_back();
    if (bos_id >= 0) ch.push_back(bos_id);
    ch.insert(ch.end(), ids.begin() + c * n_text, ids.begin() + (c + 1) * n_text);
  }
  PerplexityResult res;
  res.n_chunks = n_chunks;
  if (decode_from > 0) {
    score_by_decode(engine, chunks, decode_from, res);
  } else {
    score_by_prefill(engine, chunks, res);
  }
  res.ppl = std::exp(res.nll_sum / static_cast<double>(res.n_scored));
  return res;
}

}  // namespace strata
