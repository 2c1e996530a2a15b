// Compression on the demo model (models/SmolLM2-135M-Instruct.Q4_1.gguf): the
// perplexity of the first two chunks of the golden perplexity text
// (tests/data/golden/smollm2.json, its ids and procedure) with the KV cache
// in q8 (Q8A32) stays within the target of +0.5% of the f32 KV run, and so
// does the model with its weight matrices requantized to q8 (Q8A32, a weight
// pack) against the GGUF's own Q4_1/Q8_0 weights. q4 KV and q4 weights are
// measured and printed (scripts/accuracy_compression.sh runs the whole text).
// Skips with a message when the model is absent.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "generate/perplexity.h"
#include "model/model.h"
#include "offload/engine.h"
#include "tests/engine/engine_test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const std::string kModel = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

TEST(CompressionSmolLM2, Q8KvAndQ8WeightsWithinHalfAPercentOfPerplexity) {
  if (!fs::exists(kModel)) {
    GTEST_SKIP() << kModel << " is absent; run scripts/fetch-demo-model.sh to fetch it";
  }
  const auto golden = test::load_json(std::string(STRATA_TEST_DATA) + "/golden/smollm2.json");
  const auto& pg = golden["perplexity"];
  const int64_t n_ctx = pg["n_ctx"].get<int64_t>();
  std::vector<int32_t> ids = pg["ids"].get<std::vector<int32_t>>();
  ids.resize(static_cast<size_t>(2 * n_ctx));
  const auto model = Model::open(kModel);
  const fs::path packs = fs::temp_directory_path() / ("strata_smollm2_q8_" + std::to_string(::getpid()));
  auto ppl = [&](DType kv, std::optional<DType> weights) {
    EngineOptions o;
    o.compute_dtype = DType::kF32;
    o.kv_dtype = kv;
    o.gpu_batch_size = 1;
    o.kv_budget_bytes = uint64_t{256} << 20;
    o.weight_dtype = weights;
    o.offload_dir = (packs / (weights ? std::string(dtype_name(*weights)) : "none")).string();
    const auto engine = make_engine(*model, o);
    return perplexity(*engine, ids, n_ctx).ppl;
  };
  const double base = ppl(DType::kF32, std::nullopt);
  // The golden's first two chunks, as transformers scored them in f32.
  const double golden_nll = pg["chunk_nll_sum"][0].get<double>() + pg["chunk_nll_sum"][1].get<double>();
  EXPECT_NEAR(std::log(base), golden_nll / static_cast<double>(2 * (n_ctx - 1)), 1e-3);
  const double kv_q8 = ppl(DType::kQ8A32, std::nullopt);
  const double kv_q4 = ppl(DType::kQ4A32, std::nullopt);
  const double w_q8 = ppl(DType::kF32, DType::kQ8A32);
  const double w_q4 = ppl(DType::kF32, DType::kQ4A32);
  fs::remove_all(packs);
  auto pct = [&](double p) { return 100.0 * (p / base - 1.0); };
  std::printf("[ smollm2 ] ppl over %lld tokens: f32 %.4f; KV q8a32 %.4f (%+.2f%%), KV q4a32 %.4f "
              "(%+.2f%%); weights q8a32 %.4f (%+.2f%%), weights q4a32 %.4f (%+.2f%%)\n",
              static_cast<long long>(ids.size()), base, kv_q8, pct(kv_q8), kv_q4, pct(kv_q4),
              w_q8, pct(w_q8), w_q4, pct(w_q4));
  EXPECT_LE(std::fabs(pct(kv_q8)), 0.5) << "q8 KV perplexity " << kv_q8 << " vs " << base;
  EXPECT_LE(std::fabs(pct(w_q8)), 0.5) << "q8 weights perplexity " << w_q8 << " vs " << base;
  EXPECT_TRUE(std::isfinite(kv_q4) && std::isfinite(w_q4));
}

}  // namespace
}  // namespace strata
