// The engine on the GPU (label cuda; skips with a message without one):
//   - every fixture model, all on the gpu tier, f32: greedy generation of the
//     eight prompts against the CPU device's run, every step's logits within
//     the f32 bound the CPU run meets against transformers
//     (test::f32_logit_bound: other kernels sum in other orders), tokens equal
//     up to a divergence where the CPU's two competing logits are within
//     twice that bound;
//   - the same with --cpu-attention (KV in RAM and on disk, attention on the
//     CPU between the GPU's projections);
//   - a streamed placement (weights on gpu, pinned RAM and disk; KV pages on
//     the GPU and on disk) gives the bits of the all-on-GPU run: a placement
//     moves bytes, the same kernels run on them;
//   - the demo model (SmolLM2, when fetched): greedy completions equal to
//     transformers' and the last prompt logits within the f32 bound,
//     perplexity within 1%.
// The discrete-device logic itself is also tested on the CPU
// (tests/offload_engine/test_device_engine.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/cuda_test_util.h"
#include "model/model.h"
#include "offload/engine_goldens.h"
#include "offload/fixture_runs.h"
#include "offload/offload_engine.h"

namespace strata {
namespace {

using namespace fixture_runs;

EngineOptions cuda_options(const Fixture& f, int64_t g, int64_t k, const fs::path& dir) {
  EngineOptions o = fixture_options(f, g, k, dir);
  o.device = "cuda:0";
  o.placement = Placement{};  // everything on the device
  return o;
}

// The same run on the CPU device, everything in RAM.
EngineOptions on_the_cpu(EngineOptions o) {
  o.device = "cpu";
  o.cpu_attention = false;
  o.placement = Placement{};  // everything on the device
  return o;
}

// Every step's logits of `got` within the f32 bound of `ref`'s, tokens equal
// up to a divergence where ref's two competing logits are within twice it.
void expect_within_f32_bound(const GenRun& ref, const GenRun& got, int64_t V,
                             const std::string& what) {
  for (size_t q = 0; q < ref.tokens.size(); ++q) {
    for (size_t s = 0; s < ref.tokens[q].size(); ++s) {
      const std::vector<float>& a = ref.logits[q][s];
      const std::vector<float>& b = got.logits[q][s];
      double max_abs = 0, max_d = 0;
      for (int64_t v = 0; v < V; ++v) max_abs = std::max(max_abs, std::fabs(double(a[v])));
      const double bound = test::f32_logit_bound(max_abs);
      for (int64_t v = 0; v < V; ++v) {
        const double d = std::fabs(double(a[v]) - b[v]);
        max_d = std::max(max_d, std::isnan(d) ? INFINITY : d);
      }
      EXPECT_LE(max_d, bound) << what << " sequence " << q << " step " << s;
      if (got.tokens[q][s] != ref.tokens[q][s]) {
        const double gap = std::fabs(double(a[ref.tokens[q][s]]) - a[got.tokens[q][s]]);
        EXPECT_LE(gap, 2 * bound) << what << " sequence " << q << " diverges at step " << s;
        break;  // the prefixes differ from here on
      }
    }
  }
}

class CudaEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngine, FixtureWithinTheF32BoundOfTheCpuRun) {
  STRATA_REQUIRE_GPU();
  const Fixture f = load(GetParam());
  TempDir dir("cuda-engine");
  auto ref_engine = make_engine(*f.model, on_the_cpu(cuda_options(f, 2, 3, dir.path)));
  auto gpu_engine = make_engine(*f.model, cuda_options(f, 2, 3, dir.path));
  const GenRun ref = generate(*ref_engine, f.prompts), got = generate(*gpu_engine, f.prompts);
  expect_within_f32_bound(ref, got, f.model->config().n_vocab, f.name);
}

// --cpu-attention: the KV cache in RAM and on disk, attention on the CPU
// between the GPU's projections.
TEST_P(CudaEngine, CpuAttentionWithinTheF32BoundOfTheCpuRun) {
  STRATA_REQUIRE_GPU();
  const Fixture f = load(GetParam());
  TempDir dir("cuda-cpu-attn");
  EngineOptions o = cuda_options(f, 2, 3, dir.path);
  o.placement[Share::kKvGpu] = 0;
  o.placement[Share::kKvCpu] = 0.5;  // the rest on disk
  o.cpu_attention = true;
  auto ref_engine = make_engine(*f.model, on_the_cpu(cuda_options(f, 2, 3, dir.path)));
  auto gpu_engine = make_engine(*f.model, o);
  const GenRun ref = generate(*ref_engine, f.prompts), got = generate(*gpu_engine, f.prompts);
  expect_within_f32_bound(ref, got, f.model->config().n_vocab, f.name + " cpu attention");
  EXPECT_GT(link_bytes(got.stats, "gpu->cpu"), 0u);
}

TEST_P(CudaEngine, StreamedPlacementGivesTheBitsOfTheAllOnGpuRun) {
  STRATA_REQUIRE_GPU();
  const Fixture f = load(GetParam());
  TempDir dir("cuda-stream");
  const EngineOptions all = cuda_options(f, 2, 3, dir.path);
  EngineOptions streamed = all;
  streamed.placement[Share::kWGpu] = 0.3;
  streamed.placement[Share::kWCpu] = 0.4;  // 30% on disk
  streamed.placement[Share::kKvGpu] = 0.5;
  streamed.placement[Share::kKvCpu] = 0;  // 50% on disk
  auto a = make_engine(*f.model, all);
  auto b = make_engine(*f.model, streamed);
  const GenRun ra = generate(*a, f.prompts), rb = generate(*b, f.prompts);
  expect_same_bits(ra, rb, f.name + " streamed");
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_GT(link_bytes(rb.stats, "cpu->gpu"), 0u);
  EXPECT_GT(link_bytes(rb.stats, "disk->cpu"), 0u);
  EXPECT_GT(link_bytes(rb.stats, "gpu->cpu"), 0u);
}

// Speculative decoding on the GPU: the plain run's continuation as drafts
// (every third token wrong: continuation_drafts), with KV on the device and
// half on disk; the tokens and every kept row within the f32 bound of the
// CPU's plain run.
TEST_P(CudaEngine, SpeculativeStepsWithinTheF32BoundOfThePlainCpuRun) {
  STRATA_REQUIRE_GPU();
  const Fixture f = load(GetParam());
  TempDir dir("cuda-speculative");
  const int64_t V = f.model->config().n_vocab;
  auto ref_engine = make_engine(*f.model, on_the_cpu(cuda_options(f, 2, 3, dir.path)));
  const GenRun ref = generate(*ref_engine, f.prompts);
  const DraftFn draft = continuation_drafts(ref, V);
  for (const double kv_gpu : {1.0, 0.5}) {
    EngineOptions o = cuda_options(f, 2, 3, dir.path);
    o.placement[Share::kKvGpu] = kv_gpu;
    o.placement[Share::kKvCpu] = 0;
    o.max_draft_tokens = 3;
    auto e = make_engine(*f.model, o);
    const GenRun got = generate_speculative(*e, f.prompts, draft);
    expect_within_f32_bound(ref, got, V,
                            f.name + " speculative, KV on gpu " + std::to_string(kv_gpu));
    EXPECT_GT(got.stats.accepted_tokens, 0);
    EXPECT_LT(got.stats.decode_steps, ref.stats.decode_steps);
  }
}

// Prefix sharing on the GPU (prompts sharing a preamble: sharing_prompts),
// with KV on the device and half on disk: within the f32 bound of the CPU
// run without sharing (cuBLAS may sum a product of another height in
// another order), and the shared tokens counted.
TEST_P(CudaEngine, PrefixSharingWithinTheF32BoundOfTheCpuRunWithout) {
  STRATA_REQUIRE_GPU();
  const Fixture f = load(GetParam());
  TempDir dir("cuda-prefix");
  const std::vector<std::vector<int32_t>> prompts = sharing_prompts(f);
  const EngineOptions cpu = on_the_cpu(cuda_options(f, 3, 3, dir.path));  // sharing off
  const GenRun ref = generate(*make_engine(*f.model, cpu), prompts);
  for (const double kv_gpu : {1.0, 0.5}) {
    EngineOptions o = cuda_options(f, 3, 3, dir.path);
    o.placement[Share::kKvGpu] = kv_gpu;
    o.placement[Share::kKvCpu] = 0;
    o.prefix_sharing = true;
    const GenRun got = generate(*make_engine(*f.model, o), prompts);
    expect_within_f32_bound(ref, got, f.model->config().n_vocab,
                            f.name + " prefix sharing, KV on gpu " + std::to_string(kv_gpu));
    EXPECT_GT(got.stats.reused_prompt_tokens, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaEngine,
                         ::testing::Values("opt", "llama", "qwen2", "llama-gguf"),
                         fixture_param_name);

TEST(CudaEngineSmolLM2, GreedyLastLogitsAndPerplexityMatchTransformers) {
  STRATA_REQUIRE_GPU();
  const std::string path = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is absent; run scripts/fetch-demo-model.sh to fetch it";
  }
  const auto golden = test::load_json(std::string(STRATA_TEST_DATA) + "/golden/smollm2.json");
  const auto model = Model::open(path);
  EngineOptions o;
  o.device = "cuda:0";
  o.compute_dtype = DType::kF32;
  o.kv_dtype = DType::kF32;
  o.gpu_batch_size = 4;
  o.kv_budget_bytes = uint64_t{512} << 20;
  o.placement = Placement{};  // everything on the device
  auto e = make_engine(*model, o);
  std::vector<std::vector<int32_t>> ps;
  for (const auto& x : golden["prompts"]) ps.push_back(x["ids"].get<std::vector<int32_t>>());
  const test::GreedyRun g = test::greedy(*e, ps, 16);
  for (size_t p = 0; p < ps.size(); ++p) {
    const auto& gp = golden["prompts"][p];
    EXPECT_EQ(g.tokens[p], gp["greedy"].get<std::vector<int32_t>>()) << "prompt " << p;
    const auto ids = gp["last_logits_top_ids"].get<std::vector<int64_t>>();
    const auto vals = gp["last_logits_top_values"].get<std::vector<double>>();
    double max_ref = 0;
    for (double v : vals) max_ref = std::max(max_ref, std::fabs(v));
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_NEAR(g.first_logits[p][static_cast<size_t>(ids[i])], vals[i],
                  test::f32_logit_bound(max_ref))
          << "prompt " << p << " token " << ids[i];
    }
  }
  // Perplexity: non-overlapping chunks of n_ctx, the tail dropped.
  const auto& pp = golden["perplexity"];
  const auto ids = pp["ids"].get<std::vector<int32_t>>();
  const int64_t n_ctx = pp["n_ctx"].get<int64_t>(), V = model->config().n_vocab;
  double nll = 0;
  int64_t n = 0;
  o.gpu_batch_size = 1;
  auto e1 = make_engine(*model, o);
  for (size_t c = 0; c + static_cast<size_t>(n_ctx) <= ids.size();
       c += static_cast<size_t>(n_ctx)) {
    const std::span<const int32_t> chunk(ids.data() + c, static_cast<size_t>(n_ctx));
    const std::vector<float> logits = e1->score(chunk);
    for (int64_t t = 0; t + 1 < n_ctx; ++t) {
      const float* row = logits.data() + t * V;
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      nll += -(double(row[chunk[static_cast<size_t>(t + 1)]]) - mx - std::log(sum));
      ++n;
    }
  }
  const double ppl = std::exp(nll / static_cast<double>(n)), want = pp["ppl"].get<double>();
  std::printf("[ smollm2 cuda ppl ] %.5f vs transformers %.5f\n", ppl, want);
  EXPECT_LE(std::fabs(ppl - want), 0.01 * want);
}

}  // namespace
}  // namespace strata
