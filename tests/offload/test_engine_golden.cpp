// The engine against transformers on the tiny fixtures (opt, llama, qwen2,
// llama-gguf, and the K-quant GGUFs llama-quantize wrote: Q4_K_M, Q5_K_M,
// Q6_K; tests/data/golden/*.json): f32 logits at the last 4 positions
// of the 3 prompts within max|d| <= 1e-4 max|logit| + 1e-5, the 16 greedy
// tokens identical, batching (one block; micro-batches 2+1) giving the same
// tokens as each prompt alone, and bf16 compute within its derived bound
// (engine_test_util.h). Also the engine's contract: errors for prompts that
// do not fit, KV pages freed as sequences finish, active lists, stats.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/page_pool.h"
#include "model/model.h"
#include "offload/engine_goldens.h"
#include "offload/offload_engine.h"

namespace strata {
namespace {

using test::f32_logit_bound;

struct Fixture {
  std::string name;
  nlohmann::json golden;
  std::unique_ptr<Model> model;
  std::vector<std::vector<int32_t>> prompts;
};

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.name = name;
  f.golden = test::load_json(std::string(STRATA_TEST_DATA) + "/golden/" + name + ".json");
  f.model = Model::open(std::string(STRATA_TEST_DATA) + "/" + f.golden["model"].get<std::string>());
  for (const auto& p : f.golden["prompts"])
    f.prompts.push_back(p["ids"].get<std::vector<int32_t>>());
  return f;
}

EngineOptions options(DType compute, int64_t batch = 4, int64_t n_batches = 1) {
  EngineOptions o;
  o.compute_dtype = compute;
  o.kv_dtype = default_kv_dtype(compute);
  o.gpu_batch_size = batch;
  o.num_gpu_batches = n_batches;
  o.threads = 2;
  o.kv_budget_bytes = uint64_t{64} << 20;
  return o;
}

struct Deviation {
  double max_abs_diff = 0;
  double max_abs_ref = 0;
};

// Compares engine logits (score: every position) with the golden rows at
// logits_positions, every element against `bound(max|ref|)` of its prompt.
template <typename Bound>
Deviation check_logits(const Fixture& f, Engine& engine, Bound bound, const std::string& what) {
  Deviation all;
  const int64_t V = f.golden["n_vocab"].get<int64_t>();
  EXPECT_EQ(engine.config().n_vocab, V);
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    const auto& gp = f.golden["prompts"][p];
    const std::vector<float> logits = engine.score(f.prompts[p]);
    EXPECT_EQ(static_cast<int64_t>(logits.size()), static_cast<int64_t>(f.prompts[p].size()) * V);
    const auto positions = gp["logits_positions"].get<std::vector<int64_t>>();
    double max_ref = 0;
    for (const auto& row : gp["logits"]) {
      for (const auto& x : row) max_ref = std::max(max_ref, std::fabs(x.get<double>()));
    }
    const double tol = bound(max_ref);
    double max_diff = 0;
    int failures = 0;
    for (size_t r = 0; r < positions.size(); ++r) {
      const auto ref = gp["logits"][r].get<std::vector<double>>();
      EXPECT_EQ(static_cast<int64_t>(ref.size()), V);
      if (static_cast<int64_t>(ref.size()) != V) return all;
      for (int64_t v = 0; v < V; ++v) {
        const double got = logits[static_cast<size_t>(positions[r] * V + v)];
        const double d = std::fabs(got - ref[static_cast<size_t>(v)]);
        max_diff = std::max(max_diff, std::isnan(d) ? INFINITY : d);
        if (!(d <= tol) && failures++ < 5) {
          ADD_FAILURE() << f.name << " " << what << " prompt " << p << " position " << positions[r]
                        << " token " << v << ": " << got << " vs " << ref[static_cast<size_t>(v)]
                        << " (|d| " << d << " > " << tol << ")";
        }
      }
    }
    std::printf("[ %s %s ] prompt %zu: max|d| %.3g, max|logit| %.3g, bound %.3g (%.1f%% of it)\n",
                f.name.c_str(), what.c_str(), p, max_diff, max_ref, tol, 100.0 * max_diff / tol);
    all.max_abs_diff = std::max(all.max_abs_diff, max_diff);
    all.max_abs_ref = std::max(all.max_abs_ref, max_ref);
  }
  return all;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, F32LogitsMatchTransformers) {
  const Fixture f = load_fixture(GetParam());
  auto engine = make_engine(*f.model, options(DType::kF32));
  check_logits(f, *engine, f32_logit_bound, "f32");
  // The prefill of run_block computes the last position's logits on its own
  // path (the head over selected rows): the same values.
  const int64_t V = engine->config().n_vocab;
  const test::GreedyRun g = test::greedy(*engine, f.prompts, 1);
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    const auto& gp = f.golden["prompts"][p];
    const auto last = gp["logits"][3].get<std::vector<double>>();
    ASSERT_EQ(gp["logits_positions"][3].get<size_t>(), f.prompts[p].size() - 1);
    double max_ref = 0;
    for (double x : last) max_ref = std::max(max_ref, std::fabs(x));
    ASSERT_EQ(static_cast<int64_t>(g.first_logits[p].size()), V);
    for (int64_t v = 0; v < V; ++v) {
      ASSERT_LE(std::fabs(g.first_logits[p][static_cast<size_t>(v)] - last[static_cast<size_t>(v)]),
                f32_logit_bound(max_ref))
          << f.name << " prompt " << p << " token " << v;
    }
  }
}

TEST_P(Golden, F32GreedyTokensMatchTransformers) {
  const Fixture f = load_fixture(GetParam());
  auto engine = make_engine(*f.model, options(DType::kF32));
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    const auto want = f.golden["prompts"][p]["greedy"].get<std::vector<int32_t>>();
    const test::GreedyRun g = test::greedy(*engine, {f.prompts[p]}, 16);
    EXPECT_EQ(g.tokens[0], want) << f.name << " prompt " << p;
    EXPECT_EQ(g.active_steps.size(), 16u);
  }
}

TEST_P(Golden, BatchedGivesTheSameTokensAsAlone) {
  const Fixture f = load_fixture(GetParam());
  auto alone_engine = make_engine(*f.model, options(DType::kF32, 1, 1));
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : f.prompts) alone.push_back(test::greedy(*alone_engine, {p}, 16).tokens[0]);
  // One block of 3 in one micro-batch, then micro-batches of 2 + 1.
  for (auto [batch, n_batches] : {std::pair<int64_t, int64_t>{3, 1}, {2, 2}}) {
    auto engine = make_engine(*f.model, options(DType::kF32, batch, n_batches));
    const test::GreedyRun g = test::greedy(*engine, f.prompts, 16);
    for (size_t p = 0; p < f.prompts.size(); ++p) {
      EXPECT_EQ(g.tokens[p], alone[p])
          << f.name << " prompt " << p << " in " << batch << " x " << n_batches;
      EXPECT_EQ(g.tokens[p], f.golden["prompts"][p]["greedy"].get<std::vector<int32_t>>());
    }
    ASSERT_EQ(g.active_steps.size(), 16u);
    for (const auto& a : g.active_steps) EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  }
}

// A reduced-precision compute dtype against transformers, within its
// derived bound (engine_goldens.h) for the fixture's layer count.
void check_reduced(const std::string& fixture, DType compute, const char* what,
                   double (*bound)(int64_t n_layer, double max_abs_logit)) {
  const Fixture f = load_fixture(fixture);
  auto engine = make_engine(*f.model, options(compute));
  const int64_t n_layer = engine->config().n_layer;
  const Deviation d = check_logits(
      f, *engine, [n_layer, bound](double m) { return bound(n_layer, m); }, what);
  std::printf("[ %s %s ] max|d| %.4g = %.3g of max|logit| %.3g over %lld layers\n", f.name.c_str(),
              what, d.max_abs_diff, d.max_abs_diff / d.max_abs_ref, d.max_abs_ref,
              static_cast<long long>(n_layer));
}

TEST_P(Golden, Bf16LogitsWithinTheDerivedBound) {
  check_reduced(GetParam(), DType::kBF16, "bf16", test::bf16_logit_bound);
}

// The int8 compute dtype (activations rounded to int8 per weight group,
// integer products with the quantized weights, K-quants included; float
// weights as bf16).
TEST_P(Golden, Int8LogitsWithinTheDerivedBound) {
  check_reduced(GetParam(), DType::kI8, "int8", test::int8_logit_bound);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden,
                         ::testing::Values("opt", "llama", "qwen2", "llama-gguf", "kquant-q4_k_m",
                                           "kquant-q5_k_m", "kquant-q6_k"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// ---- the engine's contract, on the llama fixture ----

class EngineContract : public ::testing::Test {
 protected:
  void SetUp() override { f_ = load_fixture("llama"); }
  Fixture f_;
};

TEST_F(EngineContract, PromptThatDoesNotFitTheContextIsAnErrorNamingTheLengths) {
  auto engine = make_engine(*f_.model, options(DType::kF32));
  const int64_t n_ctx = engine->config().n_ctx;
  std::vector<SeqInput> in(1);
  in[0].prompt.assign(static_cast<size_t>(n_ctx - 3), 5);
  in[0].max_new_tokens = 4;
  try {
    engine->run_block(in, [](int, std::span<const int32_t>, const float*, std::span<SeqAction>) {
      FAIL() << "no step may run";
    });
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(std::to_string(n_ctx - 3) + " tokens + 4 new tokens"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("context"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(n_ctx)), std::string::npos) << msg;
  }
  in[0].prompt.assign(static_cast<size_t>(n_ctx - 4), 5);  // fits exactly
  engine->run_block(in, [](int, std::span<const int32_t>, const float*, std::span<SeqAction> o) {
    for (auto& x : o) x.next_token = 1;
  });
  EXPECT_THROW(engine->score(std::vector<int32_t>(static_cast<size_t>(n_ctx + 1), 1)), Error);
  in[0].prompt = {1, 2, static_cast<int32_t>(engine->config().n_vocab)};
  EXPECT_THROW(engine->run_block(in, nullptr), Error);
  in[0].prompt.clear();
  EXPECT_THROW(engine->run_block(in, nullptr), Error);
  std::vector<SeqInput> too_many(static_cast<size_t>(engine->block_size() + 1), in[0]);
  EXPECT_THROW(engine->run_block(too_many, nullptr), Error);
}

TEST_F(EngineContract, KvBudgetTooSmallForTheBlockIsAnError) {
  EngineOptions o = options(DType::kF32, 3, 1);
  const ModelConfig& c = f_.model->config();
  KvGeometry g;
  g.n_layer = c.n_layer;
  g.n_kv_head = c.n_kv_head;
  g.head_dim = c.head_dim;
  g.dtype = o.kv_dtype;
  const uint64_t per_page = g.bytes_per_page();
  o.kv_budget_bytes = 3 * per_page;  // 3 pages: each of 3 sequences of 17..32 tokens needs 2
  auto engine = make_engine(*f_.model, o);
  std::vector<SeqInput> in(3);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].prompt.assign(20, static_cast<int32_t>(7 + i));  // no page shared
    in[i].max_new_tokens = 4;
  }
  try {
    engine->run_block(in, nullptr);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("holds 3 pages"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs 6"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lower the batch size"), std::string::npos) << msg;
  }
  in.resize(1);  // 2 pages: fits, and runs
  int steps = 0;
  engine->run_block(in, [&](int, std::span<const int32_t>, const float*, std::span<SeqAction> o) {
    ++steps;
    for (auto& x : o) x.next_token = 3;
  });
  EXPECT_EQ(steps, 4);
}

// Sequences that finish leave the block: their rows disappear from the
// active list and their pages return to the pool; max_new_tokens ends a
// sequence even when the caller does not.
TEST_F(EngineContract, FinishedSequencesLeaveAndFreeTheirPages) {
  std::vector<SeqInput> in(4);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].prompt = f_.prompts[i % 3];
    in[i].max_new_tokens = 6;
  }
  in[3].max_new_tokens = 3;
  // A budget of exactly the pages this block needs (5 + 6 - 1, 11 + 5, 23 +
  // 5, 5 + 2 tokens: 1 + 1 + 2 + 1 pages): a page leaked by one block makes
  // the next one fail.
  EngineOptions o = options(DType::kF32, 2, 2);
  KvGeometry g;
  g.n_layer = f_.model->config().n_layer;
  g.n_kv_head = f_.model->config().n_kv_head;
  g.head_dim = f_.model->config().head_dim;
  g.dtype = o.kv_dtype;
  o.kv_budget_bytes = 5 * g.bytes_per_page();
  auto engine = make_engine(*f_.model, o);
  std::vector<std::vector<int32_t>> active_per_step;
  const int64_t V = engine->config().n_vocab;
  engine->run_block(in, [&](int step, std::span<const int32_t> active, const float* logits,
                            std::span<SeqAction> out) {
    EXPECT_EQ(step, static_cast<int>(active_per_step.size()));
    active_per_step.emplace_back(active.begin(), active.end());
    for (size_t a = 0; a < active.size(); ++a) {
      out[a].next_token = test::argmax(logits + static_cast<int64_t>(a) * V, V);
      out[a].finished = active[a] == 1 && step == 1;  // sequence 1 stops after 2 tokens
    }
  });
  ASSERT_EQ(active_per_step.size(), 6u);
  EXPECT_EQ(active_per_step[0], (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(active_per_step[1], (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(active_per_step[2], (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(active_per_step[3], (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(active_per_step[5], (std::vector<int32_t>{0, 2}));
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.generated_tokens, 4 + 4 + 3 + 2 + 2 + 2);
  int64_t prompt_tokens = 0;
  for (const auto& x : in) prompt_tokens += static_cast<int64_t>(x.prompt.size());
  EXPECT_EQ(s.prompt_tokens, prompt_tokens);
  EXPECT_GT(s.prefill_s, 0);
  EXPECT_GT(s.decode_s, 0);
  EXPECT_GT(s.peak_bytes.at("cpu"), 0u);
  EXPECT_EQ(s.peak_bytes.at("cpu") >= 5 * g.bytes_per_page(), true);
  // Every page came back: the same block, needing the whole budget, runs again.
  for (int i = 0; i < 3; ++i) {
    engine->run_block(in, [&](int, std::span<const int32_t>, const float*, std::span<SeqAction> o) {
      for (auto& x : o) x.next_token = 2;
    });
  }
}

// The token a sequence is fed, and whether it continues, is the caller's:
// a sequence fed the golden greedy continuation by hand scores the same as
// the engine's own greedy run (KV cache vs. recompute: score() has no cache).
TEST_F(EngineContract, DecodeWithCacheEqualsScoringTheWholeSequence) {
  auto engine = make_engine(*f_.model, options(DType::kF32));
  const int64_t V = engine->config().n_vocab;
  const auto& prompt = f_.prompts[1];
  const auto greedy = f_.golden["prompts"][1]["greedy"].get<std::vector<int32_t>>();
  std::vector<std::vector<float>> step_logits;
  std::vector<SeqInput> in(1);
  in[0].prompt = prompt;
  in[0].max_new_tokens = 8;
  engine->run_block(
      in, [&](int step, std::span<const int32_t>, const float* logits, std::span<SeqAction> out) {
        step_logits.emplace_back(logits, logits + V);
        out[0].next_token = greedy[static_cast<size_t>(step)];
      });
  std::vector<int32_t> full = prompt;
  full.insert(full.end(), greedy.begin(), greedy.begin() + 7);
  const std::vector<float> scored = engine->score(full);
  for (size_t s = 0; s < step_logits.size(); ++s) {
    const size_t pos = prompt.size() - 1 + s;
    double max_ref = 0;
    for (int64_t v = 0; v < V; ++v)
      max_ref = std::max(max_ref, std::fabs(double(scored[pos * V + v])));
    for (int64_t v = 0; v < V; ++v) {
      ASSERT_LE(std::fabs(step_logits[s][static_cast<size_t>(v)] - scored[pos * V + v]),
                f32_logit_bound(max_ref))
          << "step " << s << " token " << v;
    }
  }
}

// A micro-batch whose prompts hold more tokens than the forward computes at
// once (4096) runs in groups of whole sequences: the same logits as each
// prompt scored alone, the same greedy tokens as each alone.
TEST_F(EngineContract, LongPrefillRunsInGroupsWithTheSameResults) {
  auto engine = make_engine(*f_.model, options(DType::kF32, 9, 1));
  const int64_t V = engine->config().n_vocab;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(V - 1));
  std::vector<std::vector<int32_t>> prompts(9);
  for (auto& p : prompts) {
    p.resize(470 + prompts.size());
    for (auto& t : p) t = id(rng);
  }
  const test::GreedyRun batched = test::greedy(*engine, prompts, 3);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<float> scored = engine->score(prompts[p]);
    const float* last = scored.data() + (static_cast<int64_t>(prompts[p].size()) - 1) * V;
    double max_ref = 0;
    for (int64_t v = 0; v < V; ++v) max_ref = std::max(max_ref, std::fabs(double(last[v])));
    for (int64_t v = 0; v < V; ++v) {
      ASSERT_LE(std::fabs(batched.first_logits[p][static_cast<size_t>(v)] - last[v]),
                f32_logit_bound(max_ref))
          << "prompt " << p << " token " << v;
    }
    EXPECT_EQ(batched.tokens[p], test::greedy(*engine, {prompts[p]}, 3).tokens[0]) << p;
  }
}

// Mistral's sliding window: the attention op has none, so sequences that
// would reach past the window are refused with a message naming it; shorter
// ones run (full attention is then exactly the windowed one).
TEST(EngineWindow, SequencesLongerThanTheSlidingWindowAreRefused) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(STRATA_TEST_DATA) / "models" / "llama";
  const fs::path dir = fs::temp_directory_path() / ("strata_mistral_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src)) fs::copy(e.path(), dir / e.path().filename());
  nlohmann::json cfg = test::load_json((dir / "config.json").string());
  cfg["architectures"] = {"MistralForCausalLM"};
  cfg["model_type"] = "mistral";
  cfg["sliding_window"] = 12;
  std::ofstream((dir / "config.json").string()) << cfg.dump(2);
  const auto model = Model::open(dir.string());
  ASSERT_EQ(model->config().sliding_window, 12);
  auto engine = make_engine(*model, options(DType::kF32));
  std::vector<SeqInput> in(1);
  in[0].prompt.assign(10, 5);
  in[0].max_new_tokens = 3;  // 12 positions: inside the window
  int steps = 0;
  engine->run_block(in, [&](int, std::span<const int32_t>, const float*, std::span<SeqAction> o) {
    ++steps;
    o[0].next_token = 4;
  });
  EXPECT_EQ(steps, 3);
  in[0].max_new_tokens = 4;  // 13 positions
  try {
    engine->run_block(in, nullptr);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sliding window of 12"), std::string::npos) << msg;
    EXPECT_NE(msg.find("13 positions"), std::string::npos) << msg;
  }
  EXPECT_THROW(engine->score(std::vector<int32_t>(13, 5)), Error);
  EXPECT_EQ(engine->score(std::vector<int32_t>(12, 5)).size(), 12u * 904);
  fs::remove_all(dir);
}

TEST(EngineOptionsCheck, RejectsWhatItCannotRun) {
  const Fixture f = load_fixture("opt");
  EngineOptions o = options(DType::kF32);
  o.compute_dtype = DType::kF16;
  EXPECT_THROW(make_engine(*f.model, o), Error);
  o = options(DType::kF32);
  o.kv_dtype = DType::kQ8S32;
  EXPECT_THROW(make_engine(*f.model, o), Error);
  o = options(DType::kF32);
  o.gpu_batch_size = 0;
  EXPECT_THROW(make_engine(*f.model, o), Error);
  EXPECT_EQ(default_kv_dtype(DType::kF32), DType::kF32);
  EXPECT_EQ(default_kv_dtype(DType::kBF16), DType::kF16);
  EXPECT_GE(default_kv_budget_bytes(), uint64_t{256} << 20);
}

}  // namespace
}  // namespace strata
