// `strata render-chat` and --chat-template through the executable: the text
// printed is exactly jinja2's rendering of a real template (the golden of
// tests/data/chat-templates/goldens.json, tools and a tool call included),
// with no newline added; --no-generation-prompt drops the assistant header;
// bad files end with one error line and exit status 1; generate --chat
// --chat-template feeds the model that template's text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/files.h"
#include "support/run_cli.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

using nlohmann::ordered_json;
using test::read_lines;
using test::read_text;
using test::run_strata;
using test::ScratchDir;
using test::test_data;
using test::write_text;

const std::string kLlama = test_data("models/llama");
const std::string kQwen = test_data("chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja");

const ordered_json& golden(const std::string& conversation, bool add_generation_prompt) {
  static const ordered_json all =
      ordered_json::parse(read_text(test_data("chat-templates/goldens.json")));
  for (const auto& c : all["cases"]) {
    if (c["template"] == "Qwen-Qwen2.5-7B-Instruct.jinja" && c["conversation"] == conversation &&
        c["variables"]["add_generation_prompt"] == add_generation_prompt) {
      return c;
    }
  }
  ADD_FAILURE() << "no golden for " << conversation;
  return all;
}

TEST(RenderChat, PrintsExactlyWhatJinja2Renders) {
  ScratchDir dir;
  const ordered_json& g = golden("tool_call", true);
  write_text(dir.file("conv.json"), g["variables"]["messages"].dump());
  write_text(dir.file("tools.json"), g["variables"]["tools"].dump());
  const auto r =
      run_strata({"render-chat", "--model", kLlama, "--chat-template", kQwen, "--messages",
                  dir.file("conv.json"), "--tools", dir.file("tools.json")},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, g["text"].get<std::string>());

  const ordered_json& plain = golden("multi_turn", false);
  write_text(dir.file("multi.json"),
             ordered_json{{"messages", plain["variables"]["messages"]}}.dump());
  const auto n = run_strata({"render-chat", "--model", kLlama, "--chat-template", kQwen,
                             "--messages", dir.file("multi.json"), "--no-generation-prompt"},
                            dir.path());
  ASSERT_EQ(n.exit_code, 0) << n.err;
  EXPECT_EQ(n.out, plain["text"].get<std::string>());
}

TEST(RenderChat, TheModelsOwnTemplateByDefault) {
  ScratchDir dir;
  write_text(dir.file("conv.json"), R"([{"role": "user", "content": "Hi"}])");
  const auto r = run_strata({"render-chat", "--model", kLlama, "--messages", dir.file("conv.json")},
                            dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(RenderChat, BadFilesAreOneLineErrors) {
  ScratchDir dir;
  write_text(dir.file("bad.json"), "[{\"role\": \"user\", ");
  write_text(dir.file("norole.json"), R"([{"content": "x"}])");
  write_text(dir.file("empty.json"), "[]");
  write_text(dir.file("conv.json"), R"([{"role": "user", "content": "Hi"}])");
  write_text(dir.file("broken.jinja"), "{% for m in messages %}\n{{ m.content }");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--messages", dir.file("missing.json")}, "missing.json: cannot read the --messages file"},
      {{"--messages", dir.file("bad.json")}, "bad.json: --messages is not valid JSON"},
      {{"--messages", dir.file("norole.json")}, "message 0 has no \"role\""},
      {{"--messages", dir.file("empty.json")}, "expected a non-empty list of messages"},
      {{"--messages", dir.file("conv.json"), "--chat-template", dir.file("broken.jinja")},
       "broken.jinja: template line 2"},
      {{"--messages", dir.file("conv.json"), "--tools", dir.file("conv.json"), "--chat-template",
        dir.file("nope.jinja")},
       "nope.jinja: cannot read the chat template"},
  };
  for (const auto& [args, part] : cases) {
    std::vector<std::string> full = {"render-chat", "--model", kLlama};
    full.insert(full.end(), args.begin(), args.end());
    const auto r = run_strata(full, dir.path());
    EXPECT_EQ(r.exit_code, 1) << part << "\n" << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(RenderChat, GenerateUsesTheGivenTemplate) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), "Hello there\n");
  write_text(dir.file("t.jinja"),
             "{% for m in messages %}<<{{ m.role }}>> {{ m.content }}\n{% endfor %}<<assistant>>");
  const auto r =
      run_strata({"generate", "--model", kLlama, "--prompts", dir.file("p.txt"), "--output",
                  dir.file("out.jsonl"), "--chat", "--system", "Be brief.", "--chat-template",
                  dir.file("t.jinja"), "--max-new-tokens", "2", "--compute-dtype", "f32"},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rec = nlohmann::json::parse(read_lines(dir.file("out.jsonl"))[0]);
  const auto tok = Tokenizer::from_path(kLlama);
  EXPECT_EQ(rec["prompt_tokens"],
            tok->encode("<<system>> Be brief.\n<<user>> Hello there\n<<assistant>>", false).size());
}

}  // namespace
}  // namespace strata
