// Prompt files: plain text and JSONL, format detection, defaults and
// overrides, and errors that name the file, the line and the field.
#include <gtest/gtest.h>

#include "core/error.h"
#include "generate/prompt_file.h"
#include "generate/generate_test_util.h"

namespace strata {
namespace {

// The message of the Error `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& msg, std::initializer_list<const char*> parts) {
  EXPECT_FALSE(msg.empty()) << "no error";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << " in: " << msg;
}

TEST(PromptFile, PlainTextOneLinePerPrompt) {
  const PromptFile pf = parse_prompt_file(
      "p.txt", "first prompt\n\n   \nsecond \\n not an escape\r\n  third keeps spaces  \nlast");
  EXPECT_EQ(pf.format, PromptFormat::kText);
  ASSERT_EQ(pf.prompts.size(), 4u);
  EXPECT_EQ(pf.prompts[0].text, "first prompt");
  EXPECT_EQ(pf.prompts[1].text, "second \\n not an escape");
  EXPECT_EQ(pf.prompts[2].text, "  third keeps spaces  ");
  EXPECT_EQ(pf.prompts[3].text, "last");
  // ids are 0-based line indices (blank lines count); index is the order.
  EXPECT_EQ(pf.prompts[0].id, 0);
  EXPECT_EQ(pf.prompts[1].id, 3);
  EXPECT_EQ(pf.prompts[2].id, 4);
  EXPECT_EQ(pf.prompts[3].id, 5);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(pf.prompts[i].index, i);
  EXPECT_EQ(pf.prompts[1].line, 4);
  EXPECT_FALSE(pf.prompts[0].temperature);
}

TEST(PromptFile, PlainTextStartingWithBraceInATxtFileIsStillJsonl) {
  // Detection by first character: documented.
  const PromptFile pf = parse_prompt_file("p.txt", "  {\"prompt\": \"x\"}\n");
  EXPECT_EQ(pf.format, PromptFormat::kJsonl);
  EXPECT_EQ(pf.prompts[0].text, "x");
}

TEST(PromptFile, ByteOrderMarkIsIgnored) {
  const PromptFile pf = parse_prompt_file("p.txt", "\xEF\xBB\xBFhello\n");
  EXPECT_EQ(pf.prompts[0].text, "hello");
}

TEST(PromptFile, JsonlFields) {
  const PromptFile pf = parse_prompt_file(
      "p.jsonl",
      "{\"prompt\": \"a\", \"id\": \"q-1\", \"max_new_tokens\": 7, \"temperature\": 0.5, "
      "\"stop\": \"###\"}\n"
      "\n"
      "{\"prompt\": \"b\\nsecond line\", \"id\": 42, \"stop\": [\"x\", \"yy\"], \"system\": \"Be "
      "brief.\", \"meta\": {\"k\": 1}}\n"
      "{\"prompt\": \"c\", \"max_new_tokens\": 3.0, \"temperature\": 0}\n");
  EXPECT_EQ(pf.format, PromptFormat::kJsonl);
  ASSERT_EQ(pf.prompts.size(), 3u);
  EXPECT_EQ(pf.prompts[0].id, "q-1");
  EXPECT_EQ(*pf.prompts[0].max_new_tokens, 7);
  EXPECT_FLOAT_EQ(*pf.prompts[0].temperature, 0.5f);
  EXPECT_EQ(*pf.prompts[0].stop, std::vector<std::string>{"###"});
  EXPECT_EQ(pf.prompts[1].text, "b\nsecond line");
  EXPECT_EQ(pf.prompts[1].id, 42);
  EXPECT_EQ(*pf.prompts[1].stop, (std::vector<std::string>{"x", "yy"}));
  EXPECT_EQ(*pf.prompts[1].system, "Be brief.");
  EXPECT_EQ(pf.prompts[1].line, 3);
  EXPECT_EQ(pf.prompts[2].id, 3);  // default: 0-based line index
  EXPECT_EQ(*pf.prompts[2].max_new_tokens, 3);
  EXPECT_FLOAT_EQ(*pf.prompts[2].temperature, 0.0f);
}

TEST(PromptFile, JsonlDetectedByExtensionEvenIfFirstLineIsBad) {
  expect_contains(error_of([] { parse_prompt_file("in.jsonl", "hello\n"); }),
                  {"in.jsonl:1", "not valid JSON"});
}

TEST(PromptFile, JsonlErrorsNameFileLineAndField) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"{\"id\": 1}", {"p.jsonl:2", "'prompt'", "missing"}},
      {"{\"prompt\": 5}", {"p.jsonl:2", "'prompt'", "an integer"}},
      {"{\"prompt\": \"x\", \"id\": [1]}", {"p.jsonl:2", "'id'", "string or a number"}},
      {"{\"prompt\": \"x\", \"max_new_tokens\": 0}", {"p.jsonl:2", "'max_new_tokens'", ">= 1"}},
      {"{\"prompt\": \"x\", \"max_new_tokens\": 2.5}", {"p.jsonl:2", "'max_new_tokens'", "2.5"}},
      {"{\"prompt\": \"x\", \"max_new_tokens\": \"8\"}",
       {"p.jsonl:2", "'max_new_tokens'", "a string"}},
      {"{\"prompt\": \"x\", \"temperature\": -1}", {"p.jsonl:2", "'temperature'", ">= 0"}},
      {"{\"prompt\": \"x\", \"stop\": 3}", {"p.jsonl:2", "'stop'", "list of strings"}},
      {"{\"prompt\": \"x\", \"stop\": [\"a\", 1]}", {"p.jsonl:2", "'stop' item 1"}},
      {"{\"prompt\": \"x\", \"stop\": \"\"}", {"p.jsonl:2", "'stop'", "empty"}},
      {"{\"prompt\": \"x\", \"system\": 1}", {"p.jsonl:2", "'system'"}},
      {"{\"prompt\": \"x\", \"prompt\": \"y\"}", {"p.jsonl:2", "'prompt' twice"}},
      {"[\"x\"]", {"p.jsonl:2", "an array", "JSON object"}},
      {"{\"prompt\": \"x\"", {"p.jsonl:2", "not valid JSON"}},
  };
  for (const auto& [line2, parts] : cases) {
    const std::string msg =
        error_of([&] { parse_prompt_file("p.jsonl", "{\"prompt\": \"ok\"}\n" + line2 + "\n"); });
    EXPECT_FALSE(msg.empty()) << line2;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << p << " in: " << msg;
  }
}

TEST(PromptFile, EmptyFileIsAnError) {
  expect_contains(error_of([] { parse_prompt_file("e.txt", ""); }), {"e.txt", "no prompts"});
  expect_contains(error_of([] { parse_prompt_file("e.txt", "\n  \n\r\n"); }),
                  {"e.txt", "no prompts"});
}

TEST(PromptFile, ReadFromDiskHashesTheContent) {
  test::ScratchDir dir;
  test::write_text(dir.file("a.txt"), "one\ntwo\n");
  test::write_text(dir.file("b.txt"), "one\ntwo!\n");
  const PromptFile a = read_prompt_file(dir.file("a.txt"));
  const PromptFile a2 = read_prompt_file(dir.file("a.txt"));
  const PromptFile b = read_prompt_file(dir.file("b.txt"));
  EXPECT_EQ(a.prompts.size(), 2u);
  EXPECT_EQ(a.content_hash, a2.content_hash);
  EXPECT_NE(a.content_hash, b.content_hash);
  expect_contains(error_of([&] { read_prompt_file(dir.file("missing.txt")); }),
                  {"missing.txt", "cannot open"});
  expect_contains(error_of([&] { read_prompt_file(dir.path()); }), {"is a directory"});
}

TEST(PromptFile, Fnv1aKnownValues) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

}  // namespace
}  // namespace strata
