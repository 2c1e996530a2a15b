// The policy search: an outer walk over gpu_batch_size, num_gpu_batches and
// the CPU-attention choice, with the placement LP (placement_lp.h) choosing
// the fractions for each, keeping the policy with the highest predicted
// total throughput. Any of these can be pinned by the caller; when nothing
// fits, the Error names the tier to grow and by how much.
//
// The candidates form a fixed grid that does not depend on the budgets:
// gpu batch sizes 1, 2, 3, 4, 6, 8, 12, ... and numbers of gpu batches 1..16
// then steps of 5%. Each LP's optimum can only improve when a budget grows,
// so the search's best can only improve too (more memory never predicts
// less). For each gpu batch size, feasibility is monotone in the number of
// batches (more sequences hold more KV and activations): the largest
// feasible count is found by doubling and bisection, and the grid is scanned
// up to it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "policy/cost_model.h"
#include "policy/placement_lp.h"

namespace strata {

// The engine's own answer about a candidate policy (plan/run_plan.h asks the
// offload engine's plan_fit): refused outright, or the bytes it needs of each
// tier (gpu, cpu, disk as Budgets names them) against its budgets.
struct EngineFit {
  bool refused = false;
  std::string refusal;  // the engine's reason, when refused
  std::array<double, kNumTiers> need{}, budget{};
  bool kv_short = false;  // the KV cache's own budget (--kv-mem) cannot hold the block
  bool fits() const {
    if (refused || kv_short) return false;
    for (int t = 0; t < kNumTiers; ++t) {
      if (need[static_cast<size_t>(t)] > budget[static_cast<size_t>(t)]) return false;
    }
    return true;
  }
};

struct SearchOptions {
  std::optional<int64_t> gpu_batch_size;
  std::optional<int64_t> num_gpu_batches;
  std::optional<bool> cpu_attention;
  Compression compress_weight;
  Compression compress_kv;
  int64_t sparse_attention_budget = 0;
  PlacementPins fixed;            // shares pinned by the caller
  int64_t max_block_size = 4096;  // sequences per block at most
  // When set, every candidate the LP places is checked with the engine: a
  // refusal makes it infeasible; a tier the engine finds short has its LP
  // budget lowered by the shortfall and the LP solved again (a few rounds).
  // So the search returns only policies the engine runs, with memory counted
  // as the engine counts it.
  std::function<EngineFit(const Policy&)> engine_fit;
  // Sets in a copy of the search's workload what depends on the block size
  // (what its sequences share of their prompts: Workload::shared_tokens and
  // the prefix step), for each candidate; null: one workload for all.
  std::function<void(Workload& work, int64_t block_size)> adapt_workload;
  // The engine's measured compute for this model (cost_model.h), or null
  // for the profile's rates.
  const EngineCompute* compute = nullptr;
  // Which plan to return: 1 the fastest predicted, k the k-th fastest of
  // every batch shape the search placed (to measure the choice against the
  // runners-up; Error when fewer fit).
  int64_t rank = 1;
};

struct SearchResult {
  Policy policy;
  Prediction prediction;
  double lp_seconds_per_token = 0;  // the LP's objective for the policy
  int64_t n_lp_solved = 0;
  int64_t n_plans = 0;  // batch shapes placed that fit
};

// Throws Error when no batch size fits the budgets; the message says how
// much of which tier would make the smallest batch fit.
SearchResult search_policy(const ModelShape& shape, const HardwareProfile& hw, const Workload& work,
                           const Budgets& budgets, const SearchOptions& options = {});

// The gpu batch sizes the search tries: 1, 2, 3, 4, 6, 8, 12, ... (powers of
// two and 1.5 times them) up to `max`.
std::vector<int64_t> gpu_batch_candidates(int64_t max);
// The numbers of gpu batches it tries: 1..16, then steps of about 5%, up to `max`.
std::vector<int64_t> nb_grid(int64_t max);

}  // namespace strata
