// The speculative decoding flags of generate and bench:
//   --speculate none|ngram|model [--speculate-tokens K] [--draft-model PATH]
//   [--speculate-acceptance SHARE]
// and how they set EngineOptions and GenerateOptions. "ngram" proposes, per
// sequence and step, the K tokens that followed the sequence's last few
// tokens where they occur earlier in its prompt or output (prompt lookup,
// generate/ngram_draft.h); "model" the K tokens a small draft model with
// the same tokenizer chooses greedily (draft/draft_model.h). The engine
// verifies them in the same pass over the weights as the sequence's next
// token. The output is that of decoding without speculation (greedy and
// sampled alike); only the speed changes.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "draft/draft_model.h"
#include "generate/driver.h"
#include "generate/engine.h"
#include "offload/engine_options.h"
#include "plan/run_plan.h"

namespace strata {
class Model;
class Tokenizer;
}  // namespace strata

namespace strata::cli {

// A loaded draft model and what proposes with it.
struct DraftSetup {
  std::unique_ptr<Model> model;
  std::unique_ptr<DraftModel> drafter;  // declared after the model: destroyed first
  DraftSetup();
  DraftSetup(DraftSetup&&) noexcept;
  ~DraftSetup();
  // Logs what the draft model computed.
  void log_stats() const;
  // Seconds the draft model computed so far (0 without one).
  double seconds() const;
};

struct SpeculationFlags {
  std::string kind = "none";
  int tokens = 4;
  std::string draft_model;
  std::string acceptance;  // --speculate-acceptance: a share, or "pilot"; empty: not given

  void add(CLI::App& sub) {
    sub.add_option("--speculate", kind,
                   "Speculative decoding: none; ngram (draft tokens by prompt lookup) or model "
                   "(a draft model's greedy tokens, --draft-model), verified in the same pass "
                   "over the weights; the output is unchanged")
        ->check(CLI::IsMember({"none", "ngram", "model"}))
        ->capture_default_str();
    sub.add_option("--speculate-tokens", tokens,
                   "With --speculate: draft tokens verified per sequence and step (1 to " +
                       std::to_string(kMaxDraftTokens) + ")")
        ->capture_default_str();
    sub.add_option("--draft-model", draft_model,
                   "With --speculate model: the draft model (GGUF file or Hugging Face "
                   "directory) with the model's tokenizer, e.g. a quantized copy of a smaller "
                   "model of its family; it runs on the CPU from RAM with its own KV cache");
    sub.add_option(
        "--speculate-acceptance", acceptance,
        "With --speculate and --policy auto: the share of draft tokens an earlier run "
        "of this kind accepted (its report's speculation line, e.g. 0.8), or pilot "
        "(generate: measured on the prompt file's first block before the plan, at most " +
            std::to_string(kPilotNewTokens) +
            " new tokens each); the search then also picks the draft length, from none "
            "up to --speculate-tokens");
  }

  // New tokens per prompt of the pilot (--speculate-acceptance pilot).
  static constexpr int32_t kPilotNewTokens = 32;

  // Whether --speculate-acceptance asks for a pilot (after apply_to_plan).
  bool pilot() const { return acceptance == "pilot"; }

  // Before the plan: the acceptance the search plans with (--policy auto
  // only, `policy` being --policy's value); a pilot's is set later
  // (pilot_acceptance). `pilot_ok`: the command can run one.
  void apply_to_plan(RunShape& shape, const std::string& policy, bool pilot_ok) const {
    if (acceptance.empty()) return;
    if (kind == "none") fail("--speculate-acceptance {}: add --speculate ngram|model", acceptance);
    if (policy != "auto")
      fail("--speculate-acceptance {}: the search uses it; add --policy auto", acceptance);
    if (pilot()) {
      if (!pilot_ok)
        fail("--speculate-acceptance pilot: runs on generate's prompt file; give a share here");
      return;
    }
    double share = 0;
    try {
      size_t used = 0;
      share = std::stod(acceptance, &used);
      if (used != acceptance.size()) share = -1;
    } catch (const std::exception&) {
      share = -1;
    }
    if (!(share > 0 && share <= 1))
      fail("--speculate-acceptance {}: give a share above 0 and at most 1, or pilot", acceptance);
    shape.draft_accepted = share;
  }
  // After the plan: the driver proposes as many draft tokens as the engine
  // takes (the search may have picked fewer, or none).
  static void after_plan(const EngineOptions& eo, GenerateOptions& gen) {
    if (gen.speculate_tokens > 0) gen.speculate_tokens = static_cast<int32_t>(eo.max_draft_tokens);
  }

  // Sets the engine's draft limit and the driver's proposals (both 0 for
  // none). The engine checks the upper limit (validated_options); 0 would
  // mean none there, so it is refused here.
  void apply(EngineOptions& eo, GenerateOptions& gen) const {
    if (kind != "model" && !draft_model.empty())
      fail("--draft-model {}: use it with --speculate model", draft_model);
    if (kind == "model" && draft_model.empty()) fail("--speculate model needs --draft-model PATH");
    if (kind == "none") return;
    if (tokens < 1) fail("--speculate-tokens {}: use 1 to {}", tokens, kMaxDraftTokens);
    eo.max_draft_tokens = tokens;
    gen.speculate_tokens = tokens;
  }

  // With --speculate model: loads the draft model, checks that its
  // tokenizer is the target's (`tokenizer`) and makes its drafter, which
  // computes in `eo`'s compute dtype, and sets its RAM into `eo` (the
  // engine's RAM budget counts it); an empty setup otherwise (the driver
  // proposes by prompt lookup). Throws Error naming the draft model.
  DraftSetup make_drafter(EngineOptions& eo, const Tokenizer& tokenizer) const;
};

// The pilot of --speculate-acceptance pilot: the share of draft tokens
// accepted when `engine` runs the first block's worth of `jobs` (those
// `skip` leaves, in input order), each generating at most
// SpeculationFlags::kPilotNewTokens, with `gen`'s drafts (from `drafter`,
// or prompt lookup when null); nothing is written. A share of at least
// 1e-3 (none accepted plans as rarely accepted: the search then drafts
// only where rows are free).
double pilot_acceptance(Engine& engine, const Tokenizer& tokenizer, std::span<const Job> jobs,
                        const std::function<bool(size_t)>& skip, const GenerateOptions& gen,
                        Drafter* drafter);

}  // namespace strata::cli
