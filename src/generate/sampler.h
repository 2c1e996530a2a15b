// Choosing the next token from one row of logits: greedy, temperature,
// top-k, top-p (nucleus) and the repetition penalty, in Hugging Face's order
// and with its semantics (penalty, then temperature, then top-k, then top-p).
//
// Reproducibility: every prompt owns its random stream, derived from (seed,
// prompt index) alone, and draws from it once per sampled token (never for a
// greedy choice). So a prompt's completion depends only on its own logits and
// never on which other prompts share its block or how big the block is.
// The draw is a uniform double built from 53 random bits and walks the kept
// candidates in id order (inverse CDF), so the choice is the same on every
// platform. Which candidates top-k / top-p keep is decided in (probability
// descending, id ascending) order, HF's rule.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace strata {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax); > 0: sample from softmax(logits / T)
  int32_t top_k = 0;                // 0: off; else keep the k largest (ties at the k-th kept)
  float top_p = 1.0f;               // 1: off; else keep the smallest set with mass >= top_p
  float repetition_penalty = 1.0f;  // 1: off; > 1 discourages tokens already seen

  bool greedy() const { return temperature <= 0.0f; }
  // Throws Error naming the option (`--temperature` etc.) for a value out of range.
  void validate() const;
};

// The index of the largest value; the lowest index among equal maxima (as
// torch.argmax). NaN never wins. `logits` must be non-empty.
int32_t argmax(std::span<const float> logits);

// Hugging Face's RepetitionPenaltyLogitsProcessor: for every distinct token in
// `seen` (prompt + completion so far), a positive logit is divided by
// `penalty` and a negative one multiplied by it. Each token is penalised once
// however often it occurs; ids outside the row are ignored.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> seen_unique,
                              float penalty);

// A counter-free 64-bit generator (SplitMix64 output function over a Weyl
// sequence): tiny state, fast, and the same numbers everywhere.
class SeqRng {
 public:
  // The stream of prompt `prompt_index` under `seed`.
  SeqRng(uint64_t seed, uint64_t prompt_index);
  uint64_t next_u64();
  // Uniform in [0, 1) from the top 53 bits.
  double next_double();

 private:
  uint64_t state_;
};

// The state of one sequence's sampling: its parameters, its random stream and
// the distinct tokens seen so far (for the repetition penalty).
class SeqSampler {
 public:
  SeqSampler(const SamplingParams& params, uint64_t seed, uint64_t prompt_index, int32_t n_vocab);

  // Records tokens that count as seen (the prompt, then each sampled token).
  void observe(std::span<const int32_t> tokens);
  void observe(int32_t token) { observe(std::span<const int32_t>(&token, 1)); }

  // Picks the next token from `logits` [n_vocab] and records it as seen.
  int32_t sample(std::span<const float> logits);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  SeqRng rng_;
  int32_t n_vocab_;
  std::vector<uint8_t> seen_flag_;  // [n_vocab], only with a repetition penalty
  std::vector<int32_t> seen_;       // distinct seen ids, in first-seen order
  std::vector<float> scratch_;      // [n_vocab] the penalised / scaled row
};

// The sampling step on a plain row, for tests and for SeqSampler: applies the
// penalty over `seen_unique`, then temperature, top-k and top-p, and picks a
// token with the draw `u` in [0, 1) (ignored when greedy). `logits` is
// modified in place.
int32_t sample_row(std::span<float> logits, const SamplingParams& params,
                   std::span<const int32_t> seen_unique, double u);

// The token ids that top-k and top-p keep for `logits` at `temperature` > 0,
// in the order the draw walks them; exposed for tests.
std::vector<int32_t> nucleus(std::span<const float> logits, const SamplingParams& params);

}  // namespace strata
