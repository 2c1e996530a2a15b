// End to end through the strata executable on the tiny Llama fixture
// (tests/data/models/llama): generate writes records in input order whose
// greedy tokens are the golden ones of tests/data/golden/llama.json (f32); bad
// prompt files and unwritable outputs end with exit 1 and one line naming
// the problem; bench and perplexity print what they promise.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "generate/generate_test_util.h"
#include "support/run_cli.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

using test::read_lines;
using test::read_text;
using test::run_strata;
using test::ScratchDir;
using test::test_data;
using test::write_text;

const std::string kLlama = test_data("models/llama");

// Greedy tokens agree with the golden ones up to the first step whose top-1
// / top-2 margin is below what f32 logits resolve (the forward differs from
// the reference only in summation order: ~1e-5 on logits of size ~2).
void expect_greedy_prefix(const std::vector<int32_t>& got, const nlohmann::json& golden) {
  const auto want = golden["greedy"].get<std::vector<int32_t>>();
  const auto margins = golden["greedy_margins"].get<std::vector<double>>();
  size_t n = 0;
  while (n < want.size() && margins[n] >= 1e-3) ++n;
  ASSERT_GE(got.size(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], want[i]) << "step " << i;
}

TEST(CliGenerate, RecordsInInputOrderWithGoldenGreedyTokens) {
  ScratchDir dir;
  const auto golden = nlohmann::json::parse(read_text(test_data("golden/llama.json")));
  // The golden prompts are the first n ids of a text (BOS first): their text
  // is the decoded ids, which must encode back to the same ids.
  const auto tok = Tokenizer::from_path(kLlama);
  std::string jsonl;
  const char* ids[] = {"short", "middle", "long"};
  for (size_t i = 0; i < 3; ++i) {
    const auto want = golden["prompts"][i]["ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(want.front(), tok->bos_id());
    const std::string text = tok->decode(std::span<const int32_t>(want).subspan(1), false);
    ASSERT_EQ(tok->encode(text, true), want) << text;
    nlohmann::json line = {{"prompt", text}, {"id", ids[i]}};
    jsonl += line.dump() + "\n";
  }
  write_text(dir.file("p.jsonl"), jsonl);
  const auto r =
      run_strata({"generate", "--model", kLlama, "--prompts", dir.file("p.jsonl"), "--output",
                  dir.file("out.jsonl"), "--max-new-tokens", "16", "--ids", "--batch-size", "2",
                  "--compute-dtype", "f32", "--report", dir.file("report.json")},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("strata report"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.jsonl.partial")));
  const auto lines = read_lines(dir.file("out.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto rec = nlohmann::json::parse(lines[i]);
    const auto& g = golden["prompts"][i];
    EXPECT_EQ(rec["id"], ids[i]);
    EXPECT_EQ(rec["prompt_tokens"], g["ids"].size());
    EXPECT_EQ(rec["completion_tokens"], 16);
    EXPECT_EQ(rec["finish_reason"], "length");
    EXPECT_TRUE(rec["completion"].is_string());
    expect_greedy_prefix(rec["completion_ids"].get<std::vector<int32_t>>(), g);
  }
  const auto report = nlohmann::json::parse(read_text(dir.file("report.json")));
  EXPECT_EQ(report["n_prompts"], 3);
  EXPECT_EQ(report["generated_tokens"], 48);
  EXPECT_EQ(report["prompt_tokens"], 5 + 11 + 23);
  for (const char* k : {"model", "prefill_s", "decode_s", "total_s", "total_tokens_per_s"}) {
    EXPECT_TRUE(report.contains(k)) << k;
  }
}

TEST(CliGenerate, BadPromptFileExitsOneWithOneLine) {
  ScratchDir dir;
  write_text(dir.file("bad.jsonl"),
             "{\"prompt\": \"fine\"}\n{\"prompt\": \"x\", \"max_new_tokens\": -3}\n");
  const auto r = run_strata({"generate", "--model", kLlama, "--prompts", dir.file("bad.jsonl"),
                             "--output", dir.file("out.jsonl")},
                            dir.path());
  EXPECT_EQ(r.exit_code, 1);
  const std::string err = r.err.substr(r.err.find("strata: error:"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("bad.jsonl:2"), std::string::npos) << err;
  EXPECT_NE(err.find("max_new_tokens"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.jsonl")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.jsonl.partial")));
}

TEST(CliGenerate, UnwritableOutputExitsOneBeforeCompute) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), "hello\n");
  const auto r = run_strata({"generate", "--model", kLlama, "--prompts", dir.file("p.txt"),
                             "--output", dir.file("missing/out.jsonl")},
                            dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
}

// --speculate ngram: the same records (greedy and seeded sampling), fewer
// passes over the weights; what it cannot be combined with is one line.
// Prompts sharing a preamble (and one twice the same) among others: with
// prefix sharing (the default) the records are those of a run without,
// greedy and sampled, in input order; the report counts the shared tokens.
TEST(CliGenerate, PrefixSharingWritesTheRecordsOfARunWithout) {
  ScratchDir dir;
  const std::string pre =
      "You are a careful assistant. Answer in one short sentence, and say so when you do not "
      "know. Question: ";
  write_text(dir.file("p.txt"), pre + "what is the sea?\nhello there\n" + pre +
                                    "why is the sky blue?\n" + pre + "what is the sea?\n" + pre +
                                    "who wrote this?\nthe cat sat on the mat\n");

  for (const char* temperature : {"0", "0.8"}) {
    std::vector<std::string> outputs;
    for (const bool share : {false, true}) {
      const std::string out =
          dir.file(std::string("out-") + (share ? "on" : "off") + temperature + ".jsonl");
      std::vector<std::string> args{"generate",
                                    "--model",
                                    kLlama,
                                    "--prompts",
                                    dir.file("p.txt"),
                                    "--output",
                                    out,
                                    "--max-new-tokens",
                                    "12",
                                    "--ids",
                                    "--batch-size",
                                    "2",
                                    "--num-gpu-batches",
                                    "3",
                                    "--compute-dtype",
                                    "f32",
                                    "--temperature",
                                    temperature,
                                    "--seed",
                                    "3",
                                    "--report",
                                    out + ".report"};
      if (!share) args.push_back("--no-prefix-sharing");
      const auto r = run_strata(args, dir.path());
      ASSERT_EQ(r.exit_code, 0) << r.err;
      outputs.push_back(read_text(out));
      const auto report = nlohmann::json::parse(read_text(out + ".report"));
      EXPECT_EQ(report["generated_tokens"], 6 * 12);
      const int64_t reused = report["prefix_reused_tokens"].get<int64_t>();
      if (share) {
        EXPECT_GT(reused, 0);
        EXPECT_EQ(report["prefill_tokens_computed"].get<int64_t>(),
                  report["prompt_tokens"].get<int64_t>() - reused);
        EXPECT_NE(r.out.find("shared prefixes"), std::string::npos) << r.out;
      } else {
        EXPECT_EQ(reused, 0);
      }
    }
    EXPECT_EQ(outputs[0], outputs[1]) << "temperature " << temperature;
  }
}

// Prompt lookup and a draft model (the model itself: greedy, it proposes
// the model's own tokens) change no record, greedy or sampled.
TEST(CliGenerate, SpeculationWritesTheRecordsOfARunWithout) {
  ScratchDir dir;
  write_text(dir.file("p.txt"),
             "one two three four one two three four one two three\n"
             "the cat sat on the mat and the cat sat on the\n"
             "a b c d e f g a b c d e f g a b c\n");
  // The flags of every run here, with --speculate SPEC.
  const auto speculation_args = [&](const std::string& out, const std::string& spec) {
    return std::vector<std::string>{"generate",
                                    "--model",
                                    kLlama,
                                    "--prompts",
                                    dir.file("p.txt"),
                                    "--output",
                                    out,
                                    "--max-new-tokens",
                                    "64",
                                    "--ids",
                                    "--batch-size",
                                    "3",
                                    "--compute-dtype",
                                    "f32",
                                    "--speculate",
                                    spec,
                                    "--report",
                                    out + ".report"};
  };
  for (const char* temperature : {"0", "0.8"}) {
    std::vector<std::string> outputs;
    for (const std::string spec : {"none", "ngram", "model"}) {
      const std::string out = dir.file("out-" + spec + temperature + ".jsonl");
      std::vector<std::string> args = speculation_args(out, spec);
      args.insert(args.end(),
                  {"--temperature", temperature, "--seed", "3", "--speculate-tokens", "5"});
      if (spec == "model") {
        args.push_back("--draft-model");
        args.push_back(kLlama);
      }
      const auto r = run_strata(args, dir.path());
      ASSERT_EQ(r.exit_code, 0) << r.err;
      outputs.push_back(read_text(out));
      const auto report = nlohmann::json::parse(read_text(out + ".report"));
      EXPECT_EQ(report["generated_tokens"], 3 * 64);
      const auto drafted = report["drafted_tokens"].get<int64_t>();
      const auto accepted = report["accepted_tokens"].get<int64_t>();
      // The tiny random model repeats itself a little when greedy.
      if (spec == "ngram" && std::string(temperature) == "0") {
        EXPECT_GT(drafted, 0);
        EXPECT_NE(r.out.find("speculation"), std::string::npos) << r.out;
      }
      if (spec == "model") {
        EXPECT_GT(drafted, 3 * 64 / 2) << "the draft model proposed little";
        if (std::string(temperature) == "0") {
          EXPECT_EQ(accepted, drafted) << "the model's own greedy tokens were rejected";
        } else {
          EXPECT_LT(accepted, drafted) << "sampled, yet every greedy draft was kept";
        }
        EXPECT_NE(r.err.find("draft model:"), std::string::npos) << r.err;
        EXPECT_GT(report["draft_s"].get<double>(), 0);
        EXPECT_GE(report["decode_s"].get<double>(), report["draft_s"].get<double>());
        EXPECT_NE(r.out.find("draft model"), std::string::npos) << r.out;
      }
    }
    EXPECT_EQ(outputs[0], outputs[1]) << "temperature " << temperature;
    EXPECT_EQ(outputs[0], outputs[2]) << "temperature " << temperature;
  }
  // With sparse attention (2 pages of the 64 + prompt tokens) too.
  std::vector<std::string> sparse_outputs;
  for (const std::string spec : {"none", "ngram"}) {
    const std::string out = dir.file("sparse-" + spec + ".jsonl");
    std::vector<std::string> args = speculation_args(out, spec);
    args.insert(args.end(), {"--sparse-budget", "32"});
    const auto r = run_strata(args, dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    sparse_outputs.push_back(read_text(out));
    const auto report = nlohmann::json::parse(read_text(out + ".report"));
    EXPECT_GT(report["kv_skipped_bytes"].get<int64_t>(), 0) << spec;
    if (spec == "ngram") {
      EXPECT_GT(report["drafted_tokens"].get<int64_t>(), 0);
    }
  }
  EXPECT_EQ(sparse_outputs[0], sparse_outputs[1]);
  const auto bad =
      run_strata({"generate", "--model", kLlama, "--prompts", dir.file("p.txt"), "--output",
                  dir.file("bad.jsonl"), "--speculate", "ngram", "--compress-kv", "q8"},
                 dir.path());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--speculate needs a KV cache of f32, f16 or bf16"), std::string::npos)
      << bad.err;
  const auto zero = run_strata({"bench", "--model", kLlama, "--prompt-len", "8", "--gen-len", "4",
                                "--batch", "2", "--speculate", "ngram", "--speculate-tokens", "0"},
                               dir.path());
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_NE(zero.err.find("--speculate-tokens 0"), std::string::npos) << zero.err;
}

// A draft model missing, unasked for, or with another tokenizer: one line,
// exit 1, no output.
TEST(CliGenerate, DraftModelMistakesAreRefused) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), "one two three\n");
  const std::string kOpt = test_data("models/opt");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--speculate", "model"}, "--speculate model needs --draft-model PATH"},
      {{"--speculate", "ngram", "--draft-model", kLlama}, "use it with --speculate model"},
      {{"--draft-model", kLlama}, "use it with --speculate model"},
      {{"--speculate", "model", "--draft-model", kOpt}, "--draft-model " + kOpt + ": "},
      {{"--speculate", "model", "--draft-model", dir.file("none")}, dir.file("none")},
  };
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> args = {"generate",         "--model",         kLlama,
                                     "--prompts",        dir.file("p.txt"), "--output",
                                     dir.file("o.jsonl")};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_strata(args, dir.path());
    EXPECT_EQ(r.exit_code, 1) << message;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("o.jsonl"))) << message;
    EXPECT_FALSE(std::filesystem::exists(dir.file("o.jsonl.partial"))) << message;
  }
}

TEST(CliBench, ExactlyGenLenTokensPerPrompt) {
  ScratchDir dir;
  const auto r = run_strata({"bench", "--model", kLlama, "--prompt-len", "8", "--gen-len", "4",
                             "--batch", "3", "--warmup", "0", "--repeats", "1", "--compute-dtype",
                             "f32", "--report", dir.file("bench.json")},
                            dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = nlohmann::json::parse(read_text(dir.file("bench.json")));
  EXPECT_EQ(report["generated_tokens"], 12);
  EXPECT_EQ(report["prompt_tokens"], 24);
  EXPECT_EQ(report["workload"]["gen_len"], 4);
}

TEST(CliPerplexity, PrintsPplAndScoredTokens) {
  ScratchDir dir;
  // The first 3000 bytes of the perplexity text keep the test quick.
  const std::string text = read_text(test_data("text/ppl.txt")).substr(0, 3000);
  write_text(dir.file("t.txt"), text);
  const auto tok = Tokenizer::from_path(kLlama);
  const long long n_ids = static_cast<long long>(tok->encode(text, false).size());
  const auto r = run_strata(
      {"perplexity", "--model", kLlama, "--text", dir.file("t.txt"), "--ctx", "64"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double ppl = 0;
  long long n_scored = 0, n_chunks = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str(), "ppl %lf\nn_scored %lld\nn_chunks %lld", &ppl, &n_scored,
                        &n_chunks),
            3)
      << r.out;
  EXPECT_EQ(n_chunks, n_ids / 64);
  EXPECT_EQ(n_scored, n_chunks * 63);
  EXPECT_TRUE(std::isfinite(ppl));
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, static_cast<double>(tok->n_vocab()) * 10);

  // Bad requests: one line, exit 1.
  const auto bad =
      run_strata({"perplexity", "--model", kLlama, "--text", dir.file("t.txt"), "--ctx", "100000"},
                 dir.path());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--ctx 100000"), std::string::npos) << bad.err;
  const auto missing =
      run_strata({"perplexity", "--model", kLlama, "--text", dir.file("none.txt")}, dir.path());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("none.txt"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace strata
