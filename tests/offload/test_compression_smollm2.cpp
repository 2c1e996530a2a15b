// Compression on the demo model (models/SmolLM2-135M-Instruct.Q4_1.gguf): the
// perplexity of the first two chunks of the golden perplexity text
// (tests/data/golden/smollm2.json, its ids and procedure) with the KV cache
// in q8 (Q8A32) stays within the target of +0.5% of the f32 KV run, and so
// does the model with its weight matrices requantized to q8 (Q8A32, a weight
// pack) against the GGUF's own Q4_1/Q8_0 weights. q4 KV and q4 weights are
// measured and printed (scripts/accuracy_compression.sh runs the whole text).
// And the decode path (pages filled one token per step) against the prompt
// path on the first chunk.
// Skips with a message when the model is absent.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "generate/perplexity.h"
#include "model/model.h"
#include "offload/offload_engine.h"
#include "offload/engine_goldens.h"

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

// The decode path: the first chunk of the golden text fed one token per
// decode step (a 1-token prompt, then teacher forcing), so every KV page is
// filled by decode steps and quantized pages are re-gridded as their keys
// come in, against the same chunk scored as a prompt (pages gridded once).
// q8 KV must stay within the +0.5% target of the f32 KV run on the decode
// path; q4 KV must lose no more there than on the prompt path, up to one
// point (a q4 perplexity moves by about half a point with any upstream
// rounding difference: keys on a rounding boundary take the other code).
// This chunk is harder for q4 than the text's average (+10% on the prompt
// path against +2.8% over all seven chunks), so its q4 figure is compared
// with the prompt path rather than with the 5% target.
TEST(CompressionSmolLM2, DecodeFilledPagesLoseNoMoreThanPromptPages) {
  if (!fs::exists(kModel)) {
    GTEST_SKIP() << kModel << " is absent; run scripts/fetch-demo-model.sh to fetch it";
  }
  const auto golden = test::load_json(std::string(STRATA_TEST_DATA) + "/golden/smollm2.json");
  const auto& pg = golden["perplexity"];
  const int64_t n_ctx = pg["n_ctx"].get<int64_t>();
  std::vector<int32_t> ids = pg["ids"].get<std::vector<int32_t>>();
  ids.resize(static_cast<size_t>(n_ctx));
  const auto model = Model::open(kModel);
  const int64_t V = model->config().n_vocab;
  auto decode_ppl = [&](DType kv) {
    EngineOptions o;
    o.compute_dtype = DType::kF32;
    o.kv_dtype = kv;
    o.gpu_batch_size = 1;
    o.kv_budget_bytes = uint64_t{256} << 20;
    o.threads = 1;  // 255 one-token steps: no parallel regions to contend for under ctest -j
    const auto engine = make_engine(*model, o);
    SeqInput in;
    in.prompt = {ids[0]};
    in.max_new_tokens = static_cast<int32_t>(n_ctx - 1);
    double nll = 0;
    int64_t n = 0;
    engine->run_block(std::span<const SeqInput>(&in, 1),
                      [&](int step, std::span<const int32_t>, const float* logits,
                          std::span<SeqAction> out) {
                        const int32_t want = ids[static_cast<size_t>(step + 1)];
                        double mx = logits[0];
                        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(logits[v]));
                        double sum = 0;
                        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(logits[v]) - mx);
                        nll += -(double(logits[want]) - mx - std::log(sum));
                        ++n;
                        out[0].next_token = want;
                        out[0].finished = step + 2 >= n_ctx;
                      });
    EXPECT_EQ(n, n_ctx - 1);
    return std::exp(nll / static_cast<double>(n));
  };
  const double base = decode_ppl(DType::kF32);
  const double q8 = decode_ppl(DType::kQ8A32);
  const double q4 = decode_ppl(DType::kQ4A32);
  auto prompt_ppl = [&](DType kv) {
    EngineOptions o;
    o.compute_dtype = DType::kF32;
    o.kv_dtype = kv;
    o.gpu_batch_size = 1;
    o.kv_budget_bytes = uint64_t{256} << 20;
    o.threads = 1;  // 255 one-token steps: no parallel regions to contend for under ctest -j
    const auto engine = make_engine(*model, o);
    return perplexity(*engine, ids, n_ctx).ppl;
  };
  const double base_prompt = prompt_ppl(DType::kF32);
  const double q4_prompt = prompt_ppl(DType::kQ4A32);
  const double q4_prompt_pct = 100.0 * (q4_prompt / base_prompt - 1.0);
  auto pct = [&](double p) { return 100.0 * (p / base - 1.0); };
  std::printf("[ smollm2 decode path ] ppl over %lld tokens: KV f32 %.4f, q8a32 %.4f (%+.2f%%), "
              "q4a32 %.4f (%+.2f%%); prompt path: f32 %.4f, q4a32 %.4f (%+.2f%%)\n",
              static_cast<long long>(n_ctx - 1), base, q8, pct(q8), q4, pct(q4), base_prompt,
              q4_prompt, q4_prompt_pct);
  EXPECT_LE(std::fabs(pct(q8)), 0.5);
  EXPECT_LE(pct(q4), q4_prompt_pct + 1.0);
}

}  // namespace
}  // namespace strata
