// The engine on the demo model (models/SmolLM2-135M-Instruct.Q4_1.gguf,
// fetched by scripts/fetch-demo-model.sh) against transformers' goldens
// (tests/data/golden/smollm2.json): greedy completions of the 4 prompts, the
// top logits at the last prompt position, perplexity by the recorded
// procedure with Engine::score; and bf16 and int8 compute within their derived bounds,
// its greedy completions equal to transformers' or, where one differs, the
// two competing tokens within that bound in the f32 run. Skips with a message
// when the model is absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "draft/draft_model.h"
#include "generate/ngram_draft.h"
#include "model/model.h"
#include "offload/engine_goldens.h"
#include "offload/fixture_runs.h"
#include "offload/offload_engine.h"

namespace strata {
namespace {

using test::bf16_logit_bound;
using test::f32_logit_bound;

const std::string kModel = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModel)) return;
    golden_ =
        new nlohmann::json(test::load_json(std::string(STRATA_TEST_DATA) + "/golden/smollm2.json"));
    model_ = Model::open(kModel).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
    model_ = nullptr;
    golden_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) {
      GTEST_SKIP() << kModel << " is absent; run scripts/fetch-demo-model.sh to fetch it";
    }
  }
  static std::unique_ptr<Engine> engine(DType compute, int64_t batch = 4) {
    EngineOptions o;
    o.compute_dtype = compute;
    o.kv_dtype = default_kv_dtype(compute);
    o.gpu_batch_size = batch;
    o.threads = 0;
    o.kv_budget_bytes = uint64_t{512} << 20;
    return make_engine(*model_, o);
  }
  static std::vector<std::vector<int32_t>> prompts() {
    std::vector<std::vector<int32_t>> p;
    for (const auto& x : (*golden_)["prompts"]) p.push_back(x["ids"].get<std::vector<int32_t>>());
    return p;
  }
  // Checks logits at the last prompt position against the golden top-32
  // (and the full vector where recorded); returns max|d| / bound.
  static double check_last_logits(const std::vector<std::vector<float>>& got,
                                  const std::function<double(double)>& bound, const char* what) {
    double worst = 0;
    for (size_t p = 0; p < got.size(); ++p) {
      const auto& gp = (*golden_)["prompts"][p];
      std::vector<std::pair<int64_t, double>> ref;
      if (gp.contains("last_logits")) {
        const auto v = gp["last_logits"].get<std::vector<double>>();
        for (size_t i = 0; i < v.size(); ++i) ref.emplace_back(static_cast<int64_t>(i), v[i]);
      } else {
        const auto ids = gp["last_logits_top_ids"].get<std::vector<int64_t>>();
        const auto vals = gp["last_logits_top_values"].get<std::vector<double>>();
        for (size_t i = 0; i < ids.size(); ++i) ref.emplace_back(ids[i], vals[i]);
      }
      double max_ref = 0, max_d = 0;
      for (const auto& [id, v] : ref) max_ref = std::max(max_ref, std::fabs(v));
      const double tol = bound(max_ref);
      for (const auto& [id, v] : ref) {
        const double d = std::fabs(got[p][static_cast<size_t>(id)] - v);
        max_d = std::max(max_d, std::isnan(d) ? INFINITY : d);
        EXPECT_LE(d, tol) << what << " prompt " << p << " token " << id << ": "
                          << got[p][static_cast<size_t>(id)] << " vs " << v;
      }
      std::printf(
          "[ smollm2 %s ] prompt %zu: %zu logits, max|d| %.3g, max|logit| %.3g, bound %.3g\n", what,
          p, ref.size(), max_d, max_ref, tol);
      worst = std::max(worst, max_d / tol);
    }
    return worst;
  }

  static nlohmann::json* golden_;
  static Model* model_;
};

nlohmann::json* SmolLM2::golden_ = nullptr;
Model* SmolLM2::model_ = nullptr;

TEST_F(SmolLM2, F32GreedyAndLastLogitsMatchTransformers) {
  auto e = engine(DType::kF32);
  const auto ps = prompts();
  const test::GreedyRun g = test::greedy(*e, ps, 16);  // the 4 prompts in one block
  for (size_t p = 0; p < ps.size(); ++p) {
    EXPECT_EQ(g.tokens[p], (*golden_)["prompts"][p]["greedy"].get<std::vector<int32_t>>())
        << "prompt " << p;
  }
  check_last_logits(g.first_logits, f32_logit_bound, "f32");
}

// Perplexity by the recorded procedure: non-overlapping chunks of n_ctx from
// the start, the tail dropped; in each, positions 0..n_ctx-2 predict tokens
// 1..n_ctx-1. Checks the chunking against the golden and prints each chunk.
double perplexity(Engine& e, const nlohmann::json& pp, const char* what) {
  const auto ids = pp["ids"].get<std::vector<int32_t>>();
  const int64_t n_ctx = pp["n_ctx"].get<int64_t>();
  const int64_t V = e.config().n_vocab;
  double nll_sum = 0;
  int64_t n_scored = 0;
  const int64_t n_chunks = static_cast<int64_t>(ids.size()) / n_ctx;
  EXPECT_EQ(n_chunks, pp["n_chunks"].get<int64_t>());
  for (int64_t c = 0; c < n_chunks; ++c) {
    const std::span<const int32_t> chunk(ids.data() + c * n_ctx, static_cast<size_t>(n_ctx));
    const std::vector<float> logits = e.score(chunk);
    double chunk_nll = 0;
    for (int64_t t = 0; t + 1 < n_ctx; ++t) {
      const float* row = logits.data() + t * V;
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      chunk_nll +=
          -(static_cast<double>(row[chunk[static_cast<size_t>(t + 1)]]) - mx - std::log(sum));
    }
    const double want = pp["chunk_nll_sum"][static_cast<size_t>(c)].get<double>();
    std::printf("[ smollm2 ppl %s ] chunk %lld: nll sum %.4f (transformers %.4f)\n", what,
                static_cast<long long>(c), chunk_nll, want);
    nll_sum += chunk_nll;
    n_scored += n_ctx - 1;
  }
  EXPECT_EQ(n_scored, pp["n_scored"].get<int64_t>());
  return std::exp(nll_sum / static_cast<double>(n_scored));
}

// Prompt lookup and a draft model (the demo model itself) on the demo
// model, f32: the greedy tokens of decoding without speculation, with the
// weights and the KV cache in RAM or on disk; the prompts include text
// repeated, which the model continues by copying.
TEST_F(SmolLM2, SpeculativeGreedyEqualsGreedyOnEveryPlacement) {
  std::vector<std::vector<int32_t>> in = prompts();
  for (size_t i = 0, n = in.size(); i < n; ++i) {
    std::vector<int32_t> twice = in[i];
    twice.insert(twice.end(), in[i].begin() + 1, in[i].end());  // BOS once
    in.push_back(twice);
  }
  fixture_runs::TempDir dir("smollm2-speculative");
  for (const double on_disk : {0.0, 1.0}) {
    EngineOptions o;
    o.compute_dtype = o.kv_dtype = DType::kF32;
    o.gpu_batch_size = 6;
    o.num_gpu_batches = 2;
    o.kv_budget_bytes = uint64_t{512} << 20;
    o.offload_dir = dir.path.string();
    o.placement.set(DataKind::kWeights, 0, 1 - on_disk);
    o.placement.set(DataKind::kKv, 0, 1 - on_disk);
    const fixture_runs::GenRun ref = fixture_runs::generate(*make_engine(*model_, o), in, 32);
    for (const int64_t k : on_disk > 0 ? std::vector<int64_t>{4} : std::vector<int64_t>{1, 8}) {
      o.max_draft_tokens = k;
      // Prompt lookup, and the demo model as its own draft model (one
      // request per sequence here; the driver batches them).
      for (const bool by_model : {false, true}) {
        DraftModel draft(*model_, DraftModelOptions{});
        std::vector<SeqInput> all;
        for (const auto& p : in) all.push_back({p, 32});
        draft.begin_block(all, k);
        const fixture_runs::GenRun r = fixture_runs::generate_speculative(
            *make_engine(*model_, o), in,
            [&](size_t s, const std::vector<int32_t>& produced) {
              std::vector<int32_t> ctx = in[s];
              ctx.insert(ctx.end(), produced.begin(), produced.end());
              if (!by_model) return ngram_draft(ctx, k);
              std::vector<std::vector<int32_t>> out(1);
              const Drafter::Request q{static_cast<int32_t>(s), ctx, k};
              draft.propose(std::span(&q, 1), out);
              return out[0];
            },
            32);
        const std::string what = "on disk " + std::to_string(on_disk) + ", " + std::to_string(k) +
                                 " draft tokens " +
                                 (by_model ? "from the draft model" : "by lookup");
        EXPECT_EQ(r.tokens, ref.tokens) << what;
        // (A block runs as many steps as its slowest sequence needs.)
        EXPECT_GT(r.stats.accepted_tokens, 0) << what;
        EXPECT_LE(r.stats.decode_steps, ref.stats.decode_steps) << what;
        EXPECT_EQ(fixture_runs::link_bytes(r.stats, "cpu->disk"),
                  fixture_runs::link_bytes(ref.stats, "cpu->disk"))
            << what << ": rejected rows reached the disk";
        if (by_model) {
          // Its own greedy tokens: the target keeps them (but near ties).
          std::printf(
              "[ smollm2 draft model ] %s: accepted %lld of %lld, %lld steps (%lld without)\n",
              what.c_str(), static_cast<long long>(r.stats.accepted_tokens),
              static_cast<long long>(r.stats.drafted_tokens),
              static_cast<long long>(r.stats.decode_steps),
              static_cast<long long>(ref.stats.decode_steps));
          EXPECT_GE(r.stats.accepted_tokens * 10, r.stats.drafted_tokens * 9) << what;
          EXPECT_LT(r.stats.decode_steps, ref.stats.decode_steps) << what;
        }
      }
    }
  }
}

TEST_F(SmolLM2, PerplexityByTheRecordedProcedure) {
  const auto& pp = (*golden_)["perplexity"];
  auto e = engine(DType::kF32, 1);
  const double ppl = perplexity(*e, pp, "f32");
  const double want = pp["ppl"].get<double>();
  std::printf("[ smollm2 ppl ] %.5f vs transformers %.5f (%.4f%%)\n", ppl, want,
              100.0 * (ppl - want) / want);
  EXPECT_LE(std::fabs(ppl - want), 0.01 * want);
}

// A reduced-precision compute dtype: the last-position logits within its
// bound (bound(n_layer, max|logit|)), and greedy completions equal to
// transformers' up to any divergence, where the f32 run shows the two
// competing tokens within twice that bound (each of the two logits may move
// by the bound).
void check_against_f32(Engine& e, Engine& e32, const std::vector<std::vector<int32_t>>& ps,
                       const nlohmann::json& golden,
                       const std::function<double(int64_t, double)>& bound,
                       const std::function<double(const std::vector<std::vector<float>>&,
                                                  const std::function<double(double)>&,
                                                  const char*)>& check_last_logits,
                       const char* what) {
  const int64_t n_layer = e.config().n_layer;
  const int64_t V = e.config().n_vocab;
  const test::GreedyRun g = test::greedy(e, ps, 16);
  check_last_logits(
      g.first_logits, [&](double m) { return bound(n_layer, m); }, what);
  for (size_t p = 0; p < ps.size(); ++p) {
    const auto want = golden["prompts"][p]["greedy"].get<std::vector<int32_t>>();
    size_t s = 0;
    while (s < want.size() && g.tokens[p][s] == want[s]) ++s;
    if (s == want.size()) {
      std::printf("[ smollm2 %s ] prompt %zu: 16 greedy tokens equal transformers'\n", what, p);
      continue;
    }
    // Divergence at step s: the f32 logits of the same prefix.
    std::vector<int32_t> prefix = ps[p];
    prefix.insert(prefix.end(), want.begin(), want.begin() + static_cast<std::ptrdiff_t>(s));
    const std::vector<float> logits = e32.score(prefix);
    const float* row = logits.data() + (static_cast<int64_t>(prefix.size()) - 1) * V;
    double max_abs = 0;
    for (int64_t v = 0; v < V; ++v) max_abs = std::max(max_abs, std::fabs(double(row[v])));
    const double gap = row[want[s]] - row[g.tokens[p][s]];
    const double b = bound(n_layer, max_abs);
    std::printf(
        "[ smollm2 %s ] prompt %zu diverges at step %zu: transformers %d, %s %d; f32 "
        "logits %.4f vs %.4f, gap %.4f <= 2 x bound %.4f\n",
        what, p, s, want[s], what, g.tokens[p][s], row[want[s]], row[g.tokens[p][s]], gap, 2 * b);
    EXPECT_EQ(test::argmax(row, V), want[s]) << "the f32 run must agree with transformers";
    EXPECT_LE(gap, 2 * b) << what << " prompt " << p << " step " << s;
  }
}

TEST_F(SmolLM2, Bf16WithinTheDerivedBound) {
  auto e16 = engine(DType::kBF16);
  auto e32 = engine(DType::kF32, 1);
  check_against_f32(*e16, *e32, prompts(), *golden_, bf16_logit_bound, check_last_logits, "bf16");
}

// int8 compute (integer products of the Q4_1 / Q8_0 weights with x rounded
// to int8 per group): logits within the int8 bound, greedy as above, and
// perplexity within 1% of the f32 run's (measured: +0.5%).
TEST_F(SmolLM2, Int8WithinTheDerivedBound) {
  auto e8 = engine(DType::kI8);
  auto e32 = engine(DType::kF32, 1);
  check_against_f32(*e8, *e32, prompts(), *golden_, test::int8_logit_bound, check_last_logits,
                    "int8");
  const auto& pp = (*golden_)["perplexity"];
  auto e8_1 = engine(DType::kI8, 1);
  const double ppl8 = perplexity(*e8_1, pp, "int8");
  const double want = pp["ppl"].get<double>();
  std::printf("[ smollm2 ppl int8 ] %.5f vs transformers' f32 %.5f (%+.3f%%)\n", ppl8, want,
              100.0 * (ppl8 - want) / want);
  EXPECT_LE(ppl8, 1.01 * want);
  EXPECT_GE(ppl8, 0.99 * want);
}

}  // namespace
}  // namespace strata
