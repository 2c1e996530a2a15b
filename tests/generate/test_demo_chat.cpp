// The demo model's chat template (label model): read from the GGUF, its
// default system message written when a conversation has none, and the
// golden chat prompt of tests/data/golden/smollm2.json rendered and
// tokenized to the golden ids.
// Skips when the demo model has not been fetched.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "generate/chat_template.h"
#include "generate/driver.h"
#include "generate/generate_test_util.h"
#include "generate/prompt_file.h"

namespace strata {
namespace {

const std::string kDemo = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

TEST(DemoChat, GoldenChatPromptFromTheGgufTemplate) {
  if (!std::filesystem::exists(kDemo)) {
    GTEST_SKIP() << kDemo << " is absent; run scripts/fetch-demo-model.sh";
  }
  const auto tok = Tokenizer::from_path(kDemo);
  const ChatTemplate ct = ChatTemplate::for_model(*tok, kDemo);
  EXPECT_EQ(ct.render(std::nullopt, "Hi"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

  const auto golden =
      nlohmann::json::parse(test::read_text(test::test_data("golden/smollm2.json")));
  const nlohmann::json* chat = nullptr;
  for (const auto& p : golden["prompts"]) {
    if (p["text"].get<std::string>().rfind("<|im_start|>", 0) == 0) chat = &p;
  }
  ASSERT_NE(chat, nullptr);
  const std::string text =
      ct.render(std::string("You are a helpful assistant."), "Write a haiku about the sea.");
  EXPECT_EQ(text, (*chat)["text"].get<std::string>());
  EXPECT_EQ(tok->encode(text, false), (*chat)["ids"].get<std::vector<int32_t>>());

  // The same through the driver's preparation (--chat --system).
  const PromptFile pf = parse_prompt_file("p.txt", "Write a haiku about the sea.\n");
  GenerateOptions o;
  o.chat = true;
  o.system = "You are a helpful assistant.";
  const auto jobs = prepare_jobs(pf, *tok, 8192, o, kDemo);
  EXPECT_EQ(jobs[0].tokens, (*chat)["ids"].get<std::vector<int32_t>>());
}

}  // namespace
}  // namespace strata
