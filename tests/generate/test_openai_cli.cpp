// An OpenAI batch file end to end through the strata executable on the tiny
// Llama fixture: 100 requests (chat and completions, with stop strings,
// seeds and sampling, and 11 lines with problems) are answered line by line
// in input order, every line valid against the output schema
// (tests/data/openai/batch_output.schema.json, checked by support/json_schema.h)
// and exit status 0; killed with SIGKILL three times and resumed, the run
// gives the same answers (all but "created", the time of the answer).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/files.h"
#include "support/json_schema.h"
#include "support/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::finish_strata;
using test::read_lines;
using test::read_text;
using test::run_strata;
using test::ScratchDir;
using test::start_strata;
using test::test_data;
using test::write_text;

const std::string kLlama = test_data("models/llama");

std::string line(const std::string& id, const char* url, const json& body) {
  return json{{"custom_id", id}, {"method", "POST"}, {"url", url}, {"body", body}}.dump();
}

// Request i of the file, and the error code it must be answered with ("" for
// an answer). Every tenth line, and one too long, have a problem.
std::pair<std::string, std::string> request(int i) {
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "once", "upon", "time", "dog"};
  std::mt19937 rng(static_cast<unsigned>(i));
  std::string text;
  for (int w = 0, n = 2 + static_cast<int>(rng() % 12); w < n; ++w) {
    text += std::string(w ? " " : "") + words[rng() % 10];
  }
  const std::string id = "req-" + std::to_string(i);
  json body;
  if (i % 5 == 1) body["max_tokens"] = 3 + i % 4;
  if (i % 7 == 2) body["stop"] = json::array({" the", "mat"});
  if (i % 6 == 3) {
    body["temperature"] = 0.8;
    body["seed"] = i;
  }
  switch (i % 10 == 9 ? i / 10 : -1) {
    case 0:
      return {"{\"custom_id\": \"" + id + "\", \"method\": \"POST\"", "invalid_json"};
    case 1:
      body["messages"] = {{{"role", "user"}, {"content", text}}};
      body["n"] = 2;
      return {line(id, "/v1/chat/completions", body), "unsupported_parameter"};
    case 2:
      body["input"] = text;
      return {line(id, "/v1/embeddings", body), "invalid_url"};
    case 3:
      return {line(id, "/v1/chat/completions", body), "invalid_request"};  // no messages
    case 4:
      body["prompt"] = text;
      return {line("req-4", "/v1/completions", body), "duplicate_custom_id"};
    case 5:
      body["prompt"] = text;
      body["temperature"] = 3;
      return {line(id, "/v1/completions", body), "invalid_request"};
    case 6:
      body["prompt"] = text;
      body["logprobs"] = 5;
      return {line(id, "/v1/completions", body), "unsupported_parameter"};
    case 7:
      body["messages"] = {{{"role", "user"}, {"content", text}}};
      body["tools"] = json::array({{{"type", "function"}}});
      return {line(id, "/v1/chat/completions", body), "unsupported_parameter"};
    case 8:
      return {"[\"" + id + "\"]", "invalid_json"};
    case 9:
      body["prompt"] = text;
      return {json{{"custom_id", i}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", body}}
                  .dump(),
              "invalid_request"};
    default:
      break;
  }
  if (i == 44) {
    std::string long_prompt;
    for (int w = 0; w < 400; ++w) long_prompt += "the cat sat ";
    body["prompt"] = long_prompt;
    return {line(id, "/v1/completions", body), "context_length_exceeded"};
  }
  if (i == 55) return {"", ""};  // a blank line: skipped, no answer
  if (i % 2 == 0) {
    json messages = json::array();
    if (i % 4 == 0) messages.push_back({{"role", "system"}, {"content", "Be brief."}});
    if (i % 8 == 0) {
      messages.push_back({{"role", "user"}, {"content", "Hello"}});
      messages.push_back({{"role", "assistant"}, {"content", "Hi."}});
    }
    messages.push_back({{"role", "user"}, {"content", text}});
    body["messages"] = messages;
    return {line(id, "/v1/chat/completions", body), ""};
  }
  body["prompt"] = text;
  return {line(id, "/v1/completions", body), ""};
}

std::vector<std::string> generate_args(const ScratchDir& dir) {
  return {"generate",
          "--model",
          kLlama,
          "--prompts",
          dir.file("batch.jsonl"),
          "--output",
          dir.file("out.jsonl"),
          "--max-new-tokens",
          "6",
          "--batch-size",
          "8",
          "--compute-dtype",
          "f32"};
}

// The answers without "created" (the only field that differs between runs).
std::vector<json> without_created(const std::string& path) {
  std::vector<json> out;
  for (const std::string& l : read_lines(path)) {
    json j = json::parse(l);
    if (j["response"].is_object()) j["response"]["body"].erase("created");
    out.push_back(j);
  }
  return out;
}

class OpenAiBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 101; ++i) {
      const auto [text, code] = request(i);
      content_ += text + "\n";
      if (i != 55) codes_.push_back(code);
    }
    write_text(ref_.file("batch.jsonl"), content_);
    const auto start = std::chrono::steady_clock::now();
    const auto r = run_strata(generate_args(ref_), ref_.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    err_ = r.err;
    run_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  std::string content_;
  std::vector<std::string> codes_;  // per answer line
  ScratchDir ref_;
  std::string err_;
  double run_ms_ = 0;
};

TEST_F(OpenAiBatch, HundredRequestsAnsweredInOrderAndValidAgainstTheSchema) {
  ASSERT_EQ(codes_.size(), 100u);
  const test::JsonSchema schema(
      json::parse(read_text(test_data("openai/batch_output.schema.json"))));
  const auto lines = read_lines(ref_.file("out.jsonl"));
  ASSERT_EQ(lines.size(), 100u);
  int answered = 0;
  for (size_t k = 0; k < lines.size(); ++k) {
    const json a = json::parse(lines[k]);
    const auto problems = schema.validate(a);
    EXPECT_TRUE(problems.empty()) << "line " << k + 1 << ": " << problems.front() << "\n" << a;
    const int i = static_cast<int>(k < 55 ? k : k + 1);  // request index (line 56 is blank)
    if (codes_[k].empty()) {
      ++answered;
      EXPECT_EQ(a["custom_id"], "req-" + std::to_string(i));
      EXPECT_EQ(a["response"]["body"]["object"],
                i % 2 == 0 ? "chat.completion" : "text_completion");
      const int max_tokens = i % 5 == 1 ? 3 + i % 4 : 6;
      EXPECT_LE(a["response"]["body"]["usage"]["completion_tokens"].get<int>(), max_tokens);
    } else {
      EXPECT_EQ(a["error"]["code"], codes_[k]) << a;
      EXPECT_NE(
          a["error"]["message"].get<std::string>().find("line " + std::to_string(i + 1) + ":"),
          std::string::npos)
          << a;
    }
  }
  EXPECT_EQ(answered, 89);
  EXPECT_NE(err_.find("11 of 100 requests are answered with an error"), std::string::npos) << err_;

  // The schema is not vacuous: a wrong line fails it.
  json bad = json::parse(lines[0]);
  bad["response"]["body"].erase("usage");
  EXPECT_FALSE(schema.validate(bad).empty());
  bad = json::parse(lines[0]);
  bad["error"] = {{"code", "x"}, {"message", "y"}};
  EXPECT_FALSE(schema.validate(bad).empty());
}

TEST_F(OpenAiBatch, KilledThreeTimesAndResumedGivesTheSameAnswers) {
  ScratchDir dir;
  write_text(dir.file("batch.jsonl"), content_);
  std::mt19937 rng(3);
  int kills = 0, kills_after_records = 0, resumed_with_records = 0;
  double scale = 1.0;  // of the reference run's time, which a busy machine can inflate
  // Three kills, at least one of them after records were written (loading the
  // model can take most of a short run: a kill before any record is kept, and
  // the next one comes later).
  for (int t = 0; (kills < 3 || kills_after_records == 0) && t < 30; ++t) {
    const double delay_ms = std::uniform_real_distribution<double>(0.2, 0.8)(rng) * run_ms_ * scale;
    const pid_t pid = start_strata(generate_args(dir), dir.path());
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
    ::kill(pid, SIGKILL);
    const auto r = finish_strata(pid, dir.path());
    if (r.err.find("resuming,") != std::string::npos) ++resumed_with_records;
    if (fs::exists(dir.file("out.jsonl"))) {
      // Finished before the kill: start over, killing sooner.
      fs::remove(dir.file("out.jsonl"));
      scale *= 0.5;
      continue;
    }
    ++kills;
    // Records count once a line after the file's header line is complete: a
    // kill before or in the middle of the first leaves nothing to resume.
    const fs::path partial = dir.file("out.jsonl.partial");
    if (fs::exists(partial) && std::ranges::count(read_text(partial), '\n') >= 2) {
      ++kills_after_records;
    } else {
      scale = std::min(scale * 1.5, 1.2);  // killed while loading: later next time
    }
  }
  const auto r = run_strata(generate_args(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(kills, 1) << "no run was killed before it finished";
  EXPECT_TRUE(resumed_with_records > 0 || r.err.find("resuming,") != std::string::npos)
      << "no run resumed records of a killed one";
  EXPECT_EQ(without_created(dir.file("out.jsonl")), without_created(ref_.file("out.jsonl")));
  EXPECT_FALSE(fs::exists(dir.file("out.jsonl.partial")));
}

}  // namespace
}  // namespace strata
