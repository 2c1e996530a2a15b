// The demo model's tokenizer (SmolLM2-135M-Instruct GGUF, "smollm" pattern:
// digits one by one, then GPT-2's regex) on a few strings, and the golden
// entries that need the demo model. Skips when scripts/fetch-demo-model.sh has
// not fetched it.
#include <gtest/gtest.h>

#include <filesystem>

#include "tokenizer/golden_runner.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace strata {
namespace {

const std::string kDemo = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

#define SKIP_WITHOUT_DEMO_MODEL()                                                       \
  if (!std::filesystem::exists(kDemo)) {                                                \
    GTEST_SKIP() << kDemo << " is absent; run scripts/fetch-demo-model.sh to fetch it"; \
  }

TEST(DemoModel, EncodesLikeTheReference) {
  SKIP_WITHOUT_DEMO_MODEL();
  const Tokenizer& tok = test::cached_tokenizer(kDemo);
  EXPECT_EQ(tok.kind(), "byte-level BPE (smollm pattern)");
  EXPECT_EQ(tok.n_vocab(), 49152);
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"Hello, we can use", {19556, 28, 392, 416, 722}},
      {"The capital of France is", {504, 3575, 282, 4649, 314}},
      {"\n", {198}},
      {"Hello world! 123", {19556, 905, 17, 216, 33, 34, 35}},
      {"Caf\xC3\xA9 d\xC3\xA9j\xC3\xA0 vu.", {51, 1939, 2756, 32564, 90, 16739, 386, 101, 30}},
      {"  multiple   spaces", {216, 2701, 256, 5600}},
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(test::join_ids(tok.encode(text, false)), test::join_ids(ids)) << text;
    EXPECT_EQ(tok.decode(tok.encode(text, false), false), text);
  }
}

TEST(DemoModel, ChatMarkersAndDefaults) {
  SKIP_WITHOUT_DEMO_MODEL();
  const Tokenizer& tok = test::cached_tokenizer(kDemo);
  EXPECT_FALSE(tok.add_bos_default());
  const std::vector<int32_t> eos = tok.eos_ids();
  EXPECT_NE(std::find(eos.begin(), eos.end(), 2), eos.end());  // <|im_end|>
  EXPECT_NE(tok.chat_template().find("<|im_start|>"), std::string::npos);
  const std::vector<int32_t> ids = tok.encode("<|im_start|>user\nHi<|im_end|>\n", false);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 2), ids.end());
  EXPECT_EQ(tok.decode(ids, true), "user\nHi\n");
}

TEST(DemoModel, GoldenEntriesThatNeedTheModel) {
  SKIP_WITHOUT_DEMO_MODEL();
  test::run_golden(true);
}

}  // namespace
}  // namespace strata
