// Chat templates through the Jinja interpreter: ChatML with and without a
// system message, SmolLM2's default system message, the golden SmolLM2 chat
// prompt, Llama 3 and 3.2 renderings (the date from strftime_now, pinned
// here), conversations of several turns (the expected text rendered from
// the same templates by Python's jinja2 as transformers sets it up), a
// template of another family, and the errors. The real templates of many
// models are checked against jinja2 in tests/jinja.
#include <gtest/gtest.h>

#include <ctime>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "generate/chat_template.h"
#include "generate/generate_test_util.h"

namespace strata {
namespace {

// SmolLM2-135M-Instruct's template, as stored in its GGUF (tokenizer.chat_template).
const char* kSmolLm2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

// Qwen2.5's, with escaped newlines as tokenizer_config.json carries them (abridged tools branch).
const char* kQwen25 =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == "
    "'system' %}\n        {{- messages[0]['content'] }}\n    {%- endif %}\n{%- else %}\n    {%- if "
    "messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + "
    "messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n        {{- "
    "'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages "
    "%}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' "
    "}}{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' "
    "}}\n{%- endif %}\n";

const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif "
    "%}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

// The parts of Llama 3.2's template that matter here.
const char* kLlama32 =
    "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- if strftime_now is defined "
    "%}\n        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n        "
    "{%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n{%- if "
    "messages[0]['role'] == 'system' %}\n    {%- set system_message = "
    "messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- "
    "set system_message = \"\" %}\n{%- endif %}\n{{- "
    "\"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- \"Cutting Knowledge Date: "
    "December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{{- "
    "system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n    {{- "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n";

// Llama 3.2's template with strftime_now pinned to 26 Jul 2024.
ChatTemplate llama32() {
  ChatTemplate ct(kLlama32, "llama3.2", "<|begin_of_text|>", "<|eot_id|>");
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  ct.pin_time(std::mktime(&tm));
  return ct;
}

TEST(ChatTemplate, ChatMlWithoutDefaultSystem) {
  const std::string tmpl = test::read_text(test::test_data("models/llama/chat_template.jinja"));
  const ChatTemplate ct(tmpl, "fixture", "<|begin_of_text|>", "<|eos|>");
  EXPECT_EQ(ct.render(std::nullopt, "Hi there"),
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ct.render(std::string("Be brief."), "Hi"),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, SmolLm2WritesItsDefaultSystemMessage) {
  const ChatTemplate ct(kSmolLm2, "smollm2", "<|im_start|>", "<|im_end|>");
  EXPECT_EQ(ct.render(std::nullopt, "Hello"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, SmolLm2GoldenChatPrompt) {
  // tests/data/golden/smollm2.json holds transformers' apply_chat_template
  // output for a system + user conversation.
  const auto golden =
      nlohmann::json::parse(test::read_text(test::test_data("golden/smollm2.json")));
  std::string want;
  for (const auto& p : golden["prompts"]) {
    const std::string t = p["text"].get<std::string>();
    if (t.rfind("<|im_start|>", 0) == 0) want = t;
  }
  ASSERT_FALSE(want.empty()) << "no chat prompt in the golden file";
  const ChatTemplate ct = ChatTemplate(kSmolLm2, "smollm2", "<|im_start|>", "<|im_end|>");
  EXPECT_EQ(ct.render(std::string("You are a helpful assistant."), "Write a haiku about the sea."),
            want);
}

TEST(ChatTemplate, QwenEscapedTemplateDefaultSystem) {
  const ChatTemplate ct(kQwen25, "qwen", "", "<|im_end|>");
  EXPECT_EQ(ct.render(std::nullopt, "x"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3) {
  const ChatTemplate ct(kLlama3, "llama3", "<|begin_of_text|>", "<|eot_id|>");
  EXPECT_EQ(ct.render(std::nullopt, "  What is 2+2? \n"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ct.render(std::string("You are terse."), "Hi"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are "
            "terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama32AlwaysWritesTheDatedSystemBlock) {
  ChatTemplate ct = llama32();
  EXPECT_EQ(ct.render(std::nullopt, "Hi"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
            "Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(
      ct.render(std::string(" Be kind. "), "Hi"),
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
      "Date: December 2023\nToday Date: 26 Jul 2024\n\nBe kind.<|eot_id|><|start_header_id|>"
      "user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

// System, user, assistant, user; and the same without the system message.
const std::vector<ChatMessage> kWithSystem = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello! "}, {"user", " What is 2+2?"}};
const std::vector<ChatMessage> kNoSystem = {
    {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};

TEST(ChatTemplate, ConversationsChatMl) {
  const ChatTemplate ct = ChatTemplate(kSmolLm2, "smollm2", "<|im_start|>", "<|im_end|>");
  EXPECT_EQ(ct.render(kWithSystem),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>"
            "assistant\nHello! <|im_end|>\n<|im_start|>user\n What is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(ct.render(kNoSystem),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!"
            "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, ConversationsLlama3) {
  const ChatTemplate l3(kLlama3, "llama3", "<|begin_of_text|>", "<|eot_id|>");
  EXPECT_EQ(l3.render(kWithSystem),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>"
            "assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n");
  EXPECT_EQ(l3.render(kNoSystem),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>"
            "assistant<|end_header_id|>\n\n");
  const ChatTemplate l32 = llama32();
  const std::string dated =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
      "December 2023\nToday Date: 26 Jul 2024\n\n";
  EXPECT_EQ(l32.render(kWithSystem),
            dated +
                "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(l32.render(kNoSystem),
            dated +
                "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>"
                "assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, OtherFamiliesRenderToo) {
  const ChatTemplate ct(
      "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} "
      "[/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}",
      "mistral", "<s>", "</s>");
  EXPECT_EQ(ct.render(kNoSystem), "<s>[INST] Hi [/INST]Hello!</s>[INST] Bye [/INST]");
}

TEST(ChatTemplate, ErrorsNameTheTemplate) {
  for (const auto& [t, part] : std::vector<std::pair<std::string, std::string>>{
           {"", "the chat template is empty; pass --chat-template"},
           {"  \n", "the chat template is empty"},
           {"{% for m in messages %}\n{{ m.content ", "models/x.gguf: template line 2"}}) {
    try {
      ChatTemplate ct(t, "models/x.gguf", "<s>", "</s>");
      ct.render(kNoSystem);
      ADD_FAILURE() << "no error for: " << t;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
  // raise_exception: the template's own message.
  const ChatTemplate gemma(
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}x",
      "gemma", "<bos>", "<eos>");
  EXPECT_EQ(gemma.render(kNoSystem), "x");
  try {
    gemma.render(kWithSystem);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("System role not supported"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
