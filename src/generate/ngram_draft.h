// Prompt lookup: draft tokens for speculative decoding without a draft model
// (generate/engine.h, SeqAction::draft). The continuation that followed the
// sequence's last n tokens where they occur earlier in its prompt or output
// is proposed as what comes next: strong where the output copies from the
// input (extraction, rewriting, code editing, summaries that quote) and
// where it repeats itself, and free to compute.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "generate/drafter.h"

namespace strata {

// The longest and shortest suffixes prompt lookup matches: a longer match
// is tried first (it predicts better). One or two tokens match too often to
// be worth verifying: on open-ended answers (scripts/bench_speculative.sh)
// 2-token matches doubled the rejected rows for no fewer passes.
inline constexpr int64_t kNgramMax = 4, kNgramMin = 3;

// Up to `k` tokens that followed the latest earlier occurrence of the last n
// tokens of `context` (n from kNgramMax down to kNgramMin, the first n that
// occurs); empty when none occurs. The occurrence may overlap the suffix
// (a repeating pattern continues).
std::vector<int32_t> ngram_draft(std::span<const int32_t> context, int64_t k);

// ngram_draft as a Drafter: it keeps nothing between steps.
class NgramDrafter final : public Drafter {
 public:
  void begin_block(std::span<const SeqInput>, int64_t) override {}
  void propose(std::span<const Request> requests, std::span<std::vector<int32_t>> out) override;
  void finished(int32_t) override {}
};

}  // namespace strata
