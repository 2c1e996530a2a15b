// Sampling (sampler.h). Nothing is sorted: top-k is one nth_element, the
// top-p set is found in linear time (a binary search over nth_element
// partitions), and the kept candidates stay in id order for the draw.
#include "generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/clones.h"
#include "core/error.h"

namespace strata {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Cand {
  float logit;
  int32_t id;
  float w;  // exp(logit - max logit) in (0, 1]: the unnormalised probability
};

// Probability descending is logit descending; ties by id ascending.
bool cand_before(const Cand& a, const Cand& b) {
  if (a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}

[[noreturn]] void fail_no_finite_logit() {
  fail(
      "the model produced no finite logit (NaN or -inf everywhere); the model file may be "
      "damaged, or try --compute-dtype f32");
}

// The number k of leading candidates (in cand_before order) that top-p keeps:
// the smallest k whose mass reaches top_p of the total (HF keeps token i iff
// the mass before it is < top_p, and always the first). Leaves those k at the
// front of `c`, unsorted. A binary search over nth_element partitions: O(n).
size_t top_p_count(std::vector<Cand>& c, double target) {
  size_t lo = 0, hi = c.size();  // [0, lo) is known to be short of target; the top hi reach it
  double acc = 0;                // mass of [0, lo)
  while (hi - lo > 1) {
    const size_t m = lo + (hi - lo) / 2;
    std::nth_element(c.begin() + lo, c.begin() + m, c.begin() + hi, cand_before);
    double mass = 0;
    for (size_t i = lo; i < m; ++i) mass += c[i].w;
    if (acc + mass >= target) {
      hi = m;
    } else {
      acc += mass;
      lo = m;
    }
  }
  // [0, hi) now holds the top hi candidates; the top lo fall short.
  return std::max<size_t>(hi, 1);
}

// Fills `cands` with the candidates that top-k and top-p keep, in id order
// (the order the draw walks them), with their weights. `logits` are already
// divided by the temperature.
void select_nucleus(std::span<const float> logits, const SamplingParams& p,
                    std::vector<Cand>& cands) {
  const size_t n = logits.size();
  cands.clear();
  cands.reserve(n);
  // Separate simple loops: the largest logit (NaN never compares greater),
  // the finite candidates, their weights, their sum.
  float max_logit = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    if (logits[i] > max_logit) max_logit = logits[i];
  }
  for (size_t i = 0; i < n; ++i) {
    const float l = logits[i];
    if (std::isnan(l) || l == -std::numeric_limits<float>::infinity()) continue;
    cands.push_back({l, static_cast<int32_t>(i), 0.0f});
  }
  if (cands.empty()) fail_no_finite_logit();
  if (max_logit == std::numeric_limits<float>::infinity()) {
    // +inf logits share all the mass equally; everything else has none.
    std::erase_if(cands, [](const Cand& c) { return !std::isinf(c.logit); });
    for (Cand& c : cands) c.logit = 0.0f;  // equal and finite: ties resolve by id
    max_logit = 0.0f;
  }

  // top-k: keep every candidate whose logit is >= the k-th largest (HF keeps
  // ties at the boundary). erase_if keeps the id order.
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < cands.size()) {
    thread_local std::vector<float> values;
    values.resize(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) values[i] = cands[i].logit;
    std::nth_element(values.begin(), values.begin() + (p.top_k - 1), values.end(),
                     std::greater<>());
    const float kth = values[p.top_k - 1];
    std::erase_if(cands, [kth](const Cand& c) { return c.logit < kth; });
  }
  // Single-precision exp is exact to ~1e-7 relative, far below what sampling
  // can tell apart, and several times faster over a whole vocabulary.
  for (Cand& c : cands) c.w = std::exp(c.logit - max_logit);
  double total = 0;
  for (const Cand& c : cands) total += c.w;
  if (p.top_p < 1.0f && cands.size() > 1) {
    // Candidates below (1 - top_p) / n of the total can be dropped first: all
    // of them together weigh less than 1 - top_p, and they are the lightest,
    // so they lie in the tail top-p cuts anyway (half the bound for rounding).
    // On a peaked distribution this leaves a few dozen candidates.
    const double floor_w =
        0.5 * (1.0 - static_cast<double>(p.top_p)) * total / static_cast<double>(cands.size());
    thread_local std::vector<Cand> work;
    work.clear();
    for (const Cand& c : cands) {
      if (c.w >= floor_w) work.push_back(c);
    }
    const size_t k = top_p_count(work, static_cast<double>(p.top_p) * total);
    // The last kept candidate in (probability, id) order; keep what is not after it.
    const Cand last = *std::max_element(work.begin(), work.begin() + k, cand_before);
    std::erase_if(cands, [&last](const Cand& c) { return cand_before(last, c); });
  }
}

}  // namespace

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    fail("--temperature {} is not allowed; use 0 (greedy) or a positive number", temperature);
  }
  if (top_k < 0) fail("--top-k {} is not allowed; use 0 (off) or a positive number", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    fail("--top-p {} is not allowed; use a value in (0, 1] (1 is off)", top_p);
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    fail("--repetition-penalty {} is not allowed; use a positive number (1 is off)",
         repetition_penalty);
  }
}

// Two passes over the row: its largest value (NaN compares false, so it
// never wins), in 16 lanes the compiler vectorizes, then the first index
// holding it. The same token as one scalar pass keeping the first of ties,
// in about a third of the time (49152 logits: 22 us scalar, 8 us AVX2).
STRATA_CLONES int32_t argmax(std::span<const float> logits) {
  STRATA_ASSERT(!logits.empty());
  constexpr size_t kLanes = 16;
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  const float* p = logits.data();
  const size_t n = logits.size(), body = n / kLanes * kLanes;
  float lane[kLanes];
  for (float& m : lane) m = kLowest;
  for (size_t i = 0; i < body; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) lane[l] = p[i + l] > lane[l] ? p[i + l] : lane[l];
  }
  float best = kLowest;
  for (float m : lane) best = m > best ? m : best;
  for (size_t i = body; i < n; ++i) best = p[i] > best ? p[i] : best;
  // -inf is the largest value when nothing is larger; no value equals it
  // when every logit is NaN.
  for (size_t i = 0; i < n; ++i) {
    if (p[i] == best) return static_cast<int32_t>(i);
  }
  fail_no_finite_logit();
}

void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> seen_unique,
                              float penalty) {
  if (penalty == 1.0f) return;
  for (int32_t id : seen_unique) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
    float& l = logits[id];
    l = l < 0 ? l * penalty : l / penalty;
  }
}

SeqRng::SeqRng(uint64_t seed, uint64_t prompt_index) {
  // Two rounds of mixing so that neighbouring (seed, index) pairs start far apart.
  uint64_t x = seed;
  const uint64_t a = splitmix64(x);
  x = prompt_index ^ a;
  state_ = splitmix64(x);
}

uint64_t SeqRng::next_u64() {
  return splitmix64(state_);
}

double SeqRng::next_double() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

int32_t sample_row(std::span<float> logits, const SamplingParams& params,
                   std::span<const int32_t> seen_unique, double u) {
  apply_repetition_penalty(logits, seen_unique, params.repetition_penalty);
  if (params.greedy()) return argmax(logits);
  for (float& l : logits) l /= params.temperature;
  thread_local std::vector<Cand> cands;  // reused: a vocabulary-sized buffer per call is costly
  select_nucleus(logits, params, cands);
  double total = 0;
  for (const Cand& c : cands) total += c.w;
  const double target = u * total;
  double acc = 0;
  for (const Cand& c : cands) {
    acc += c.w;
    if (target < acc) return c.id;
  }
  return cands.back().id;  // u * total rounded up to the total
}

std::vector<int32_t> nucleus(std::span<const float> logits, const SamplingParams& params) {
  std::vector<float> scaled(logits.begin(), logits.end());
  const float t = params.greedy() ? 1.0f : params.temperature;
  for (float& l : scaled) l /= t;
  std::vector<Cand> cands;
  select_nucleus(scaled, params, cands);
  std::vector<int32_t> ids;
  ids.reserve(cands.size());
  for (const Cand& c : cands) ids.push_back(c.id);
  return ids;
}

SeqSampler::SeqSampler(const SamplingParams& params, uint64_t seed, uint64_t prompt_index,
                       int32_t n_vocab)
    : params_(params), rng_(seed, prompt_index), n_vocab_(n_vocab) {
  STRATA_ASSERT(n_vocab > 0);
  if (params_.repetition_penalty != 1.0f) seen_flag_.assign(static_cast<size_t>(n_vocab), 0);
}

void SeqSampler::observe(std::span<const int32_t> tokens) {
  if (seen_flag_.empty()) return;
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab_ || seen_flag_[t]) continue;
    seen_flag_[t] = 1;
    seen_.push_back(t);
  }
}

int32_t SeqSampler::sample(std::span<const float> logits) {
  STRATA_ASSERT(logits.size() == static_cast<size_t>(n_vocab_));
  int32_t token;
  if (params_.greedy() && params_.repetition_penalty == 1.0f) {
    token = argmax(logits);
  } else {
    scratch_.assign(logits.begin(), logits.end());
    const double u = params_.greedy() ? 0.0 : rng_.next_double();
    token = sample_row(scratch_, params_, seen_, u);
  }
  observe(token);
  return token;
}

}  // namespace strata
