// Generation with weights and KV pages on disk against the all-in-RAM run,
// on every fixture model, for a grid of placements (weights 0/50/100% on
// disk, KV in RAM or on disk, activations in RAM) and micro-batch shapes
// (1x1, 2x3, 4x2): the same tokens and bit-identical logits at every step
// when the micro-batch sizes are the same (a placement moves bytes, never
// the arithmetic), the bytes each link carries, and logits within f32
// rounding across micro-batch sizes (bound derived below). Also: budgets
// too small fail before any work with the needed size, an unwritable
// offload directory fails with its name, and the trace of a run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "offload/engine_goldens.h"
#include "offload/fixture_runs.h"
#include "offload/offload_engine.h"
#include "offload/offload_test_util.h"
#include "offload/pack.h"
#include "offload/trace.h"
#include "offload/weight_placement.h"

namespace strata {
namespace {

using namespace fixture_runs;
namespace fs = std::filesystem;

// The six fractions: weights and KV on disk as asked, activations in RAM.
EngineOptions options(const Fixture& f, int64_t g, int64_t k, double w_disk, bool kv_disk,
                      const fs::path& dir, DType compute = DType::kF32) {
  EngineOptions o = fixture_options(f, g, k, dir);
  o.compute_dtype = compute;
  o.kv_dtype = default_kv_dtype(compute);
  o.placement.set(DataKind::kWeights, 0, 1 - w_disk);
  o.placement.set(DataKind::kKv, 0, kv_disk ? 0 : 1);
  o.placement.set(DataKind::kAct, 0, 1);
  return o;
}

// The weight bytes a block of `n_steps` steps reads from disk: every step
// reads the disk share of every column (whole pages), the head's being the
// embeddings' when tied; then the next step's embed column computes from
// the head's read and reads nothing.
uint64_t weight_bytes_per_block(const Fixture& f, double w_disk, int64_t n_steps) {
  Placement fr;
  fr.set(DataKind::kWeights, 0, 1 - w_disk);
  const WeightPlacement wp = place_weights(f.model->desc(), PackOptions{}, fr);
  auto read = [&](const std::string& unit) -> uint64_t {
    const UnitPlacement* u = wp.find(unit);
    return u ? (u->disk_read_bytes + 4095) / 4096 * 4096 : 0;
  };
  uint64_t layers = 0;
  for (int64_t l = 0; l < f.model->config().n_layer; ++l)
    layers += read("blk." + std::to_string(l));
  const uint64_t steps = static_cast<uint64_t>(n_steps);
  if (f.model->config().tie_embeddings) return read("embed") * (steps + 1) + layers * steps;
  return (read("embed") + layers + read("output")) * steps;
}

class OffloadGrid : public ::testing::TestWithParam<std::string> {};

TEST_P(OffloadGrid, EveryPlacementGivesTheTokensAndLogitsOfTheAllInRamRun) {
  const Fixture f = load(GetParam());
  TempDir dir("grid");
  std::map<std::pair<int64_t, int64_t>, GenRun> refs;
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{1, 1}, {2, 3}, {4, 2}}) {
    auto ref_engine = make_engine(*f.model, options(f, g, k, 0, false, dir.path));
    const GenRun ref = generate(*ref_engine, f.prompts);
    EXPECT_TRUE(ref.stats.links.empty()) << "the all-in-RAM run moves nothing";
    for (double w_disk : {0.0, 0.5, 1.0}) {
      for (bool kv_disk : {false, true}) {
        if (w_disk == 0 && !kv_disk) continue;
        const std::string what = f.name + " " + std::to_string(g) + "x" + std::to_string(k) +
                                 " weights " + std::to_string(w_disk) + " on disk, KV " +
                                 (kv_disk ? "on disk" : "in RAM");
        auto e = make_engine(*f.model, options(f, g, k, w_disk, kv_disk, dir.path));
        const GenRun r = generate(*e, f.prompts);
        expect_same_bits(ref, r, what);
        if (::testing::Test::HasFatalFailure()) return;
        // Bytes on the links: the weights' disk share once per column per
        // step; KV pages written as they fill and read back in decode.
        const int64_t n_blocks =
            (static_cast<int64_t>(f.prompts.size()) + e->block_size() - 1) / e->block_size();
        const uint64_t w_read =
            static_cast<uint64_t>(n_blocks) * weight_bytes_per_block(f, w_disk, kNewTokens);
        if (!kv_disk) {
          EXPECT_EQ(link_bytes(r.stats, "disk->cpu"), w_read) << what;
          EXPECT_EQ(link_bytes(r.stats, "cpu->disk"), 0u) << what;
        } else {
          EXPECT_GT(link_bytes(r.stats, "disk->cpu"), w_read) << what;
          EXPECT_GT(link_bytes(r.stats, "cpu->disk"), 0u) << what;
          EXPECT_GT(r.stats.peak_bytes.at("disk"), 0u) << what;
        }
        if (w_disk > 0) {
          EXPECT_GT(w_read, 0u) << what;
        }
        EXPECT_GT(r.stats.queue_busy_s.at("load"), 0) << what;
      }
    }
    refs[{g, k}] = ref;
  }
  // Across micro-batch sizes: within f32 rounding of the matrix products.
  const GenRun& one = refs.at({1, 1});
  for (const auto& [shape, r] : refs) {
    double max_d = 0, max_ref = 0;
    for (size_t s = 0; s < f.prompts.size(); ++s) {
      for (float x : one.logits[s][0])
        max_ref = std::max(max_ref, std::fabs(static_cast<double>(x)));
    }
    const double bound = micro_batch_bound(f.model->config(), max_ref);
    for (size_t s = 0; s < f.prompts.size(); ++s) {
      for (size_t v = 0; v < one.logits[s][0].size(); ++v) {
        const double d = std::fabs(static_cast<double>(r.logits[s][0][v]) - one.logits[s][0][v]);
        max_d = std::max(max_d, d);
        ASSERT_LE(d, bound) << f.name << " " << shape.first << "x" << shape.second << " sequence "
                            << s << " token " << v;
      }
    }
    std::printf("[ %s %ldx%ld ] prefill logits vs 1x1: max|d| %.3g, bound %.3g\n", f.name.c_str(),
                static_cast<long>(shape.first), static_cast<long>(shape.second), max_d, bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OffloadGrid,
                         ::testing::Values("opt", "llama", "qwen2", "llama-gguf"),
                         fixture_param_name);

// bf16 compute with f16 KV: the placement still changes nothing.
TEST(Offload, Bf16ComputeIsBitIdenticalToo) {
  const Fixture f = load("llama");
  TempDir dir("bf16");
  auto ref_engine = make_engine(*f.model, options(f, 2, 3, 0, false, dir.path, DType::kBF16));
  auto e = make_engine(*f.model, options(f, 2, 3, 0.5, true, dir.path, DType::kBF16));
  const GenRun ref = generate(*ref_engine, f.prompts), r = generate(*e, f.prompts);
  ASSERT_EQ(r.tokens, ref.tokens);
  for (size_t s = 0; s < f.prompts.size(); ++s) {
    for (size_t i = 0; i < r.logits[s].size(); ++i) ASSERT_EQ(r.logits[s][i], ref.logits[s][i]);
  }
}

TEST(Offload, ScoringWithWeightsAndKvOnDiskEqualsAllInRam) {
  const Fixture f = load("qwen2");
  TempDir dir("score");
  auto ref_engine = make_engine(*f.model, options(f, 1, 1, 0, false, dir.path));
  auto e = make_engine(*f.model, options(f, 1, 1, 1.0, true, dir.path));
  const std::vector<int32_t> seq = f.prompts[7];
  EXPECT_EQ(e->score(seq), ref_engine->score(seq));
  EXPECT_GT(link_bytes(e->stats(), "cpu->disk"), 0u) << "full pages of the scored sequence";
}

// The trace of a run: one span per compute step, load and store.
TEST(Offload, TraceHasASpanForEveryComputeLoadAndStore) {
  const Fixture f = load("llama");
  TempDir dir("trace");
  EngineOptions o = options(f, 2, 2, 0.5, true, dir.path);
  o.trace = std::make_shared<Trace>();
  auto e = make_engine(*f.model, o);
  std::vector<std::vector<int32_t>> four(f.prompts.begin(), f.prompts.begin() + 4);
  generate(*e, four);
  const int64_t n_col = f.model->config().n_layer + 2;
  int64_t compute = 0, load = 0, store = 0;
  for (const Trace::Span& s : o.trace->spans()) {
    compute += s.queue == "compute";
    load += s.queue == "load";
    store += s.queue == "store";
    EXPECT_GE(s.dur_us, 0);
  }
  EXPECT_EQ(compute, kNewTokens * n_col * 2);
  EXPECT_GE(load, kNewTokens * (n_col - 2) / 2);
  EXPECT_GT(store, 0);
  const auto j = nlohmann::json::parse(o.trace->to_json());
  int64_t x = 0;
  for (const auto& ev : j["traceEvents"]) x += ev["ph"] == "X";
  EXPECT_EQ(x, compute + load + store);
}

TEST(Offload, BudgetsTooSmallFailBeforeAnyWorkWithTheNeededSize) {
  const Fixture f = load("llama");
  TempDir dir("budget");
  {
    EngineOptions o = options(f, 4, 2, 0, false, dir.path);
    o.cpu_mem = 64 << 10;  // the weights alone are larger
    try {
      make_engine(*f.model, o);
      FAIL() << "expected an Error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("RAM budget 64.0K"), std::string::npos) << m;
      EXPECT_NE(m.find("is below the"), std::string::npos) << m;
      EXPECT_NE(m.find("--cpu-mem"), std::string::npos) << m;
    }
    EXPECT_FALSE(fs::exists(dir.path / f.name)) << "nothing was built";
  }
  {
    // Enough for the weights, not for a planned block of 8 x (400 + 100).
    EngineOptions o = options(f, 4, 2, 0, false, dir.path);
    o.cpu_mem = 2 << 20;
    o.plan_prompt_tokens = 400;
    o.plan_new_tokens = 100;
    try {
      make_engine(*f.model, o);
      FAIL() << "expected an Error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("a block of 8 sequences of up to 499 tokens needs"), std::string::npos) << m;
      EXPECT_NE(m.find("KV cache"), std::string::npos) << m;
    }
    // Without the plan the engine is made, and the block fails before it computes.
    o.plan_prompt_tokens = o.plan_new_tokens = 0;
    auto e = make_engine(*f.model, o);
    std::vector<SeqInput> in(8, SeqInput{std::vector<int32_t>(400, 5), 100});
    bool stepped = false;
    EXPECT_THROW(e->run_block(in, [&](int, std::span<const int32_t>, const float*,
                                      std::span<SeqAction>) { stepped = true; }),
                 Error);
    EXPECT_FALSE(stepped);
    EXPECT_EQ(e->stats().generated_tokens, 0);
    // A block that fits still runs on the same engine.
    const GenRun r = generate(*e, {f.prompts[0]});
    EXPECT_EQ(r.tokens[0].size(), static_cast<size_t>(kNewTokens));
  }
  {
    EngineOptions o = options(f, 1, 1, 1.0, false, dir.path);
    o.disk_mem = 4096;
    try {
      make_engine(*f.model, o);
      FAIL() << "expected an Error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("disk budget 4.00K (--disk-mem"), std::string::npos) << m;
      EXPECT_NE(m.find("of weights this placement puts on disk"), std::string::npos) << m;
    }
  }
  {
    EngineOptions o = options(f, 1, 1, 0, false, dir.path);
    o.placement[Share::kActCpu] = 0.5;
    EXPECT_THROW(make_engine(*f.model, o), Error);  // activations on disk: refused clearly
    o.placement[Share::kActCpu] = 1;
    o.placement[Share::kWCpu] = 0.7;
    o.placement[Share::kWGpu] = 0.7;
    EXPECT_THROW(make_engine(*f.model, o), Error);
  }
}

TEST(Offload, UnwritableOffloadDirectoryFailsNamingIt) {
  const Fixture f = load("opt");
  TempDir dir("ro");
  const fs::path ro = dir.path / "ro";
  fs::create_directories(ro);
  ::chmod(ro.c_str(), 0555);
  offload_test::NoPermissionOverride no_override;
  if (!offload_test::dir_is_unwritable(ro))
    GTEST_SKIP() << "cannot make a read-only directory here";
  for (const auto& [w_disk, kv_disk] : {std::pair{1.0, false}, {0.0, true}}) {
    EngineOptions o = options(f, 2, 1, w_disk, kv_disk, dir.path);
    o.offload_dir = (ro / "sub").string();
    try {
      auto e = make_engine(*f.model, o);
      generate(*e, {f.prompts[2]});
      FAIL() << "expected an Error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(ro.string()), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace strata
