// JSON forms of policies and predictions, with the stable names that
// `strata policy --json` prints and run reports reuse (docs/DESIGN.md §8):
// policy {gpu_batch_size, num_gpu_batches, weights/kv_cache/activations
// {gpu, cpu, disk}, cpu_attention, compress_weight, compress_kv,
// sparse_attention_budget}; predicted {prefill_tokens_per_s,
// decode_tokens_per_s, total_tokens_per_s, prefill_s, decode_s, total_s};
// memory {gpu, cpu, disk: {budget, peak, prefill, decode, weights, kv_cache,
// activations, buffers}}; bound {phase, term, prefill, decode}.
#pragma once

#include <nlohmann/json.hpp>

#include "policy/cost_model.h"
#include "policy/policy.h"

namespace strata {

// {gpu, cpu, disk} of one kind of data (JSON type J: nlohmann::json or
// ordered_json); the placement's part of a policy and of a run report.
// Shares below 1e-12 (an LP's rounding residue) are 0.
template <class J>
J tier_shares(const Placement& p, DataKind kind) {
  auto clean = [](double x) { return x < 1e-12 ? 0.0 : x; };  // LP rounding residue
  J j;
  j["gpu"] = clean(p.on(kind, Tier::kGpu));
  j["cpu"] = clean(p.on(kind, Tier::kCpu));
  j["disk"] = p.disk(kind);
  return j;
}

nlohmann::json policy_to_json(const Policy& p);
nlohmann::json predicted_to_json(const Prediction& p);
nlohmann::json memory_to_json(const Prediction& p);
nlohmann::json bound_to_json(const Prediction& p);
// Seconds of each term of one layer step, per phase.
nlohmann::json terms_to_json(const Prediction& p);

}  // namespace strata
