// The demo model requantized to Q4_K_M by llama-quantize
// (models/SmolLM2-135M-Instruct.Q4_K_M.gguf, scripts/make-demo-kquant.sh:
// Q5_0, Q4_K, Q6_K and Q8_0 tensors) against transformers loading the same
// file (tests/data/golden/smollm2-q4_k_m.json): the 16 greedy tokens of each
// prompt equal transformers' in f32, up to the first step whose top-1 /
// top-2 margin is below what f32 resolves, and the same in one batch of 4.
// Skips with a message when the file has not been made.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/model.h"
#include "offload/engine_goldens.h"
#include "offload/offload_engine.h"

namespace strata {
namespace {

const std::string kModel = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_K_M.gguf";

TEST(DemoKQuant, GreedyTokensMatchTransformers) {
  if (!std::filesystem::exists(kModel)) {
    GTEST_SKIP() << kModel << " is absent; run scripts/make-demo-kquant.sh to make it";
  }
  const auto golden =
      test::load_json(std::string(STRATA_TEST_DATA) + "/golden/smollm2-q4_k_m.json");
  const auto model = Model::open(kModel);
  EngineOptions o;
  o.compute_dtype = DType::kF32;
  o.kv_dtype = default_kv_dtype(o.compute_dtype);
  o.gpu_batch_size = 4;
  o.kv_budget_bytes = uint64_t{512} << 20;
  auto engine = make_engine(*model, o);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : golden["prompts"]) prompts.push_back(p["ids"].get<std::vector<int32_t>>());
  ASSERT_EQ(prompts.size(), 4u);
  const test::GreedyRun all = test::greedy(*engine, prompts, 16);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto want = golden["prompts"][p]["greedy"].get<std::vector<int32_t>>();
    const auto margins = golden["prompts"][p]["greedy_margins"].get<std::vector<double>>();
    // Steps f32 resolves: the logits agree to ~1e-4, so a margin of 1e-3 decides.
    size_t n = 0;
    while (n < want.size() && margins[n] >= 1e-3) ++n;
    EXPECT_GE(n, 8u) << "prompt " << p << ": the golden's margins are too small to test";
    const auto alone = test::greedy(*engine, {prompts[p]}, 16).tokens[0];
    for (size_t s = 0; s < n; ++s) {
      EXPECT_EQ(alone[s], want[s]) << "prompt " << p << " step " << s;
      EXPECT_EQ(all.tokens[p][s], want[s]) << "prompt " << p << " step " << s << " (batch of 4)";
    }
  }
}

}  // namespace
}  // namespace strata
