// Helpers of the engine tests: golden files (tests/data/golden/*.json, made
// by scripts/make_fixtures.py from transformers), greedy generation through
// Engine::run_block, and the logit bounds per compute dtype.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "generate/engine.h"

namespace strata::test {

inline nlohmann::json load_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(f);
}

// Index of the largest value, the lowest index on ties (as the goldens).
inline int32_t argmax(const float* v, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

struct GreedyRun {
  std::vector<std::vector<int32_t>> tokens;        // [seq][step]
  std::vector<std::vector<float>> first_logits;    // [seq] logits of step 0 (prefill)
  std::vector<std::vector<int32_t>> active_steps;  // [step] the active list handed over
};

// Greedy completions of `prompts` in one block: argmax at every step, no stop
// before max_new tokens.
inline GreedyRun greedy(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                        int32_t max_new) {
  const int64_t V = engine.config().n_vocab;
  std::vector<SeqInput> in(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    in[i].prompt = prompts[i];
    in[i].max_new_tokens = max_new;
  }
  GreedyRun r;
  r.tokens.resize(prompts.size());
  r.first_logits.resize(prompts.size());
  engine.run_block(in, [&](int step, std::span<const int32_t> active, const float* logits,
                           std::span<SeqAction> out) {
    r.active_steps.emplace_back(active.begin(), active.end());
    for (size_t a = 0; a < active.size(); ++a) {
      const float* row = logits + static_cast<int64_t>(a) * V;
      const int32_t tok = argmax(row, V);
      r.tokens[static_cast<size_t>(active[a])].push_back(tok);
      if (step == 0) r.first_logits[static_cast<size_t>(active[a])].assign(row, row + V);
      out[a].next_token = tok;
    }
  });
  return r;
}

// The f32 bound of the goldens: max|d| <= 1e-4 * max|logit| + 1e-5.
inline double f32_logit_bound(double max_abs_logit) {
  return 1e-4 * max_abs_logit + 1e-5;
}

// The bf16 bound. Derivation: in bf16 compute every matmul rounds both
// operands to bf16 (unit roundoff u = 2^-9), so each product x_i w_i carries
// a relative error of at most 2u (+u^2); a dot product over k terms then has
// an error of at most 2u sum_i |x_i w_i| and, with rounding errors of
// independent sign, a typical error of sqrt(2/3) u ||x*w||_2. For the
// near-random activations and weights of these models |y| is of the order
// of ||x*w||_2, so each matmul stage adds a relative error of about
// sqrt(2/3) u of its output scale, independently of k. Along the residual
// stream the errors of the S = 4 n_layer + 1 stages a logit depends on
// (q/k/v, o, gate/up, down per layer, then lm_head) add with independent
// signs and unit gain, to sqrt(S) sqrt(2/3) u of the logit scale. The
// largest of ~1e4-5e4 such errors (vocabulary x positions) stays within 4.5
// standard deviations, and the logit scale is bounded by max|logit|:
//   |d| <= 4.5 sqrt(2/3) 2^-9 sqrt(4 n_layer + 1) max|logit| + f32 bound.
inline double bf16_logit_bound(int64_t n_layer, double max_abs_logit) {
  const double u = std::ldexp(1.0, -9);
  const double stages = 4.0 * static_cast<double>(n_layer) + 1.0;
  return 4.5 * std::sqrt(2.0 / 3.0) * u * std::sqrt(stages) * max_abs_logit +
         f32_logit_bound(max_abs_logit);
}

// The int8 bound (ComputeType::kInt8, kernels/cpu/matmul_int8.h: quantized
// weights exact, x rounded to int8 per group of G values with step
// dx = amax_g / 127). Derivation as for bf16: the rounding errors of x are
// uniform in +-dx/2 (standard deviation dx / sqrt(12)) and independent, so a
// dot product errs by about dx / sqrt(12) ||w_g||_2 per group, relative to
// its scale ||x*w||_2 ~ rms(x_g) ||w_g||_2: a relative error of
// (amax_g / rms(x_g)) / (127 sqrt(12)) per matmul stage. For near-Gaussian
// activations the largest of G = 32 values is about sqrt(2 ln G) = 2.6
// standard deviations; 3 is used. Every stage of the bf16 derivation is an
// int8 one here, so
//   |d| <= 4.5 * 3 / (127 sqrt(12)) * sqrt(4 n_layer + 1) max|logit| + f32 bound,
// and the f16 KV cache of this mode adds its own rounding (u = 2^-11 on K
// and V, 2 stages per layer) the same way.
inline double int8_logit_bound(int64_t n_layer, double max_abs_logit) {
  const double stages = 4.0 * static_cast<double>(n_layer) + 1.0;
  const double rel_int8 = 3.0 / (127.0 * std::sqrt(12.0));
  const double rel_kv = std::sqrt(2.0 / 3.0) * std::ldexp(1.0, -11);
  return 4.5 * std::sqrt(stages * rel_int8 * rel_int8 + 2.0 * n_layer * rel_kv * rel_kv) *
             max_abs_logit +
         f32_logit_bound(max_abs_logit);
}

}  // namespace strata::test
