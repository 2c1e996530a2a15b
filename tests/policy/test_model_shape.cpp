// `strata policy --model FILE`: the shape read from the demo model (GGUF,
// through Model::open) is the SmolLM2-135M preset's shape, and its weights'
// bytes per element are those of its Q4_1 / Q8_0 / f32 tensors. Skips
// without the demo model (scripts/fetch-demo-model.sh).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "policy/model_shape.h"
#include "support/run_cli.h"

namespace strata {
namespace {

const std::string kDemo = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

TEST(PolicyModelFile, DemoGgufShapeMatchesThePreset) {
  if (!std::filesystem::exists(kDemo))
    GTEST_SKIP() << "demo model absent: run scripts/fetch-demo-model.sh";
  const test::CliResult r = test::run_strata_line("policy --hardware t4 --json --model " + kDemo);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& s = j["model_shape"];
  const ModelShape preset = find_model_preset("smollm2-135m");
  EXPECT_EQ(s["n_layer"].get<int64_t>(), preset.n_layer);
  EXPECT_EQ(s["hidden"].get<int64_t>(), preset.hidden);
  EXPECT_EQ(s["n_head"].get<int64_t>(), preset.n_head);
  EXPECT_EQ(s["n_kv_head"].get<int64_t>(), preset.n_kv_head);
  EXPECT_EQ(s["head_dim"].get<int64_t>(), preset.head_dim);
  EXPECT_EQ(s["n_ff"].get<int64_t>(), preset.n_ff);
  EXPECT_EQ(s["vocab"].get<int64_t>(), preset.vocab);
  EXPECT_EQ(s["gated_ffn"].get<bool>(), preset.gated_ffn);
  EXPECT_EQ(s["tied_embeddings"].get<bool>(), preset.tied_embeddings);
  // Mostly Q4_1 (0.625 bytes per weight), with some wider tensors; far
  // below f16's 2 bytes.
  const double wb = s["weight_bytes"].get<double>();
  EXPECT_GT(wb, 0.625);
  EXPECT_LT(wb, 1.0);
  EXPECT_TRUE(j["fits"].get<bool>());
}

}  // namespace
}  // namespace strata
