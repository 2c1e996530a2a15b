// Sparse decode attention in the engine (--sparse-budget) on the llama
// fixture (3 layers: the third is sparse; GQA 4 query heads over 2 kv heads;
// pages of 4 tokens): every placement and micro-batch shape gives the bits of
// the all-in-RAM sparse run; a sequence whose pages fit the budget gets the
// dense run's logits bit for bit, even batched with longer ones; a longer
// sequence's decode logits move (the selection is in effect) and the stats
// count the KV bytes it skipped; with KV on disk only the selected pages are
// read; budgets below a
// page, on a device without sparse attention, and negative ones are refused
// with the flag's name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/separate_memory_backend.h"
#include "offload/device.h"
#include "offload/fixture_runs.h"
#include "offload/offload_engine.h"

namespace strata {
namespace {

using namespace fixture_runs;

constexpr int64_t kBudget = 12;  // tokens: 3 pages of 4

EngineOptions sparse_options(const Fixture& f, int64_t g, int64_t k, double w_disk, bool kv_disk,
                             const fs::path& dir, int64_t budget = kBudget) {
  EngineOptions o = fixture_options(f, g, k, dir);
  o.placement.set(DataKind::kWeights, 0, 1 - w_disk);
  o.placement.set(DataKind::kKv, 0, kv_disk ? 0 : 1);
  o.placement.set(DataKind::kAct, 0, 1);
  o.sparse_budget = budget;
  return o;
}

TEST(SparseEngine, EveryPlacementGivesTheBitsOfTheAllInRamRun) {
  const Fixture f = load("llama");
  TempDir dir("sparse-grid");
  for (const bool first : {true, false}) {
    for (const auto& [g, k] : {std::pair<int64_t, int64_t>{1, 1}, {4, 2}}) {
      EngineOptions ref_o = sparse_options(f, g, k, 0, false, dir.path);
      ref_o.sparse_keep_first = first;
      const GenRun ref = generate(*make_engine(*f.model, ref_o), f.prompts);
      for (const double w_disk : {0.0, 1.0}) {
        for (const bool kv_disk : {false, true}) {
          if (w_disk == 0 && !kv_disk) continue;
          EngineOptions o = sparse_options(f, g, k, w_disk, kv_disk, dir.path);
          o.sparse_keep_first = first;
          const GenRun r = generate(*make_engine(*f.model, o), f.prompts);
          expect_same_bits(ref, r,
                           std::to_string(g) + "x" + std::to_string(k) + " weights on disk " +
                               std::to_string(w_disk) + (kv_disk ? " KV on disk" : " KV in RAM") +
                               (first ? " first page kept" : ""));
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(SparseEngine, SequencesWithinTheBudgetGetTheDenseBitsAndLongerOnesMove) {
  const Fixture f = load("llama");
  TempDir dir("sparse-dense");
  const int64_t page = fixture_options(f, 1, 1, dir.path).page_size;
  const int64_t V = f.model->config().n_vocab;
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{1, 1}, {4, 2}}) {
    const GenRun dense =
        generate(*make_engine(*f.model, sparse_options(f, g, k, 0, false, dir.path, 0)), f.prompts);
    const GenRun sparse =
        generate(*make_engine(*f.model, sparse_options(f, g, k, 0, false, dir.path)), f.prompts);
    int64_t within = 0, moved = 0, beyond = 0;
    for (size_t s = 0; s < f.prompts.size(); ++s) {
      const int64_t prompt = static_cast<int64_t>(f.prompts[s].size());
      // Steps up to the first one beyond the budget see the same tokens.
      for (size_t t = 0; t < dense.logits[s].size(); ++t) {
        const int64_t len = prompt + static_cast<int64_t>(t);                   // keys at step t
        const bool fits = (len + page - 1) / page <= kBudget / page || t == 0;  // prefill: dense
        const bool same = std::memcmp(dense.logits[s][t].data(), sparse.logits[s][t].data(),
                                      static_cast<size_t>(V) * sizeof(float)) == 0;
        if (fits) {
          EXPECT_TRUE(same) << g << "x" << k << " sequence " << s << " step " << t;
          ++within;
        } else {
          ++beyond;
          moved += same ? 0 : 1;
          break;  // later steps follow other tokens
        }
      }
    }
    // The stats count what decode attention read and skipped: the same
    // lengths either way, so the sparse run's two add up to the dense run's.
    EXPECT_EQ(dense.stats.kv_skipped_bytes, 0u);
    EXPECT_GT(sparse.stats.kv_skipped_bytes, 0u);
    EXPECT_EQ(sparse.stats.kv_attended_bytes + sparse.stats.kv_skipped_bytes,
              dense.stats.kv_attended_bytes);
    EXPECT_GT(within, 20);
    EXPECT_GT(beyond, 3);
    EXPECT_EQ(moved, beyond) << "a sequence beyond the budget kept the dense logits";
  }
}

// KV on disk: a sparse layer reads only the pages its sequences select
// (prefetching the last step's selection, the rest read after the
// selection), so the run reads fewer KV bytes from disk than the dense run,
// with the same bits as the sparse run in RAM (the grid above).
TEST(SparseEngine, KvOnDiskReadsOnlyTheSelectedPages) {
  const Fixture f = load("llama");
  TempDir dir("sparse-disk");
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{1, 1}, {4, 2}}) {
    const GenRun dense =
        generate(*make_engine(*f.model, sparse_options(f, g, k, 0, true, dir.path, 0)), f.prompts);
    const GenRun sparse =
        generate(*make_engine(*f.model, sparse_options(f, g, k, 0, true, dir.path)), f.prompts);
    const std::string what = std::to_string(g) + "x" + std::to_string(k);
    ASSERT_TRUE(dense.stats.links.contains("disk->cpu")) << what;
    ASSERT_TRUE(sparse.stats.links.contains("disk->cpu")) << what;
    const uint64_t dense_read = dense.stats.links.at("disk->cpu").bytes;
    const uint64_t sparse_read = sparse.stats.links.at("disk->cpu").bytes;
    EXPECT_LT(sparse_read, dense_read) << what;
    // Dense reads nothing selectively; sparse finds most selected pages
    // prefetched by the last step's selection and reads the rest after.
    EXPECT_EQ(dense.stats.sparse_hits + dense.stats.sparse_misses, 0u) << what;
    EXPECT_GT(sparse.stats.sparse_misses, 0u) << what;  // the first sparse step has no history
    EXPECT_GT(sparse.stats.sparse_hits, sparse.stats.sparse_misses) << what;
  }
}

TEST(SparseEngine, BudgetsItCannotRunAreRefusedNamingTheFlag) {
  const Fixture f = load("llama");
  TempDir dir("sparse-refused");
  auto message = [&](const EngineOptions& o, bool separate) {
    try {
      if (separate) {
        // The stand-in for a GPU (kernels/cpu/separate_memory_backend.h).
        ComputeDevice d;
        d.backend = std::make_unique<SeparateMemoryBackend>(2, uint64_t{1} << 30);
        d.host_allocator = make_host_allocator();
        d.default_device_bytes = uint64_t{256} << 20;
        make_engine(*f.model, o, std::move(d));
      } else {
        make_engine(*f.model, o);
      }
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(sparse_options(f, 1, 1, 0, false, dir.path, 3), false)
                .find("--sparse-budget 3: below one KV page of 4 tokens"),
            std::string::npos);
  EXPECT_NE(message(sparse_options(f, 1, 1, 0, false, dir.path, -1), false)
                .find("--sparse-budget -1: must not be negative"),
            std::string::npos);
  EngineOptions o = sparse_options(f, 1, 1, 0, false, dir.path);
  o.placement = Placement{};
  const std::string sep = message(o, true);
  EXPECT_NE(sep.find("--sparse-budget 12: sparse attention runs on the CPU only"),
            std::string::npos)
      << sep;
}

}  // namespace
}  // namespace strata
