// OpenAI batch files through the driver on a deterministic FakeEngine:
// answers in input order in the OpenAI shape, chat requests rendered with the
// model's template, completions encoded as plain prompts, errors answered in
// place (bad lines, prompts longer than the context, a model without a
// supported template) while the others run, and a request's seed giving it
// its own random stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "generate/chat_template.h"
#include "generate/driver.h"
#include "generate/generate_test_util.h"

namespace strata {
namespace {

using nlohmann::json;
using test::FakeEngine;
using test::fixture_tokenizer;
using test::read_lines;
using test::ScratchDir;
using test::write_text;

std::string request(const std::string& id, const char* url, const json& body) {
  return json{{"custom_id", id}, {"method", "POST"}, {"url", url}, {"body", body}}.dump() + "\n";
}

std::string chat(const std::string& id, const std::string& user, json extra = json::object()) {
  extra["messages"] = {{{"role", "user"}, {"content", user}}};
  return request(id, "/v1/chat/completions", extra);
}

std::string completion(const std::string& id, const std::string& prompt,
                       json extra = json::object()) {
  extra["prompt"] = prompt;
  return request(id, "/v1/completions", extra);
}

struct Answered {
  std::vector<Job> jobs;
  std::vector<json> answers;
};

Answered run_batch(const std::string& content, GenerateOptions o = {}, int64_t block_size = 3,
                   const Tokenizer& tok = fixture_tokenizer()) {
  ScratchDir dir;
  write_text(dir.file("batch.jsonl"), content);
  const PromptFile pf = read_prompt_file(dir.file("batch.jsonl"));
  EXPECT_EQ(pf.format, PromptFormat::kOpenAi);
  o.response_model = "fixture";
  FakeEngine engine(tok.n_vocab(), block_size);
  Answered r;
  r.jobs = prepare_jobs(pf, tok, engine.config().n_ctx, o, "fixture");
  OutputFile out(dir.file("out.jsonl"),
                 {pf.path, pf.content_hash, settings_hash(o, "fixture", "f32"), r.jobs.size()});
  run_jobs(engine, tok, r.jobs, o, &out);
  for (const std::string& l : read_lines(dir.file("out.jsonl")))
    r.answers.push_back(json::parse(l));
  return r;
}

std::vector<std::string> keys(const json& j) {
  std::vector<std::string> out;
  for (const auto& [k, v] : j.items()) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(OpenAiDriver, AnswersInInputOrderInTheOpenAiShape) {
  GenerateOptions o;
  o.max_new_tokens = 6;
  const Answered r =
      run_batch(chat("c1", "Hi there") + "\n" + completion("p1", "Once upon a time") +
                    chat("c2", "Bye", {{"max_tokens", 2}}),
                o);
  ASSERT_EQ(r.answers.size(), 3u);
  const Tokenizer& tok = fixture_tokenizer();
  const ChatTemplate ct = ChatTemplate::for_model(tok, "fixture");
  EXPECT_EQ(r.jobs[0].tokens,
            tok.encode(ct.render(std::vector<ChatMessage>{{"user", "Hi there"}}), false));
  EXPECT_EQ(r.jobs[1].tokens, tok.encode("Once upon a time", tok.add_bos_default()));
  const char* ids[] = {"c1", "p1", "c2"};
  for (size_t i = 0; i < 3; ++i) {
    const json& a = r.answers[i];
    EXPECT_EQ(keys(a), (std::vector<std::string>{"custom_id", "error", "id", "response"}));
    EXPECT_EQ(a["custom_id"], ids[i]);
    EXPECT_TRUE(a["error"].is_null());
    EXPECT_EQ(a["id"].get<std::string>().rfind("batch_req_", 0), 0u);
    const json& resp = a["response"];
    EXPECT_EQ(resp["status_code"], 200);
    EXPECT_EQ(resp["request_id"].get<std::string>().rfind("req_", 0), 0u);
    const json& body = resp["body"];
    const bool is_chat = i != 1;
    EXPECT_EQ(body["object"], is_chat ? "chat.completion" : "text_completion");
    EXPECT_EQ(body["id"].get<std::string>().rfind(is_chat ? "chatcmpl-" : "cmpl-", 0), 0u);
    EXPECT_EQ(body["model"], "fixture");
    EXPECT_TRUE(body["created"].is_number_integer());
    ASSERT_EQ(body["choices"].size(), 1u);
    const json& choice = body["choices"][0];
    EXPECT_EQ(choice["index"], 0);
    EXPECT_TRUE(choice["logprobs"].is_null());
    // Greedy on the fake engine: (last + 1) mod n_vocab each step.
    const int n = i == 2 ? 2 : 6;
    std::vector<int32_t> want;
    int32_t last = r.jobs[i].tokens.back();
    for (int k = 0; k < n; ++k) {
      want.push_back(last = static_cast<int32_t>((last + 1) % tok.n_vocab()));
    }
    const std::string text = tok.decode(want, true);
    if (is_chat) {
      EXPECT_EQ(choice["message"], (json{{"role", "assistant"}, {"content", text}}));
    } else {
      EXPECT_EQ(choice["text"], text);
    }
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_EQ(body["usage"], (json{{"prompt_tokens", r.jobs[i].tokens.size()},
                                   {"completion_tokens", n},
                                   {"total_tokens", r.jobs[i].tokens.size() + n}}));
  }
  // Different requests, different ids.
  EXPECT_NE(r.answers[0]["id"], r.answers[2]["id"]);
}

TEST(OpenAiDriver, ErrorsAreAnsweredInPlaceAndTheOthersRun) {
  std::string too_long;
  for (int i = 0; i < 600; ++i) too_long += "word ";
  const Answered r = run_batch(chat("ok1", "Hi") + "{broken\n" + chat("n2", "Hi", {{"n", 2}}) +
                               completion("long", too_long) + completion("ok2", "Hello"));
  ASSERT_EQ(r.answers.size(), 5u);
  const std::vector<std::pair<json, std::string>> want = {{"ok1", ""},
                                                          {nullptr, "invalid_json"},
                                                          {"n2", "unsupported_parameter"},
                                                          {"long", "context_length_exceeded"},
                                                          {"ok2", ""}};
  for (size_t i = 0; i < want.size(); ++i) {
    const json& a = r.answers[i];
    EXPECT_EQ(a["custom_id"], want[i].first) << i;
    if (want[i].second.empty()) {
      EXPECT_TRUE(a["error"].is_null()) << a;
      EXPECT_EQ(a["response"]["status_code"], 200);
    } else {
      EXPECT_TRUE(a["response"].is_null()) << a;
      EXPECT_EQ(a["error"]["code"], want[i].second) << a;
      const std::string msg = a["error"]["message"];
      EXPECT_EQ(msg.rfind("line " + std::to_string(i + 1) + ": ", 0), 0u) << msg;
    }
  }
}

// The fixture's tokenizer files with `chat_template` as its template.
std::unique_ptr<Tokenizer> tokenizer_with_template(const ScratchDir& model,
                                                   const std::string& chat_template) {
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    std::filesystem::copy_file(test::test_data(std::string("models/llama/") + f), model.file(f));
  }
  write_text(model.file("chat_template.jinja"), chat_template);
  return Tokenizer::from_path(model.path());
}

TEST(OpenAiDriver, ChatRequestsTheTemplateCannotRenderAreErrors) {
  // A template that raises for system messages (as Gemma's does) answers
  // those requests with its error; the others run.
  ScratchDir model;
  const auto tok = tokenizer_with_template(
      model,
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>");
  const std::string with_system =
      request("s", "/v1/chat/completions",
              {{"messages",
                {{{"role", "system"}, {"content", "x"}}, {{"role", "user"}, {"content", "Hi"}}}}});
  const Answered r =
      run_batch(with_system + chat("c", "Hi") + completion("p", "Hello"), {}, 3, *tok);
  ASSERT_EQ(r.answers.size(), 3u);
  EXPECT_EQ(r.answers[0]["error"]["code"], "chat_template_error") << r.answers[0];
  EXPECT_NE(r.answers[0]["error"]["message"].get<std::string>().find("System role not supported"),
            std::string::npos);
  EXPECT_EQ(r.answers[1]["response"]["status_code"], 200) << r.answers[1];
  EXPECT_EQ(r.jobs[1].tokens, tok->encode("<user>Hi<assistant>", false));
  EXPECT_EQ(r.answers[2]["response"]["status_code"], 200) << r.answers[2];

  // A template that does not parse: every chat request gets the error.
  ScratchDir broken;
  const auto tok2 = tokenizer_with_template(broken, "{% if %}");
  const Answered b = run_batch(chat("c", "Hi") + completion("p", "Hello"), {}, 3, *tok2);
  EXPECT_EQ(b.answers[0]["error"]["code"], "chat_template_error") << b.answers[0];
  EXPECT_NE(b.answers[0]["error"]["message"].get<std::string>().find("template line 1"),
            std::string::npos);
  EXPECT_EQ(b.answers[1]["response"]["status_code"], 200) << b.answers[1];

  // --chat (and --system) do not apply to an OpenAI file: refused outright.
  GenerateOptions o;
  o.chat = true;
  const PromptFile pf = parse_prompt_file("batch.jsonl", chat("a", "Hi"));
  try {
    prepare_jobs(pf, fixture_tokenizer(), 512, o, "fixture");
    FAIL() << "--chat with an OpenAI file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("drop --chat"), std::string::npos) << e.what();
  }
}

TEST(OpenAiDriver, ARequestsSeedIsItsOwnStream) {
  // Temperature 1 on the fake engine's logits samples widely; the same
  // request with the same seed at two positions (and in different blocks)
  // gives the same completion, another seed another one.
  const json s7 = {{"temperature", 1.0}, {"seed", 7}, {"max_tokens", 12}};
  const json s8 = {{"temperature", 1.0}, {"seed", 8}, {"max_tokens", 12}};
  const Answered r = run_batch(completion("a", "Hello", s7) + completion("x", "Other words here") +
                                   completion("b", "Hello", s7) + completion("c", "Hello", s8),
                               {}, /*block_size=*/1);
  auto text = [&](size_t i) {
    return r.answers[i]["response"]["body"]["choices"][0]["text"].get<std::string>();
  };
  EXPECT_EQ(text(0), text(2));
  EXPECT_NE(text(0), text(3));
  // Without a seed the stream follows (--seed, position): a request's answer
  // at another position differs.
  const json t1 = {{"temperature", 1.0}, {"max_tokens", 12}};
  const Answered u = run_batch(completion("a", "Hello", t1) + completion("b", "Hello", t1));
  EXPECT_NE(u.answers[0]["response"]["body"]["choices"][0]["text"],
            u.answers[1]["response"]["body"]["choices"][0]["text"]);
}

}  // namespace
}  // namespace strata
