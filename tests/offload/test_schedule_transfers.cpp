// The zig-zag schedule with its transfers (offload/schedule.h): for every
// plan, every load is issued no later than the compute that uses it, every
// store after the compute that produced it, weights are loaded once per
// column and step, KV and activations once per use; and the dry-run print.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "core/error.h"
#include "offload/schedule.h"

namespace strata {
namespace {

using What = Transfer::What;

// Index of compute (i, j, k) in schedule order.
int64_t index_of(const ScheduleShape& s, int64_t i, int64_t j, int64_t k) {
  return (i * s.n_columns() + j) * s.n_micro_batches + k;
}

struct Case {
  ScheduleShape shape;
  TransferPlan plan;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const ScheduleShape s : {ScheduleShape{1, 1, 1}, ScheduleShape{3, 2, 4},
                                ScheduleShape{4, 3, 1}, ScheduleShape{2, 5, 3}}) {
    const size_t n_col = static_cast<size_t>(s.n_columns());
    std::vector<bool> all(n_col, true), some(n_col, false), none;
    for (size_t j = 0; j < n_col; j += 2) some[j] = true;  // embed, layers 1, 3, ...
    std::vector<bool> tied_some = some;                    // the head placed with the embed column
    tied_some.back() = true;
    for (const auto& w : {all, some, none}) {
      for (bool kv : {false, true}) {
        for (bool act : {false, true}) out.push_back({s, TransferPlan{w, kv, act}});
      }
    }
    for (const auto& w : {all, tied_some, none}) {
      for (bool kv : {false, true}) out.push_back({s, TransferPlan{w, kv, false, true}});
    }
  }
  return out;
}

// Whether a decode step's embed column reads the head's load of the step
// before (tied embeddings with the table off the device).
bool tied_off(const TransferPlan& p) {
  return p.tied_embeddings && !p.weights_off.empty() && p.weights_off[0];
}

// Where the weights load of column j, step i is carried: by the first
// micro-batch of the column before (of the head of the step before for the
// embed column, and with tied embeddings for column 1 of a decode step).
int64_t weights_carrier(const ScheduleShape& s, const TransferPlan& p, int64_t i, int64_t j) {
  if (j > 1 || (j == 1 && !(tied_off(p) && i > 0))) return index_of(s, i, j - 1, 0);
  return i > 0 ? index_of(s, i - 1, s.n_columns() - 1, 0) : index_of(s, 0, 0, 0);
}

TEST(ScheduleTransfers, EveryLoadBeforeItsUseEveryStoreAfterItsProducer) {
  for (const Case& c : cases()) {
    const ScheduleShape& s = c.shape;
    const auto steps = make_block_schedule(s, c.plan);
    ASSERT_EQ(static_cast<int64_t>(steps.size()), s.n_compute());
    const bool any_w = !c.plan.weights_off.empty();
    // (what, i, j, k) -> index of the step that carries it.
    std::map<std::tuple<int, int, int, int>, int64_t> loads, stores;
    for (size_t idx = 0; idx < steps.size(); ++idx) {
      const ScheduleStep& st = steps[idx];
      // The order itself is the plain zig-zag one.
      ASSERT_EQ(static_cast<int64_t>(idx), index_of(s, st.step, st.column, st.micro_batch));
      for (const Transfer& t : st.loads) {
        const int k = t.what == What::kWeights ? 0 : t.micro_batch;
        const auto key = std::make_tuple(static_cast<int>(t.what), t.step, t.column, k);
        EXPECT_TRUE(loads.emplace(key, static_cast<int64_t>(idx)).second)
            << "loaded twice: what " << static_cast<int>(t.what) << " i=" << t.step
            << " j=" << t.column << " k=" << k;
        // Issued no later than its first use.
        EXPECT_LE(static_cast<int64_t>(idx), index_of(s, t.step, t.column, k));
        // And no earlier than its place: weights by the column before (one
        // more column before for tied embeddings' column 1), KV and
        // activations by the compute just before.
        if (t.what == What::kWeights) {
          EXPECT_EQ(static_cast<int64_t>(idx), weights_carrier(s, c.plan, t.step, t.column));
        } else {
          EXPECT_EQ(static_cast<int64_t>(idx), index_of(s, t.step, t.column, t.micro_batch) - 1);
        }
      }
      for (const Transfer& t : st.stores) {
        const auto key = std::make_tuple(static_cast<int>(t.what), t.step, t.column, t.micro_batch);
        EXPECT_TRUE(stores.emplace(key, static_cast<int64_t>(idx)).second);
        // After the compute that produced it, by the very next step.
        EXPECT_EQ(static_cast<int64_t>(idx), index_of(s, t.step, t.column, t.micro_batch) + 1);
        EXPECT_NE(t.what, What::kWeights) << "weights are never stored";
      }
    }
    // Coverage: what the plan keeps off the device moves, nothing else does.
    for (int64_t i = 0; i < s.n_steps; ++i) {
      for (int64_t j = 0; j < s.n_columns(); ++j) {
        const bool w_off = any_w && c.plan.weights_off[static_cast<size_t>(j)];
        const bool from_head = tied_off(c.plan) && i > 0 && j == 0;
        EXPECT_EQ(loads.count({static_cast<int>(What::kWeights), static_cast<int>(i),
                               static_cast<int>(j), 0}),
                  w_off && !from_head ? 1u : 0u)
            << "weights i=" << i << " j=" << j;
        // Each compute reads its own column's load of its step, a tied
        // decode embed column the head's of the step before.
        for (int64_t k = 0; k < s.n_micro_batches; ++k) {
          const ScheduleStep& st = steps[static_cast<size_t>(index_of(s, i, j, k))];
          EXPECT_EQ(st.weights_column, from_head ? s.n_columns() - 1 : j);
          EXPECT_EQ(st.weights_step, from_head ? i - 1 : i);
        }
        const bool layer = j >= 1 && j <= s.n_layer;
        for (int64_t k = 0; k < s.n_micro_batches; ++k) {
          const auto key = [&](What w) {
            return std::make_tuple(static_cast<int>(w), static_cast<int>(i), static_cast<int>(j),
                                   static_cast<int>(k));
          };
          EXPECT_EQ(loads.count(key(What::kKv)), c.plan.kv_off && layer && i >= 1 ? 1u : 0u);
          EXPECT_EQ(stores.count(key(What::kKv)), c.plan.kv_off && layer ? 1u : 0u);
          EXPECT_EQ(loads.count(key(What::kActivations)), c.plan.act_off && j >= 1 ? 1u : 0u);
          EXPECT_EQ(stores.count(key(What::kActivations)),
                    c.plan.act_off && j < s.n_columns() - 1 ? 1u : 0u);
        }
      }
    }
  }
}

// With two weight buffers, the load of column j may only overwrite the
// buffer of column j-2: all of its computes come before the step carrying
// the load.
TEST(ScheduleTransfers, WeightLoadsRespectDoubleBuffering) {
  const ScheduleShape s{3, 4, 3};
  for (bool tied : {false, true}) {
    TransferPlan plan;
    plan.weights_off.assign(static_cast<size_t>(s.n_columns()), true);
    plan.tied_embeddings = tied;
    const auto steps = make_block_schedule(s, plan);
    // (i, j) of each load -> its last reader, from the steps' own account.
    std::map<std::pair<int, int>, int64_t> last_read;
    for (size_t idx = 0; idx < steps.size(); ++idx) {
      last_read[{steps[idx].weights_step, steps[idx].weights_column}] = static_cast<int64_t>(idx);
    }
    std::vector<std::pair<int64_t, int64_t>> order;  // (carried at, last read), in issue order
    for (size_t idx = 0; idx < steps.size(); ++idx) {
      for (const Transfer& t : steps[idx].loads) {
        ASSERT_TRUE(last_read.count({t.step, t.column})) << "a load nothing reads";
        order.emplace_back(static_cast<int64_t>(idx), last_read[{t.step, t.column}]);
      }
    }
    // Tied: the decode steps' embed columns load nothing.
    ASSERT_EQ(static_cast<int64_t>(order.size()),
              s.n_steps * s.n_columns() - (tied ? s.n_steps - 1 : 0));
    for (size_t m = 2; m < order.size(); ++m) {
      // Load m reuses the buffer of load m-2: every reader of that one
      // comes before the step carrying load m.
      EXPECT_GT(order[m].first, order[m - 2].second) << "load " << m << " tied " << tied;
    }
  }
}

TEST(ScheduleTransfers, DryRunPrint) {
  TransferPlan plan;
  plan.weights_off = {false, true, true};  // embed in RAM, layer 0 and head on disk
  plan.kv_off = true;
  const auto steps = make_block_schedule({2, 1, 2}, plan);
  EXPECT_EQ(format_schedule(steps),
            "i=0 j=0 (embed) k=0 load(weights j=1 k=0)\n"
            "i=0 j=0 (embed) k=1\n"
            "i=0 j=1 (layer 0) k=0 load(weights j=2 k=0)\n"
            "i=0 j=1 (layer 0) k=1 store(kv j=1 k=0)\n"
            "i=0 j=2 (head) k=0 store(kv j=1 k=1)\n"
            "i=0 j=2 (head) k=1\n"
            "i=1 j=0 (embed) k=0 load(weights j=1 k=0)\n"
            "i=1 j=0 (embed) k=1 load(kv j=1 k=0)\n"
            "i=1 j=1 (layer 0) k=0 load(kv j=1 k=1) load(weights j=2 k=0)\n"
            "i=1 j=1 (layer 0) k=1 store(kv j=1 k=0)\n"
            "i=1 j=2 (head) k=0 store(kv j=1 k=1)\n"
            "i=1 j=2 (head) k=1\n");
  // A block that takes KV pages kept from the block before loads them in
  // its prefill too; a first load step other than 0 or 1 is refused.
  plan.kv_first_load_step = 0;
  EXPECT_EQ(format_schedule(make_block_schedule({1, 1, 2}, plan)),
            "i=0 j=0 (embed) k=0 load(weights j=1 k=0)\n"
            "i=0 j=0 (embed) k=1 load(kv j=1 k=0)\n"
            "i=0 j=1 (layer 0) k=0 load(kv j=1 k=1) load(weights j=2 k=0)\n"
            "i=0 j=1 (layer 0) k=1 store(kv j=1 k=0)\n"
            "i=0 j=2 (head) k=0 store(kv j=1 k=1)\n"
            "i=0 j=2 (head) k=1\n");
  plan.kv_first_load_step = 2;
  EXPECT_THROW(make_block_schedule({1, 1, 2}, plan), Error);
  plan.kv_first_load_step = 1;
  // The embed column's weights of the next step ride on the head of this one.
  plan.weights_off = {true, false, false};
  plan.kv_off = false;
  const auto wrap = make_block_schedule({2, 1, 1}, plan);
  EXPECT_EQ(format_schedule(wrap),
            "i=0 j=0 (embed) k=0 load(weights j=0 k=0)\n"
            "i=0 j=1 (layer 0) k=0\n"
            "i=0 j=2 (head) k=0 load(weights i=1 j=0 k=0)\n"
            "i=1 j=0 (embed) k=0\n"
            "i=1 j=1 (layer 0) k=0\n"
            "i=1 j=2 (head) k=0\n");
}

TEST(ScheduleTransfers, DryRunPrintTiedEmbeddings) {
  TransferPlan plan;
  plan.weights_off = {true, true, true, true};
  plan.tied_embeddings = true;
  const auto steps = make_block_schedule({2, 2, 1}, plan);
  EXPECT_EQ(format_schedule(steps),
            "i=0 j=0 (embed) k=0 load(weights j=0 k=0) load(weights j=1 k=0)\n"
            "i=0 j=1 (layer 0) k=0 load(weights j=2 k=0)\n"
            "i=0 j=2 (layer 1) k=0 load(weights j=3 k=0)\n"
            "i=0 j=3 (head) k=0 load(weights i=1 j=1 k=0)\n"
            "i=1 j=0 (embed) k=0 weights(i=0 j=3)\n"
            "i=1 j=1 (layer 0) k=0 load(weights j=2 k=0)\n"
            "i=1 j=2 (layer 1) k=0 load(weights j=3 k=0)\n"
            "i=1 j=3 (head) k=0\n");
  // The table must be in one place.
  plan.weights_off = {true, true, true, false};
  EXPECT_THROW(make_block_schedule({2, 2, 1}, plan), Error);
}

TEST(ScheduleTransfers, EmptyPlanIsThePlainSchedule) {
  const ScheduleShape s{3, 2, 2};
  const auto a = make_block_schedule(s);
  const auto b = make_block_schedule(s, TransferPlan{});
  EXPECT_EQ(format_schedule(a), format_schedule(b));
  TransferPlan bad;
  bad.weights_off.assign(3, true);  // the schedule has 4 columns
  EXPECT_THROW(make_block_schedule(s, bad), Error);
}

}  // namespace
}  // namespace strata
