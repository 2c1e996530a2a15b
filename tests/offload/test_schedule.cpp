// The zig-zag block schedule: order, coverage, column-major walk, printing.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "core/error.h"
#include "offload/schedule.h"

namespace strata {
namespace {

TEST(Schedule, VisitsEveryComputeOnceInZigZagOrder) {
  for (const ScheduleShape s : {ScheduleShape{1, 1, 1}, ScheduleShape{3, 2, 4},
                                ScheduleShape{5, 7, 1}, ScheduleShape{2, 30, 3}}) {
    const auto steps = make_block_schedule(s);
    ASSERT_EQ(static_cast<int64_t>(steps.size()), s.n_steps * (s.n_layer + 2) * s.n_micro_batches);
    std::set<std::tuple<int, int, int>> seen;
    for (size_t idx = 0; idx < steps.size(); ++idx) {
      const ScheduleStep& st = steps[idx];
      EXPECT_TRUE(seen.emplace(st.step, st.column, st.micro_batch).second)
          << "duplicate (" << st.step << "," << st.column << "," << st.micro_batch << ")";
      // Index = ((i * n_columns) + j) * n_mb + k: each column visits all
      // micro-batches before the next column, each step all columns.
      EXPECT_EQ(static_cast<int64_t>(idx),
                (st.step * s.n_columns() + st.column) * s.n_micro_batches + st.micro_batch);
      if (idx > 0) {
        const ScheduleStep& prev = steps[idx - 1];
        const bool same_column = prev.step == st.step && prev.column == st.column;
        if (same_column) {
          EXPECT_EQ(st.micro_batch, prev.micro_batch + 1);
        } else {
          EXPECT_EQ(prev.micro_batch, s.n_micro_batches - 1)
              << "column left before its last micro-batch";
          EXPECT_EQ(st.micro_batch, 0);
        }
      }
      // Column kinds: embed first, head last, layers in between.
      if (st.column == 0) {
        EXPECT_EQ(st.kind, StageKind::kEmbed);
        EXPECT_EQ(st.layer, -1);
      } else if (st.column == s.n_layer + 1) {
        EXPECT_EQ(st.kind, StageKind::kHead);
        EXPECT_EQ(st.layer, -1);
      } else {
        EXPECT_EQ(st.kind, StageKind::kLayer);
        EXPECT_EQ(st.layer, st.column - 1);
      }
      EXPECT_TRUE(st.loads.empty());
      EXPECT_TRUE(st.stores.empty());
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), s.n_compute());
  }
}

TEST(Schedule, PrintsOneLinePerStep) {
  const auto steps = make_block_schedule({2, 1, 2});
  EXPECT_EQ(format_schedule(steps),
            "i=0 j=0 (embed) k=0\n"
            "i=0 j=0 (embed) k=1\n"
            "i=0 j=1 (layer 0) k=0\n"
            "i=0 j=1 (layer 0) k=1\n"
            "i=0 j=2 (head) k=0\n"
            "i=0 j=2 (head) k=1\n"
            "i=1 j=0 (embed) k=0\n"
            "i=1 j=0 (embed) k=1\n"
            "i=1 j=1 (layer 0) k=0\n"
            "i=1 j=1 (layer 0) k=1\n"
            "i=1 j=2 (head) k=0\n"
            "i=1 j=2 (head) k=1\n");
}

TEST(Schedule, PrintsTheTransfersAttachedToAStep) {
  auto steps = make_block_schedule({1, 1, 1});
  steps[1].loads.push_back({Transfer::What::kWeights, 2, 0});
  steps[1].stores.push_back({Transfer::What::kKv, 1, 0});
  EXPECT_EQ(format_schedule({steps[1]}),
            "i=0 j=1 (layer 0) k=0 load(weights j=2 k=0) store(kv j=1 k=0)\n");
}

TEST(Schedule, RejectsEmptyShapes) {
  EXPECT_THROW(make_block_schedule({0, 2, 2}), Error);
  EXPECT_THROW(make_block_schedule({2, 0, 2}), Error);
  EXPECT_THROW(make_block_schedule({2, 2, 0}), Error);
}

}  // namespace
}  // namespace strata
