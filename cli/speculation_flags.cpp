// The draft model of --speculate model (speculation_flags.h).
#include "cli/speculation_flags.h"

#include "core/log.h"
#include "core/units.h"
#include "generate/driver.h"
#include "generate/report.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {

DraftSetup::DraftSetup() = default;
DraftSetup::DraftSetup(DraftSetup&&) noexcept = default;
DraftSetup::~DraftSetup() = default;

void DraftSetup::log_stats() const {
  if (!drafter) return;
  const DraftStats& s = drafter->stats();
  spdlog::info("draft model: {} tokens proposed, {} passes over {} tokens, {:.2f} s", s.proposed,
               s.passes, s.fed_tokens, s.seconds);
}

double DraftSetup::seconds() const {
  return drafter ? drafter->stats().seconds : 0;
}

DraftSetup SpeculationFlags::make_drafter(EngineOptions& eo, const Tokenizer& tokenizer) const {
  DraftSetup d;
  if (kind != "model") return d;
  d.model = Model::open(draft_model);
  check_same_vocabulary(tokenizer, *tokenizer_for(*d.model), draft_model);
  DraftModelOptions o;
  o.compute = eo.compute_dtype;
  o.threads = eo.threads;
  o.n_sample = tokenizer.n_vocab();
  d.drafter = std::make_unique<DraftModel>(*d.model, o);
  eo.draft_memory = d.drafter->memory();
  spdlog::info(
      "--draft-model {}: {} of RAM for its weights and working memory, and its KV cache "
      "per block, counted in the RAM budget",
      draft_model, format_bytes(static_cast<double>(eo.draft_memory.fixed)));
  if (eo.device != "cpu") {
    spdlog::info("--draft-model {}: the draft model computes on the CPU", draft_model);
  }
  return d;
}

double pilot_acceptance(Engine& engine, const Tokenizer& tokenizer, std::span<const Job> jobs,
                        const std::function<bool(size_t)>& skip, const GenerateOptions& gen,
                        Drafter* drafter) {
  std::vector<Job> some;
  for (size_t i = 0; i < jobs.size() && std::ssize(some) < engine.block_size(); ++i) {
    if (skip(i)) continue;
    some.push_back(jobs[i]);
    some.back().max_new_tokens =
        std::min(some.back().max_new_tokens, SpeculationFlags::kPilotNewTokens);
  }
  if (some.empty()) return 1;
  const EngineStats before = engine.stats();
  const RunSummary s = run_jobs(engine, tokenizer, some, gen, nullptr, drafter);
  const EngineStats d = stats_since(engine.stats(), before);
  const double share = d.drafted_tokens > 0 ? static_cast<double>(d.accepted_tokens) /
                                                  static_cast<double>(d.drafted_tokens)
                                            : 0;
  spdlog::info(
      "speculation pilot: {} prompts, {} tokens: {} of {} draft tokens accepted ({:.1f} %) in "
      "{:.1f} s",
      s.n_prompts, s.generated_tokens, d.accepted_tokens, d.drafted_tokens, 100 * share, s.total_s);
  return std::max(share, 1e-3);
}

}  // namespace strata::cli
