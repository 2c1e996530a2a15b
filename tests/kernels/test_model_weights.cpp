// The CPU kernels on the demo model's real weights (SmolLM2-135M Q4_1 GGUF):
// Q4_1 projections and the Q8_0 token embedding / tied output head through
// matmul and embedding, against their references. Skips when the model has
// not been fetched (scripts/fetch-demo-model.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "io/gguf.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/matmul.h"
#include "kernels/matmul_check.h"
#include "support/all_close.h"
#include "support/guarded.h"
#include "support/random.h"

namespace strata::cpu {
namespace {

const char* kModel = STRATA_MODELS_DIR "/SmolLM2-135M-Instruct.Q4_1.gguf";

class ModelWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) {
      GTEST_SKIP() << "demo model not found at " << kModel << "; run scripts/fetch-demo-model.sh";
    }
    file_ = std::make_unique<GgufFile>(kModel);
  }
  const GgufTensorInfo& tensor(const char* name) {
    const GgufTensorInfo* t = file_->find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return *t;
  }
  const void* data(const GgufTensorInfo& t) { return file_->file().data() + t.offset; }
  std::unique_ptr<GgufFile> file_;
};

TEST_F(ModelWeights, Q41ProjectionsMatchReference) {
  MatmulCache cache;
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.7.ffn_down.weight",
                           "blk.29.ffn_gate.weight"}) {
    const GgufTensorInfo& t = tensor(name);
    ASSERT_EQ(t.dtype, kQ4_1) << name;
    ASSERT_EQ(t.shape.size(), 2u);
    const int64_t n = t.shape[0], k = t.shape[1];
    for (ComputeType c : {ComputeType::kF32, ComputeType::kBF16}) {
      for (int64_t m : {3, 32}) {
        SCOPED_TRACE(::testing::Message()
                     << name << " m=" << m << " bf16=" << (c == ComputeType::kBF16));
        const auto x = test::random_floats(static_cast<size_t>(m * k), -2.0f, 2.0f, 17);
        test::check_matmul(cache, c, data(t), t.dtype, row_bytes(t.dtype, k), x, nullptr, m, n, k);
      }
    }
  }
}

TEST_F(ModelWeights, Q80EmbeddingAndTiedHead) {
  const GgufTensorInfo& t = tensor("token_embd.weight");
  ASSERT_EQ(t.dtype, kQ8_0);
  const int64_t n_vocab = t.shape[0], d = t.shape[1];
  ASSERT_EQ(d, 576);
  const std::vector<int32_t> ids = {0, 1, 2, 100, 12345, static_cast<int32_t>(n_vocab - 1)};
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> y(static_cast<size_t>(n * d)), y_ref(y.size());
  ASSERT_EQ(
      embedding(y.data(), d, data(t), t.dtype, row_bytes(t.dtype, d), n_vocab, d, ids.data(), n),
      Status::kOk);
  ASSERT_EQ(embedding_ref(y_ref.data(), d, data(t), t.dtype, row_bytes(t.dtype, d), n_vocab, d,
                          ids.data(), n),
            Status::kOk);
  EXPECT_EQ(y, y_ref);
  double norm = 0;
  for (float v : y) {
    ASSERT_TRUE(std::isfinite(v));
    norm += v * v;
  }
  EXPECT_GT(norm, 0.0);
  // The output head reuses the embedding (tied): logits = h . E^T.
  MatmulCache cache;
  const auto h = test::random_floats(static_cast<size_t>(2 * d), -1.0f, 1.0f, 5);
  test::check_matmul(cache, ComputeType::kBF16, data(t), t.dtype, row_bytes(t.dtype, d), h, nullptr,
                     2, n_vocab, d);
}

}  // namespace
}  // namespace strata::cpu
