// The outer search over batch sizes; see search.h.
#include "policy/search.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/units.h"

namespace strata {

namespace {

constexpr int64_t kMaxGpuBatch = 1024;
// Rounds of the placement LP per batch shape while the KV disk share moves
// by more than kKvShareSettled (Searcher::solve).
constexpr int kKvShareRounds = 4;
constexpr double kKvShareSettled = 0.01;

struct Candidate {
  bool feasible = false;
  double seconds_per_token = 0;
  Placement x;
};

constexpr const char* kFlags[] = {"--gpu-mem", "--cpu-mem", "--disk-mem"};
constexpr const char* kWords[] = {"GPU memory", "CPU memory", "disk"};

class Searcher {
 public:
  Searcher(const ModelShape& shape, const HardwareProfile& hw, const Workload& work,
           const Budgets& budgets, const SearchOptions& opts)
      : shape_(shape), hw_(hw), work_(work), budgets_(budgets), opts_(opts) {}

  Policy policy_for(int64_t gbs, int64_t nb, bool cpu_attention) const {
    Policy p;
    p.gpu_batch_size = gbs;
    p.num_gpu_batches = nb;
    p.cpu_attention = cpu_attention;
    p.compress_weight = opts_.compress_weight;
    p.compress_kv = opts_.compress_kv;
    p.sparse_attention_budget = opts_.sparse_attention_budget;
    return p;
  }

  // The workload of the candidate's block size.
  Workload work_for(const Policy& p) const {
    Workload w = work_;
    if (opts_.adapt_workload) opts_.adapt_workload(w, p.block_size());
    return w;
  }

  Candidate solve(int64_t gbs, int64_t nb, bool cpu_attention) {
    const auto key = std::make_tuple(gbs, nb, cpu_attention);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    // The cost of reading KV from disk depends on the share of it there (the
    // request size: cost_model.cpp), which the model takes from the policy:
    // first all of a sequence's pages, then the share the LP found, solved
    // again until the share settles.
    Policy p = policy_for(gbs, nb, cpu_attention);
    PlacementResult r;
    for (int round = 0; round < kKvShareRounds; ++round) {
      const CostModel m = build_cost_model(shape_, hw_, work_for(p), p, opts_.compute);
      r = solve_placement(m, budgets_, opts_.fixed);
      ++n_lp_;
      if (r.feasible && opts_.engine_fit) r = engine_checked(m, gbs, nb, cpu_attention, r);
      if (!r.feasible) break;
      const double assumed = kv_disk_share_assumed(p.placement);
      const double found = r.x.disk(DataKind::kKv);
      if (found <= 0 || std::abs(found - assumed) < kKvShareSettled) break;
      p.placement = r.x;
    }
    Candidate c{r.feasible, r.seconds_per_token, r.x};
    cache_.emplace(key, c);
    return c;
  }

  // The LP's placement `r` checked with the engine (SearchOptions::engine_fit).
  // Where the engine needs more of a tier than the cost model counts at that
  // placement, the difference (the largest seen, plus a little) is taken off
  // that tier's LP budget and the LP solved again, for a few rounds. The
  // engine places whole tensors, so its bytes move in steps; the margin
  // doubles each round to cross them. The difference depends on the
  // placement (the engine stages streamed weights the cost model counts
  // otherwise), so a cut that leaves the LP nothing may be too deep: then
  // the cut is bisected between the last one the LP placed and that one.
  PlacementResult engine_checked(const CostModel& m, int64_t gbs, int64_t nb, bool att,
                                 PlacementResult r) {
    constexpr int kRounds = 8, kBisections = 8;
    const double budget[] = {budgets_.gpu, budgets_.cpu, budgets_.disk};
    double margin = 1e-3;  // of the budget
    using Cut = std::array<double, kNumTiers>;
    Cut cut{};                // taken off each tier's budget; r is the LP at it
    Cut placed{};             // the deepest cut the LP placed (and the engine found short)
    std::optional<Cut> deep;  // a cut at which the LP placed nothing
    for (int step = 0; step < kRounds + kBisections; ++step) {
      if (r.feasible) {
        Policy p = policy_for(gbs, nb, att);
        p.placement = r.x;
        const EngineFit f = opts_.engine_fit(normalize_policy(p, hw_));
        note_engine_need(gbs, nb, att, f);
        if (f.fits()) return r;
        spdlog::debug(
            "policy search: {} x {}{}: the engine {} (needs gpu {} / {}, cpu {} / {}, disk {} / "
            "{})",
            gbs, nb, att ? " with CPU attention" : "",
            f.refused    ? "refuses it"
            : f.kv_short ? "has too small a KV budget"
                         : "finds a tier short",
            format_bytes(f.need[0]), format_bytes(f.budget[0]), format_bytes(f.need[1]),
            format_bytes(f.budget[1]), format_bytes(f.need[2]), format_bytes(f.budget[2]));
        if (f.refused || f.kv_short) break;
        placed = cut;
        if (!deep) {
          if (step >= kRounds) break;
          for (int t = 0; t < kNumTiers; ++t) {
            const size_t i = static_cast<size_t>(t);
            if (f.need[i] > f.budget[i]) {
              const double counted = std::max(m.bytes(t, 0, r.x), m.bytes(t, 1, r.x));
              cut[i] = std::max(cut[i], f.need[i] - counted) + margin * budget[t];
            }
          }
          margin *= 2;
        }
      } else {
        if (cut == placed) break;  // the LP places nothing even at the budgets given
        deep = cut;
      }
      if (deep) {
        for (size_t i = 0; i < kNumTiers; ++i) cut[i] = (placed[i] + (*deep)[i]) / 2;
      }
      Budgets b = budgets_;
      b.gpu -= cut[0];
      b.cpu -= cut[1];
      b.disk -= cut[2];
      r = solve_placement(m, b, opts_.fixed);
      ++n_lp_;
    }
    r.feasible = false;
    return r;
  }

  void consider(int64_t gbs, int64_t nb, bool att, const Candidate& c) {
    if (!c.feasible) return;
    Policy p = policy_for(gbs, nb, att);
    p.placement = c.x;
    ranked_.push_back({c.seconds_per_token, std::move(p)});
  }

  // Largest feasible nb in [1, hi], 0 when nb = 1 does not fit.
  int64_t max_feasible_nb(int64_t gbs, bool att, int64_t hi) {
    if (!solve(gbs, 1, att).feasible) return 0;
    int64_t lo = 1;  // feasible
    int64_t step = 2;
    while (step <= hi && solve(gbs, step, att).feasible) {
      lo = step;
      step *= 2;
    }
    int64_t bad = std::min(step, hi + 1);  // infeasible or past hi
    if (bad == hi + 1 && lo < hi && solve(gbs, hi, att).feasible) return hi;
    while (bad - lo > 1) {
      const int64_t mid = lo + (bad - lo) / 2;
      if (solve(gbs, mid, att).feasible) {
        lo = mid;
      } else {
        bad = mid;
      }
    }
    return lo;
  }

  void walk_nb(int64_t gbs, bool att) {
    const int64_t hi = std::max<int64_t>(1, opts_.max_block_size / gbs);
    const int64_t ub = max_feasible_nb(gbs, att, hi);
    for (int64_t nb : nb_grid(hi)) {
      if (nb > ub) break;
      consider(gbs, nb, att, solve(gbs, nb, att));
    }
  }

  SearchResult run() {
    std::vector<bool> atts;
    if (hw_.unified_memory()) {
      atts = {false};
    } else if (opts_.cpu_attention) {
      atts = {*opts_.cpu_attention};
    } else {
      atts = {false, true};  // on a tie, attention stays on the GPU
    }
    std::vector<int64_t> gbs_list =
        opts_.gpu_batch_size ? std::vector<int64_t>{*opts_.gpu_batch_size}
                             : gpu_batch_candidates(std::min(kMaxGpuBatch, opts_.max_block_size));
    for (bool att : atts) {
      for (int64_t gbs : gbs_list) {
        if (opts_.num_gpu_batches) {
          consider(gbs, *opts_.num_gpu_batches, att, solve(gbs, *opts_.num_gpu_batches, att));
        } else {
          walk_nb(gbs, att);
        }
      }
    }
    if (ranked_.empty()) fail_infeasible(gbs_list.front(), atts);
    if (static_cast<size_t>(opts_.rank) > ranked_.size()) {
      fail("--plan-rank {}: the search found {} plan{} that fit", opts_.rank, ranked_.size(),
           ranked_.size() == 1 ? "" : "s");
    }
    // The fastest (of equals within rounding, the one considered first),
    // then the fastest of the rest, rank times.
    size_t pick = 0;
    std::vector<bool> taken(ranked_.size(), false);
    for (int64_t k = 0; k < opts_.rank; ++k) {
      std::optional<size_t> best;
      for (size_t i = 0; i < ranked_.size(); ++i) {
        if (!taken[i] && (!best || ranked_[i].first < ranked_[*best].first * (1 - 1e-9))) best = i;
      }
      pick = *best;
      taken[pick] = true;
    }
    SearchResult r;
    r.policy = ranked_[pick].second;
    r.lp_seconds_per_token = ranked_[pick].first;
    r.n_plans = static_cast<int64_t>(ranked_.size());
    const CostModel m = build_cost_model(shape_, hw_, work_for(r.policy), r.policy, opts_.compute);
    r.prediction = evaluate(m, r.policy, budgets_);
    r.n_lp_solved = n_lp_;
    spdlog::debug("policy search: {} linear programs", n_lp_);
    return r;
  }

  // Of the engine's answers for one batch shape, the one short by the least.
  void note_engine_need(int64_t gbs, int64_t nb, bool att, const EngineFit& f) {
    const auto key = std::make_tuple(gbs, nb, att);
    auto it = least_engine_need_.find(key);
    if (it == least_engine_need_.end()) {
      least_engine_need_.emplace(key, f);
    } else if (shortfall(f) < shortfall(it->second)) {
      it->second = f;
    }
  }

  static double shortfall(const EngineFit& f) {
    if (f.refused || f.kv_short) return std::numeric_limits<double>::infinity();
    double s = 0;
    for (size_t i = 0; i < kNumTiers; ++i) s += std::max(0.0, f.need[i] - f.budget[i]);
    return s;
  }

  [[noreturn]] void fail_infeasible(int64_t gbs, const std::vector<bool>& atts) {
    const int64_t nb = opts_.num_gpu_batches.value_or(1);
    // Of the attention choices, the one that needs the least extra memory:
    // what the engine said of the placements the LP found, else what the
    // cost model says would make one.
    std::string best_msg;
    double best_excess = std::numeric_limits<double>::infinity();
    for (bool att : atts) {
      double excess = std::numeric_limits<double>::infinity();
      std::string msg;
      if (auto it = least_engine_need_.find(std::make_tuple(gbs, nb, att));
          it != least_engine_need_.end()) {
        msg = describe_engine_need(it->second);
        excess = shortfall(it->second);
      } else {
        const Policy p = policy_for(gbs, nb, att);
        const CostModel m = build_cost_model(shape_, hw_, work_for(p), p, opts_.compute);
        msg = describe_needs(m, p, excess);
      }
      if (excess < best_excess || (best_msg.empty() && !msg.empty())) {
        best_excess = excess;
        best_msg = msg;
      }
    }
    const std::string batch = opts_.gpu_batch_size || opts_.num_gpu_batches
                                  ? fmt::format("at gpu batch size {} x {}", gbs, nb)
                                  : std::string("at any batch size");
    if (best_msg.empty()) {
      fail(
          "{} does not fit on {} with prompt {} + gen {} {}, and no memory budget makes it fit "
          "with the fractions given; free some of --percent",
          shape_.name, hw_.name, work_.prompt_len, work_.gen_len, batch);
    }
    fail("{} does not fit on {} with prompt {} + gen {} {}: {}", shape_.name, hw_.name,
         work_.prompt_len, work_.gen_len, batch, best_msg);
  }

  static std::string describe_engine_need(const EngineFit& f) {
    if (f.refused) return "the engine refuses every placement that fits: " + f.refusal;
    if (f.kv_short) {
      return "the KV cache budget is too small for the KV pages of one block; raise --kv-mem";
    }
    std::string msg;
    for (size_t i = 0; i < kNumTiers; ++i) {
      if (f.need[i] <= f.budget[i]) continue;
      msg +=
          fmt::format("{}{} of {}, {} is {}", msg.empty() ? "the engine needs at least " : "; and ",
                      format_bytes(f.need[i]), kWords[i], kFlags[i], format_bytes(f.budget[i]));
    }
    return msg + " (the weights it keeps, the staging of those it streams and one block)";
  }

  // What the cost model says would make the batch shape `p` fit; with the
  // engine's check, a tier's need is the engine's at the placement the cost
  // model finds least of that tier in, when the engine needs more there.
  std::string describe_needs(const CostModel& m, const Policy& p, double& excess) const {
    const double budget[] = {budgets_.gpu, budgets_.cpu, budgets_.disk};
    std::array<TierNeed, kNumTiers> single = min_tier_needs(m, budgets_, opts_.fixed);
    for (size_t t = 0; t < kNumTiers; ++t) {
      if (!single[t].possible || !opts_.engine_fit) continue;
      Policy at = p;
      at.placement = single[t].x;
      const EngineFit f = opts_.engine_fit(normalize_policy(at, hw_));
      if (!f.refused && f.need[t] > single[t].bytes) single[t].bytes = f.need[t];
    }
    // Single-tier fixes, the cheapest memory first: disk, then CPU, then GPU.
    std::vector<int> order;
    for (int t : {2, 1, 0}) {
      if (single[t].possible) order.push_back(t);
    }
    if (!order.empty()) {
      const int t = order[0];
      excess = single[t].bytes - budget[t];
      std::string msg =
          fmt::format("it needs at least {} of {} for {} that do not fit elsewhere, {} is {}",
                      format_bytes(single[t].bytes), kWords[t], single[t].what, kFlags[t],
                      format_bytes(budget[t]));
      for (size_t i = 1; i < order.size(); ++i) {
        const int u = order[i];
        msg += fmt::format("{}{} of {}, {} is {}", i == 1 ? " (or " : "; or ",
                           format_bytes(single[u].bytes), kWords[u], kFlags[u],
                           format_bytes(budget[u]));
      }
      if (order.size() > 1) msg += ")";
      return msg;
    }
    const std::array<TierNeed, kNumTiers> joint = min_joint_needs(m, budgets_, opts_.fixed);
    std::string msg;
    excess = 0;
    for (int t = 0; t < kNumTiers; ++t) {
      if (!joint[t].possible || joint[t].bytes <= budget[t] * (1 + 1e-9)) continue;
      excess += joint[t].bytes - budget[t];
      msg += fmt::format("{}at least {} of {} for {}, {} is {}",
                         msg.empty() ? "it needs " : "; and ", format_bytes(joint[t].bytes),
                         kWords[t], joint[t].what, kFlags[t], format_bytes(budget[t]));
    }
    if (msg.empty()) excess = std::numeric_limits<double>::infinity();
    return msg;
  }

 private:
  const ModelShape& shape_;
  const HardwareProfile& hw_;
  const Workload& work_;
  const Budgets& budgets_;
  const SearchOptions& opts_;
  std::map<std::tuple<int64_t, int64_t, bool>, Candidate> cache_;
  std::vector<std::pair<double, Policy>> ranked_;  // seconds per token, every plan that fits
  std::map<std::tuple<int64_t, int64_t, bool>, EngineFit> least_engine_need_;
  int64_t n_lp_ = 0;
};

}  // namespace

std::vector<int64_t> nb_grid(int64_t max) {
  std::vector<int64_t> out;
  for (int64_t nb = 1; nb <= std::min<int64_t>(max, 16); ++nb) out.push_back(nb);
  for (int64_t nb = 17; nb <= max;
       nb = std::max(nb + 1, static_cast<int64_t>(std::llround(nb * 1.05)))) {
    out.push_back(nb);
  }
  return out;
}

std::vector<int64_t> gpu_batch_candidates(int64_t max) {
  std::vector<int64_t> out;
  for (int64_t p = 1; p <= max; p *= 2) {
    out.push_back(p);
    const int64_t mid = p + p / 2;
    if (p >= 2 && mid <= max) out.push_back(mid);
  }
  if (out.empty()) out.push_back(1);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

SearchResult search_policy(const ModelShape& shape, const HardwareProfile& hw, const Workload& work,
                           const Budgets& budgets, const SearchOptions& options) {
  if (options.rank < 1) fail("--plan-rank: must be at least 1 (is {})", options.rank);
  if (options.max_block_size < 1)
    fail("--max-block: must be at least 1 (is {})", options.max_block_size);
  if (options.gpu_batch_size && *options.gpu_batch_size < 1) {
    fail("--gpu-batch-size: must be at least 1 (is {})", *options.gpu_batch_size);
  }
  if (options.num_gpu_batches && *options.num_gpu_batches < 1) {
    fail("--num-gpu-batches: must be at least 1 (is {})", *options.num_gpu_batches);
  }
  for (int kind = 0; kind < 3; ++kind) {
    const std::optional<double>& g = options.fixed[2 * kind];
    const std::optional<double>& c = options.fixed[2 * kind + 1];
    for (const std::optional<double>& f : {g, c}) {
      if (f && !(*f >= 0 && *f <= 1)) fail("--percent: {} is not a fraction from 0 to 1", *f);
    }
    if (g && c && *g + *c > 1 + 1e-9) {
      fail("--percent: the gpu {} and cpu {} shares of one kind of data add up to more than 1", *g,
           *c);
    }
  }
  SearchOptions opts = options;
  if (hw.unified_memory()) {
    // A CPU device computes out of RAM: a pinned gpu share is a RAM share.
    for (int kind = 0; kind < 3; ++kind) {
      std::optional<double>& g = opts.fixed[2 * kind];
      std::optional<double>& c = opts.fixed[2 * kind + 1];
      if (g) {
        c = std::min(1.0, c.value_or(0) + *g);
        g.reset();
      }
    }
  }
  Searcher s(shape, hw, work, budgets, opts);
  return s.run();
}

}  // namespace strata
