// The placement LP over a CostModel; see placement_lp.h.
#include "policy/placement_lp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "policy/lp_solver.h"

namespace strata {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;  // memory rows are scaled to GiB
constexpr double kKeepOptimum = 1e-9;          // relative slack of the tie-break solve

// The variables of one program over a cost model.
struct Program {
  LinearProgram lp;
  std::array<int, kNumShares> x{};
  int t_prefill_layer = -1, t_prefill_head = -1, t_decode_layer = -1, t_decode_head = -1;
  int t_prefix_layer = -1, t_prefix_head = -1;
  LinearProgram::Coeffs time_objective;  // seconds per generated token
};

LinearProgram::Coeffs affine_row(const Program& p, const Affine& a, double scale) {
  LinearProgram::Coeffs row;
  for (int i = 0; i < kNumShares; ++i) {
    if (a.coef[i] != 0) row.emplace_back(p.x[i], a.coef[i] * scale);
  }
  return row;
}

void add_step(Program& p, int t_var, const StepCost& step) {
  for (size_t b = 0; b < step.bounds.size(); ++b) {
    const Affine sec = step.bound_seconds(b);
    // t - sum coef x >= constant
    LinearProgram::Coeffs row = affine_row(p, (-1.0) * sec, 1.0);
    row.emplace_back(t_var, 1.0);
    p.lp.add_ge(row, sec.constant);
  }
}

// The paths a device has: a device computing on host RAM has no RAM-only
// path (its RAM is where it computes).
std::vector<WeightPath> paths_of(const CostModel& m) {
  if (m.hw.unified_memory()) return {WeightPath::kResident, WeightPath::kFromDisk};
  return {WeightPath::kResident, WeightPath::kFromRam, WeightPath::kFromDisk};
}

// Builds the variables, the step rows, the fraction rows and the rows that
// keep the weights on `path`; memory rows are added by the callers (they
// differ in which tiers are relaxed).
void build_program(Program& p, const CostModel& m, const PlacementPins& fixed, WeightPath path) {
  for (int i = 0; i < kNumShares; ++i) {
    p.x[i] = p.lp.add_var(0, 1, std::string(share_name(static_cast<Share>(i))));
    std::optional<double> pin = m.forced[i] ? m.forced[i] : fixed[i];
    if (pin) p.lp.fix_var(p.x[i], std::clamp(*pin, 0.0, 1.0));
  }
  for (int kind = 0; kind < 3; ++kind) {
    p.lp.add_le({{p.x[2 * kind], 1.0}, {p.x[2 * kind + 1], 1.0}}, 1.0);
  }
  const int w_gpu = p.x[static_cast<int>(Share::kWGpu)],
            w_cpu = p.x[static_cast<int>(Share::kWCpu)];
  const bool resident_on_gpu = path == WeightPath::kResident && !m.hw.unified_memory();
  if (resident_on_gpu) {
    p.lp.add_ge({{w_gpu, 1.0}}, 1.0);
  } else if (path != WeightPath::kFromDisk) {
    p.lp.add_ge({{w_gpu, 1.0}, {w_cpu, 1.0}}, 1.0);  // nothing on disk
  }
  const double inf = std::numeric_limits<double>::infinity();
  p.t_prefill_layer = p.lp.add_var(0, inf, "t_prefill_layer");
  p.t_prefill_head = p.lp.add_var(0, inf, "t_prefill_head");
  p.t_decode_layer = p.lp.add_var(0, inf, "t_decode_layer");
  p.t_decode_head = p.lp.add_var(0, inf, "t_decode_head");
  add_step(p, p.t_prefill_layer, m.prefill_layer);
  add_step(p, p.t_prefill_head, m.prefill_head);
  add_step(p, p.t_decode_layer, m.decode_layer);
  add_step(p, p.t_decode_head, m.decode_head);
  p.t_prefix_layer = p.lp.add_var(0, inf, "t_prefix_layer");
  p.t_prefix_head = p.lp.add_var(0, inf, "t_prefix_head");
  add_step(p, p.t_prefix_layer, m.prefix_layer);
  add_step(p, p.t_prefix_head, m.prefix_head);

  const double L = static_cast<double>(m.shape.n_layer);
  const double steps = static_cast<double>(m.work.gen_len - 1);
  const double per_token = 1.0 / m.generated_tokens();
  p.time_objective = {{p.t_prefill_layer, L * per_token},
                      {p.t_prefill_head, per_token},
                      {p.t_decode_layer, steps * L * per_token},
                      {p.t_decode_head, steps * per_token},
                      {p.t_prefix_layer, m.work.prefix_steps * L * per_token},
                      {p.t_prefix_head, m.work.prefix_steps * per_token}};
}

bool tier_used(const CostModel& m, int t) {
  return !(m.hw.unified_memory() && t == static_cast<int>(Tier::kGpu));
}

double budget_of(const Budgets& b, int t) {
  return t == 0 ? b.gpu : (t == 1 ? b.cpu : b.disk);
}

// Bytes of tier t in phase ph on `path`, as an affine function.
Affine tier_bytes(const CostModel& m, int t, int ph, WeightPath path) {
  return m.memory[t][ph].total() + affine_constant(m.granule(t, path));
}

void add_memory_rows(Program& p, const CostModel& m, const Budgets& budgets, int relaxed_tier,
                     WeightPath path) {
  for (int t = 0; t < kNumTiers; ++t) {
    if (!tier_used(m, t) || t == relaxed_tier) continue;
    for (int ph = 0; ph < kNumPhases; ++ph) {
      const Affine bytes = tier_bytes(m, t, ph, path);
      // Scale the row to about 1 so that the simplex's relative tolerance
      // (1e-7) is a tolerance on the budget, not on a GiB.
      double scale = std::max({budget_of(budgets, t), std::fabs(bytes.constant), 1.0});
      for (double c : bytes.coef) scale = std::max(scale, std::fabs(c));
      p.lp.add_le(affine_row(p, bytes, 1 / scale),
                  (budget_of(budgets, t) - bytes.constant) / scale);
    }
  }
}

// Adds m_t >= bytes of tier t in each phase; returns m_t's variable (GiB).
int add_peak_var(Program& p, const CostModel& m, int t, WeightPath path) {
  const int peak = p.lp.add_var(0, std::numeric_limits<double>::infinity(), "peak");
  for (int ph = 0; ph < kNumPhases; ++ph) {
    const Affine bytes = tier_bytes(m, t, ph, path);
    LinearProgram::Coeffs row = affine_row(p, (-1.0) * bytes, 1 / kGiB);
    row.emplace_back(peak, 1.0);
    p.lp.add_ge(row, bytes.constant / kGiB);
  }
  return peak;
}

Placement read_fractions(const Program& p) {
  Placement x;
  for (int i = 0; i < kNumShares; ++i) x.share[i] = std::clamp(p.lp.value(p.x[i]), 0.0, 1.0);
  // Keep gpu + cpu <= 1 exactly after the solver's tolerances.
  for (int kind = 0; kind < 3; ++kind) {
    double& g = x.share[2 * kind];
    double& c = x.share[2 * kind + 1];
    if (g + c > 1) c = std::max(0.0, 1 - g);
  }
  return x;
}

std::string largest_part(const CostModel& m, int t, const Placement& x) {
  const TierMemory& pre = m.memory[t][0];
  const TierMemory& dec = m.memory[t][1];
  const TierMemory& tm = m.bytes(t, 1, x) >= m.bytes(t, 0, x) ? dec : pre;
  const double buffers = tm.buffers(x) + m.granule(t, m.weight_path(x));
  const std::pair<const char*, double> parts[] = {{"weights", tm.weights(x)},
                                                  {"KV cache", tm.kv_cache(x)},
                                                  {"activations", tm.activations(x)},
                                                  {"buffers", buffers}};
  return std::max_element(std::begin(parts), std::end(parts),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

// The placement LP with the weights kept on `path`.
PlacementResult solve_on_path(const CostModel& m, const Budgets& budgets,
                              const PlacementPins& fixed, WeightPath path) {
  Program p;
  build_program(p, m, fixed, path);
  add_memory_rows(p, m, budgets, -1, path);
  p.lp.minimize(p.time_objective);
  PlacementResult r;
  const LinearProgram::Status st = p.lp.solve();
  if (st != LinearProgram::Status::kOptimal) {
    if (st != LinearProgram::Status::kInfeasible) {
      spdlog::debug("policy LP: the simplex did not finish (gpu batch {}, {} batches); skipping it",
                    m.batch.gpu_batch_size, m.batch.num_gpu_batches);
    }
    return r;
  }
  const double best = p.lp.objective();

  // Tie-break: keep the time, move as little off the device as possible
  // (disk counts twice). Weights by each kind's bytes.
  const int dec = static_cast<int>(Phase::kDecode);
  const int pre = static_cast<int>(Phase::kPrefill);
  const Affine& w_disk = m.memory[static_cast<int>(Tier::kDisk)][dec].weights;
  const Affine& kv_disk = m.memory[static_cast<int>(Tier::kDisk)][dec].kv_cache;
  const Affine& act_disk = m.memory[static_cast<int>(Tier::kDisk)][pre].activations;
  const double sizes[3] = {w_disk.constant, kv_disk.constant, act_disk.constant};
  const double total = std::max(1.0, sizes[0] + sizes[1] + sizes[2]);
  LinearProgram::Coeffs tie;
  for (int kind = 0; kind < 3; ++kind) {
    tie.emplace_back(p.x[2 * kind], -2 * sizes[kind] / total);
    tie.emplace_back(p.x[2 * kind + 1], -1 * sizes[kind] / total);
  }
  // The time row scaled to about 1, like the memory rows.
  const double time_scale = best > 0 ? 1 / best : 1.0;
  LinearProgram::Coeffs keep = p.time_objective;
  for (auto& [var, c] : keep) c *= time_scale;
  p.lp.add_le(keep, best * time_scale * (1 + kKeepOptimum) + 1e-15);
  p.lp.minimize(tie);
  if (p.lp.solve() != LinearProgram::Status::kOptimal) {
    // Cannot happen (the first optimum is feasible); fall back to it.
    spdlog::debug("policy LP: tie-break solve failed; using the first optimum");
    Program again;
    build_program(again, m, fixed, path);
    add_memory_rows(again, m, budgets, -1, path);
    again.lp.minimize(again.time_objective);
    STRATA_ASSERT(again.lp.solve() == LinearProgram::Status::kOptimal);
    r.x = read_fractions(again);
  } else {
    r.x = read_fractions(p);
  }
  r.feasible = true;
  r.seconds_per_token = best;
  return r;
}

}  // namespace

PlacementResult solve_placement(const CostModel& m, const Budgets& budgets,
                                const PlacementPins& fixed) {
  // The fastest path; on a tie the earlier one (fewer bytes streamed).
  PlacementResult best;
  for (const WeightPath path : paths_of(m)) {
    const PlacementResult r = solve_on_path(m, budgets, fixed, path);
    if (r.feasible && (!best.feasible || r.seconds_per_token < best.seconds_per_token * (1 - 1e-9)))
      best = r;
  }
  return best;
}

std::array<TierNeed, kNumTiers> min_tier_needs(const CostModel& m, const Budgets& budgets,
                                               const PlacementPins& fixed) {
  std::array<TierNeed, kNumTiers> needs;
  for (int t = 0; t < kNumTiers; ++t) {
    if (!tier_used(m, t)) continue;
    for (const WeightPath path : paths_of(m)) {
      Program p;
      build_program(p, m, fixed, path);
      add_memory_rows(p, m, budgets, t, path);
      const int peak = add_peak_var(p, m, t, path);
      p.lp.minimize({{peak, 1.0}});
      if (p.lp.solve() != LinearProgram::Status::kOptimal) continue;
      const double bytes = p.lp.value(peak) * kGiB;
      if (needs[t].possible && bytes >= needs[t].bytes) continue;
      needs[t].possible = true;
      needs[t].bytes = bytes;
      needs[t].x = read_fractions(p);
      needs[t].what = largest_part(m, t, needs[t].x);
    }
  }
  return needs;
}

std::array<TierNeed, kNumTiers> min_joint_needs(const CostModel& m, const Budgets& budgets,
                                                const PlacementPins& fixed) {
  // The path with the least total excess.
  std::array<TierNeed, kNumTiers> needs;
  double least_excess = std::numeric_limits<double>::infinity();
  for (const WeightPath path : paths_of(m)) {
    Program p;
    build_program(p, m, fixed, path);
    std::array<int, kNumTiers> peak{-1, -1, -1};
    LinearProgram::Coeffs objective;
    for (int t = 0; t < kNumTiers; ++t) {
      if (!tier_used(m, t)) continue;
      peak[t] = add_peak_var(p, m, t, path);
      // excess_t >= peak_t - budget_t, excess_t >= 0
      const int excess = p.lp.add_var(0, std::numeric_limits<double>::infinity(), "excess");
      p.lp.add_ge({{excess, 1.0}, {peak[t], -1.0}}, -budget_of(budgets, t) / kGiB);
      objective.emplace_back(excess, 1.0);
    }
    p.lp.minimize(objective);
    if (p.lp.solve() != LinearProgram::Status::kOptimal) continue;
    if (p.lp.objective() >= least_excess) continue;
    least_excess = p.lp.objective();
    const Placement x = read_fractions(p);
    for (int t = 0; t < kNumTiers; ++t) {
      if (peak[t] < 0) continue;
      needs[t].possible = true;
      needs[t].bytes = p.lp.value(peak[t]) * kGiB;
      needs[t].what = largest_part(m, t, x);
    }
  }
  return needs;
}

}  // namespace strata
