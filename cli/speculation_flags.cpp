// The draft model of --speculate model (speculation_flags.h).
#include "cli/speculation_flags.h"

#include "core/log.h"
#include "core/units.h"
#include "generate/driver.h"
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

}  // namespace strata::cli
