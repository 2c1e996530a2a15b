// The demo model (models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by
// scripts/fetch-demo-model.sh): Model::open and `strata inspect` report its
// published shape. Skips when the model has not been fetched.
#include <gtest/gtest.h>

#include <sstream>

#include <filesystem>

#include "io/json.h"
#include "model/model.h"
#include "support/run_cli.h"
#include "io/file_writers.h"

namespace strata {
namespace {

// True when `text` has the line "<key>:", padding, then `value` (and nothing else).
bool has_line(const std::string& text, const std::string& key, const std::string& value) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    const size_t v = line.find_first_not_of(' ', key.size() + 1);
    if (v != std::string::npos && line.substr(v) == value) return true;
  }
  return false;
}

const std::string kDemo = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

#define SKIP_WITHOUT_DEMO()                                                                   \
  if (!std::filesystem::exists(kDemo)) {                                                      \
    GTEST_SKIP() << kDemo << " is absent; run scripts/fetch-demo-model.sh to fetch it";       \
  }

TEST(DemoModel, OpensWithItsPublishedShape) {
  SKIP_WITHOUT_DEMO();
  const auto m = Model::open(kDemo);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.n_layer, 30);
  EXPECT_EQ(c.n_embd, 576);
  EXPECT_EQ(c.n_head, 9);
  EXPECT_EQ(c.n_kv_head, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_ff, 1536);
  EXPECT_EQ(c.n_vocab, 49152);
  EXPECT_EQ(c.n_ctx, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{2}));
  // 49152*576 embeddings + final norm + 30 layers of (2 norms, q, k, v, o, gate, up, down).
  const int64_t per_layer = 2 * 576 + 576 * 576 + 2 * 192 * 576 + 576 * 576 + 3 * 576 * 1536;
  EXPECT_EQ(m->desc().n_params(), 49152 * 576 + 576 + 30 * per_layer);
  EXPECT_EQ(m->desc().get("blk.0.ffn_up.weight").dtype, kQ4_1);
  EXPECT_EQ(m->desc().get("token_embd.weight").dtype, kQ8_0);
}

TEST(DemoModel, InspectPrintsTheShape) {
  SKIP_WITHOUT_DEMO();
  test_files::TempDir dir;
  auto r = test::run_strata({"inspect", "--model", kDemo}, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "layers", "30")) << r.out;
  EXPECT_TRUE(has_line(r.out, "hidden size", "576")) << r.out;
  EXPECT_TRUE(has_line(r.out, "vocab size", "49152")) << r.out;
  EXPECT_TRUE(has_line(r.out, "tokenizer", "gpt2, pre-tokenizer smollm, 49152 tokens")) << r.out;
  r = test::run_strata({"inspect", "--model", kDemo, "--json"}, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["n_layer"], 30);
  EXPECT_EQ(j["n_embd"], 576);
  EXPECT_EQ(j["n_vocab"], 49152);
  EXPECT_EQ(j["n_params"], 134515008);
  EXPECT_EQ(j["tokenizer"]["kind"], "gpt2");
  EXPECT_EQ(j["tokenizer"]["pre"], "smollm");
}

}  // namespace
}  // namespace strata
