// End to end on the demo model (label model; skips without it): perplexity
// on tests/data/text/ppl.txt by the golden procedure, and greedy generation
// of the golden prompts, the chat one through --chat --system.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "generate/generate_test_util.h"
#include "support/run_cli.h"

namespace strata {
namespace {

using test::read_lines;
using test::read_text;
using test::ScratchDir;
using test::test_data;
using test::write_text;
using test::run_strata;

const std::string kDemo = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

#define SKIP_WITHOUT_DEMO()                                                 \
  if (!std::filesystem::exists(kDemo)) {                                    \
    GTEST_SKIP() << kDemo << " is absent; run scripts/fetch-demo-model.sh"; \
  }

TEST(CliDemo, PerplexityMatchesTheGolden) {
  SKIP_WITHOUT_DEMO();
  ScratchDir dir;
  const auto golden =
      nlohmann::json::parse(read_text(test_data("golden/smollm2.json")))["perplexity"];
  const auto r =
      run_strata({"perplexity", "--model", kDemo, "--text", test_data("text/ppl.txt")}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double ppl = 0;
  long long n_scored = 0, n_chunks = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str(), "ppl %lf\nn_scored %lld\nn_chunks %lld", &ppl, &n_scored,
                        &n_chunks),
            3)
      << r.out;
  EXPECT_EQ(n_scored, golden["n_scored"].get<long long>());
  EXPECT_EQ(n_chunks, golden["n_chunks"].get<long long>());
  // f32 forward: each NLL is off by summation order only (~1e-4 at most over
  // 30 layers), so the mean NLL, and log(ppl), agree to 1e-3.
  EXPECT_NEAR(std::log(ppl), std::log(golden["ppl"].get<double>()), 1e-3);
}

TEST(CliDemo, GreedyGenerationMatchesTheGolden) {
  SKIP_WITHOUT_DEMO();
  ScratchDir dir;
  const auto golden = nlohmann::json::parse(read_text(test_data("golden/smollm2.json")));
  std::string plain;
  std::vector<const nlohmann::json*> plain_golden;
  const nlohmann::json* chat = nullptr;
  for (const auto& p : golden["prompts"]) {
    const std::string text = p["text"].get<std::string>();
    if (text.rfind("<|im_start|>", 0) == 0) {
      chat = &p;
    } else {
      plain += nlohmann::json({{"prompt", text}}).dump() + "\n";
      plain_golden.push_back(&p);
    }
  }
  ASSERT_NE(chat, nullptr);
  write_text(dir.file("plain.jsonl"), plain);
  write_text(dir.file("chat.txt"), "Write a haiku about the sea.\n");
  auto check = [&](const std::string& out, const nlohmann::json& g) {
    const auto rec = nlohmann::json::parse(out);
    EXPECT_EQ(rec["prompt_tokens"], g["ids"].size());
    const auto got = rec["completion_ids"].get<std::vector<int32_t>>();
    const auto want = g["greedy"].get<std::vector<int32_t>>();
    const auto margins = g["greedy_margins"].get<std::vector<double>>();
    for (size_t i = 0; i < want.size() && i < got.size() && margins[i] >= 1e-2; ++i) {
      EXPECT_EQ(got[i], want[i]) << "step " << i << " of " << g["text"];
    }
  };
  auto r = run_strata(
      {"generate", "--model", kDemo, "--prompts", dir.file("plain.jsonl"), "--output",
       dir.file("plain.out"), "--max-new-tokens", "16", "--ids", "--compute-dtype", "f32"},
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = read_lines(dir.file("plain.out"));
  ASSERT_EQ(lines.size(), plain_golden.size());
  for (size_t i = 0; i < lines.size(); ++i) check(lines[i], *plain_golden[i]);

  r = run_strata({"generate", "--model", kDemo, "--prompts", dir.file("chat.txt"), "--output",
                  dir.file("chat.out"), "--max-new-tokens", "16", "--ids", "--compute-dtype", "f32",
                  "--chat", "--system", "You are a helpful assistant."},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  check(read_lines(dir.file("chat.out")).at(0), *chat);
}

}  // namespace
}  // namespace strata
