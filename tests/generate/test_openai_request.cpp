// OpenAI batch requests: the format is told from the first record (or
// given), chat and completions requests are read with their parameters, and
// every problem with a line becomes that line's error (code and a message
// naming the line and the field) without failing the file.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "generate/openai_request.h"
#include "generate/prompt_file.h"

namespace strata {
namespace {

using nlohmann::json;

std::string chat_line(const std::string& id, const json& body) {
  return json{
      {"custom_id", id}, {"method", "POST"}, {"url", "/v1/chat/completions"}, {"body", body}}
      .dump();
}

std::string completion_line(const std::string& id, const json& body) {
  return json{{"custom_id", id}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", body}}
      .dump();
}

// The record of `line` read alone (line number 1).
PromptRecord read_line(const std::string& line) {
  PromptRecord rec;
  rec.line = 1;
  parse_openai_request(line, rec);
  return rec;
}

void expect_error(const std::string& line, const std::string& code, const std::string& part) {
  const PromptRecord rec = read_line(line);
  EXPECT_EQ(rec.error_code, code) << line << "\n -> " << rec.error;
  EXPECT_NE(rec.error.find(part), std::string::npos) << rec.error;
  EXPECT_EQ(rec.error.rfind("line 1: ", 0), 0u) << rec.error;
  EXPECT_EQ(rec.error.find('\n'), std::string::npos) << rec.error;
}

TEST(OpenAiRequest, ToldFromTheFirstRecord) {
  const std::string file = chat_line("a", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}) +
                           "\n" + completion_line("b", {{"prompt", "Once"}}) + "\n";
  const PromptFile pf = parse_prompt_file("batch.jsonl", file);
  EXPECT_EQ(pf.format, PromptFormat::kOpenAi);
  ASSERT_EQ(pf.prompts.size(), 2u);
  EXPECT_EQ(pf.prompts[0].endpoint, Endpoint::kChatCompletions);
  EXPECT_EQ(pf.prompts[1].endpoint, Endpoint::kCompletions);
  EXPECT_EQ(pf.prompts[1].text, "Once");
  EXPECT_EQ(pf.prompts[1].id, "b");
  // A plain JSONL file stays JSONL, and a format given wins over the guess.
  EXPECT_EQ(parse_prompt_file("p.jsonl", "{\"prompt\": \"x\"}\n").format, PromptFormat::kJsonl);
  const PromptFile forced =
      parse_prompt_file("p.jsonl", "{\"prompt\": \"x\"}\n", PromptFormat::kOpenAi);
  EXPECT_EQ(forced.format, PromptFormat::kOpenAi);
  EXPECT_EQ(forced.prompts[0].error_code, "invalid_request");
}

TEST(OpenAiRequest, ChatFields) {
  const PromptRecord rec = read_line(chat_line(
      "req-1",
      {{"model", "anything"},
       {"messages",
        {{{"role", "system"}, {"content", "Be brief."}},
         {{"role", "user"},
          {"content", {{{"type", "text"}, {"text", "one"}}, {{"type", "text"}, {"text", "two"}}}}},
         {{"role", "assistant"}, {"content", "ok"}, {"name", "bot"}},
         {{"role", "user"}, {"content", "Again?"}}}},
       {"max_completion_tokens", 17},
       {"temperature", 0.7},
       {"top_p", 0.9},
       {"seed", -3},
       {"stop", {"\n\n", "END"}},
       {"n", 1},
       {"stream", false},
       {"logprobs", false},
       {"user", "u"}}));
  ASSERT_EQ(rec.error_code, "") << rec.error;
  EXPECT_EQ(rec.id, "req-1");
  ASSERT_EQ(rec.messages.size(), 4u);
  EXPECT_EQ(rec.messages[0].role, "system");
  EXPECT_EQ(rec.messages[1].content, "one\ntwo");
  EXPECT_EQ(rec.messages[2].role, "assistant");
  EXPECT_EQ(*rec.max_new_tokens, 17);
  EXPECT_FLOAT_EQ(*rec.temperature, 0.7f);
  EXPECT_FLOAT_EQ(*rec.top_p, 0.9f);
  EXPECT_EQ(*rec.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(*rec.stop, (std::vector<std::string>{"\n\n", "END"}));
}

TEST(OpenAiRequest, CompletionPromptAsAListOfOne) {
  const PromptRecord rec =
      read_line(completion_line("c", {{"prompt", {"text"}}, {"max_tokens", 3}}));
  ASSERT_EQ(rec.error_code, "") << rec.error;
  EXPECT_EQ(rec.text, "text");
  EXPECT_EQ(*rec.max_new_tokens, 3);
}

TEST(OpenAiRequest, ProblemsAreTheLinesErrors) {
  const json hi = {{{"role", "user"}, {"content", "Hi"}}};
  expect_error("{\"custom_id\": \"x\", ", "invalid_json", "not valid JSON");
  expect_error("[1, 2]", "invalid_json", "expected a JSON object");
  expect_error("{\"custom_id\": \"x\", \"body\": {}, \"body\": {}}", "invalid_json", "body");
  expect_error(std::string("{\"custom_id\": \"\xff\"}"), "invalid_json", "not UTF-8");
  expect_error(
      json{{"method", "POST"}, {"url", "/v1/completions"}, {"body", {{"prompt", "x"}}}}.dump(),
      "invalid_request", "custom_id is missing");
  expect_error(json{{"custom_id", 7}, {"method", "POST"}, {"url", "/v1/completions"}}.dump(),
               "invalid_request", "custom_id is 7, expected a string");
  expect_error(json{{"custom_id", "x"}, {"method", "GET"}, {"url", "/v1/completions"}}.dump(),
               "invalid_request", "method is \"GET\"");
  expect_error(json{{"custom_id", "x"},
                    {"method", "POST"},
                    {"url", "/v1/embeddings"},
                    {"body", {{"input", "x"}}}}
                   .dump(),
               "invalid_url", "/v1/embeddings");
  expect_error(
      json{{"custom_id", "x"}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", "prompt"}}
          .dump(),
      "invalid_request", "body is a string");
  expect_error(chat_line("x", {{"messages", hi}, {"n", 2}}), "unsupported_parameter", "body.n");
  expect_error(chat_line("x", {{"messages", hi}, {"logprobs", true}}), "unsupported_parameter",
               "logprobs");
  expect_error(completion_line("x", {{"prompt", "x"}, {"logprobs", 0}}), "unsupported_parameter",
               "logprobs");
  expect_error(chat_line("x", {{"messages", hi}, {"stream", true}}), "unsupported_parameter",
               "stream");
  expect_error(chat_line("x", {{"messages", hi}, {"tools", json::array({{{"type", "function"}}})}}),
               "unsupported_parameter", "body.tools");
  expect_error(chat_line("x", {{"messages", hi}, {"frequency_penalty", 0.5}}),
               "unsupported_parameter", "frequency_penalty");
  expect_error(chat_line("x", {{"messages", hi}, {"prompt", "x"}}), "unsupported_parameter",
               "body.prompt");
  expect_error(completion_line("x", {{"prompt", "x"}, {"echo", true}}), "unsupported_parameter",
               "echo");
  expect_error(completion_line("x", {{"prompt", {"a", "b"}}}), "unsupported_parameter",
               "one prompt per request");
  expect_error(completion_line("x", {{"prompt", 5}}), "invalid_request", "body.prompt is 5");
  expect_error(completion_line("x", {{"max_tokens", 4}}), "invalid_request",
               "body.prompt is missing");
  expect_error(chat_line("x", {{"messages", json::array()}}), "invalid_request", "non-empty list");
  expect_error(chat_line("x", {{"messages", {{{"role", "tool"}, {"content", "x"}}}}}),
               "invalid_request", "messages[0].role is \"tool\"");
  expect_error(chat_line("x", {{"messages", {{{"role", "user"}}}}}), "invalid_request",
               "messages[0].content is missing");
  expect_error(
      chat_line("x", {{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}),
      "unsupported_parameter", "not a text part");
  expect_error(
      chat_line("x", {{"messages",
                       {{{"role", "user"}, {"content", "x"}, {"tool_calls", json::array()}}}}}),
      "unsupported_parameter", "tool_calls");
  expect_error(chat_line("x", {{"messages", hi}, {"max_tokens", 0}}), "invalid_request",
               "body.max_tokens is 0");
  expect_error(chat_line("x", {{"messages", hi}, {"max_tokens", 5}, {"max_completion_tokens", 6}}),
               "invalid_request", "disagree");
  expect_error(chat_line("x", {{"messages", hi}, {"temperature", 2.5}}), "invalid_request",
               "temperature is 2.5");
  expect_error(chat_line("x", {{"messages", hi}, {"top_p", 0}}), "invalid_request", "top_p is 0");
  expect_error(chat_line("x", {{"messages", hi}, {"seed", 1.5}}), "invalid_request", "seed is 1.5");
  expect_error(chat_line("x", {{"messages", hi}, {"stop", {"a", "b", "c", "d", "e"}}}),
               "invalid_request", "up to 4 strings");
  expect_error(chat_line("x", {{"messages", hi}, {"stop", ""}}), "invalid_request", "non-empty");
  expect_error(json{{"custom_id", "x"},
                    {"method", "POST"},
                    {"url", "/v1/completions"},
                    {"body", {{"prompt", "x"}}},
                    {"extra", 1}}
                   .dump(),
               "invalid_request", "unknown field 'extra'");
  // The custom_id read before the problem stays with the line.
  EXPECT_EQ(read_line(chat_line("keep", {{"messages", hi}, {"n", 3}})).id, "keep");
  EXPECT_TRUE(read_line("not json").id.is_null());
}

TEST(OpenAiRequest, FileWithProblemsIsReadWholeAndDuplicatesAreErrors) {
  const json hi = {{{"role", "user"}, {"content", "Hi"}}};
  const std::string file = chat_line("a", {{"messages", hi}}) + "\nnot json\n\n" +
                           chat_line("a", {{"messages", hi}}) + "\n" +
                           chat_line("b", {{"messages", hi}, {"n", 2}}) + "\n" +
                           chat_line("b", {{"messages", hi}}) + "\n";
  const PromptFile pf = parse_prompt_file("batch.jsonl", file);
  ASSERT_EQ(pf.prompts.size(), 5u);
  EXPECT_EQ(pf.prompts[0].error_code, "");
  EXPECT_EQ(pf.prompts[1].error_code, "invalid_json");
  EXPECT_EQ(pf.prompts[1].line, 2);
  EXPECT_EQ(pf.prompts[2].error_code, "duplicate_custom_id");
  EXPECT_NE(pf.prompts[2].error.find("line 4: custom_id \"a\" was already used on line 1"),
            std::string::npos)
      << pf.prompts[2].error;
  EXPECT_EQ(pf.prompts[3].error_code, "unsupported_parameter");
  // A custom_id is taken by its first line even when that line has an error.
  EXPECT_EQ(pf.prompts[4].error_code, "duplicate_custom_id");
}

}  // namespace
}  // namespace strata
