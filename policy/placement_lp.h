// The placement linear program: for fixed batch sizes, attention and
// compression choice (one CostModel), the fractions of weights, KV cache and
// activations on gpu / cpu (disk the rest) that minimise the time per
// generated token. Variables: the six fractions and the time of the four
// step parts (prefill/decode x layer/head); each step part is at least each
// of its bounds (the max written as inequalities); each tier's bytes in each
// phase are at most its budget. Ties are broken by a second solve that keeps
// the optimal time and moves as little data as possible off the device, so
// an unbinding term never leaves data on a slower tier. The weights' staging
// is a constant once anything streams (CostModel::staging_granule), so the
// program is solved once per WeightPath (all resident, from RAM, from disk)
// with that path's constants and rows, and the fastest path wins.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "policy/cost_model.h"

namespace strata {

struct PlacementResult {
  bool feasible = false;
  Placement x;
  double seconds_per_token = 0;  // the LP's objective: block seconds / generated tokens
};

PlacementResult solve_placement(const CostModel& model, const Budgets& budgets,
                                const PlacementPins& fixed = {});

// What one tier would need for the model to fit with the other tiers' budgets
// as they are: the smallest peak bytes of that tier over all placements.
struct TierNeed {
  bool possible = false;  // false: no budget of this tier alone makes it fit
  double bytes = 0;
  std::string what;  // the largest part at that placement: "weights", "KV cache", ...
  Placement x;       // that placement
};
std::array<TierNeed, kNumTiers> min_tier_needs(const CostModel& model, const Budgets& budgets,
                                               const PlacementPins& fixed = {});

// With every tier relaxed at once: the smallest budgets that fit, minimising
// the total excess over the given budgets. Used when no single tier suffices.
std::array<TierNeed, kNumTiers> min_joint_needs(const CostModel& model, const Budgets& budgets,
                                                const PlacementPins& fixed = {});

}  // namespace strata
