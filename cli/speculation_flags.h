// The speculative decoding flags of generate and bench:
//   --speculate none|ngram [--speculate-tokens K]
// and how they set EngineOptions and GenerateOptions. "ngram" proposes, per
// sequence and step, the K tokens that followed the sequence's last few
// tokens where they occur earlier in its prompt or output (prompt lookup,
// generate/ngram_draft.h); the engine verifies them in the same pass over
// the weights as the sequence's next token. The output is that of decoding
// without speculation (greedy and sampled alike); only the speed changes.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "core/error.h"
#include "generate/driver.h"
#include "generate/engine.h"
#include "offload/engine_options.h"

namespace strata::cli {

struct SpeculationFlags {
  std::string kind = "none";
  int tokens = 4;

  void add(CLI::App& sub) {
    sub.add_option("--speculate", kind,
                   "Speculative decoding: none, or ngram (draft tokens by prompt lookup, "
                   "verified in the same pass over the weights; the output is unchanged)")
        ->check(CLI::IsMember({"none", "ngram"}))
        ->capture_default_str();
    sub.add_option("--speculate-tokens", tokens,
                   "With --speculate: draft tokens verified per sequence and step (1 to " +
                       std::to_string(kMaxDraftTokens) + ")")
        ->capture_default_str();
  }

  // Sets the engine's draft limit and the driver's proposals (both 0 for
  // none). The engine checks the upper limit (validated_options); 0 would
  // mean none there, so it is refused here.
  void apply(EngineOptions& eo, GenerateOptions& gen) const {
    if (kind == "none") return;
    if (tokens < 1) fail("--speculate-tokens {}: use 1 to {}", tokens, kMaxDraftTokens);
    eo.max_draft_tokens = tokens;
    gen.speculate_tokens = tokens;
  }
};

}  // namespace strata::cli
