// The bad-input matrix: malformed files and flags across the CLI (missing
// files, directories for files, zero-byte and truncated models, an unknown
// dtype, a prompt longer than the context, invalid UTF-8, JSONL of the wrong
// types, negative, zero and huge numbers, budgets of 0). Every case must end
// with exactly one `strata: error:` line that names the file or the flag and
// the value, a non-zero exit status (1 for input, 2 for a malformed command
// line), and no output file: neither OUT nor OUT.partial.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::run_strata;

const std::string kData = STRATA_TEST_DATA;
const std::string kLlama = kData + "/models/llama";
const std::string kGguf = kData + "/models/llama-gguf/tiny-llama.gguf";

struct BadInput {
  const char* name;
  std::vector<std::string> args;  // "@" is replaced by the scratch directory
  std::vector<std::string> want;  // each in the error line ("@" likewise)
  int exit_code = 1;
};

void write(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

std::string slurp_prefix(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

// The files the cases point at, made once in a scratch directory.
class BadInputCli : public ::testing::TestWithParam<BadInput> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("strata-bad-input-" + std::to_string(::getpid())));
    const fs::path& d = *dir_;
    fs::remove_all(d);
    fs::create_directories(d / "emptydir");
    write(d / "p.txt", "hello world\nthe cat sat\n");
    write(d / "empty.txt", "\n\n  \n");
    write(d / "zero.gguf", "");
    write(d / "trunc.gguf", slurp_prefix(kGguf, 1000));
    write(d / "notgguf.gguf", "this is not a model at all\n");
    write(d / "badutf.txt", "caf\xC3 au lait\n");
    write(d / "badutf2.txt", "fine\nends in a cut \xE2\x82\n");
    write(d / "wrongtype.jsonl", "{\"prompt\": 5}\n");
    write(d / "wrongmax.jsonl", "{\"prompt\": \"x\", \"max_new_tokens\": \"7\"}\n");
    write(d / "negmax.jsonl", "{\"prompt\": \"x\", \"max_new_tokens\": -3}\n");
    write(d / "badjson.jsonl", "{\"prompt\": \"x\"\n");
    write(d / "array.jsonl", "[1, 2]\n");
    write(d / "stoptype.jsonl", "{\"prompt\": \"x\", \"stop\": [1]}\n");
    std::string long_prompt;
    for (int i = 0; i < 400; ++i) long_prompt += "the cat ";
    write(d / "long.txt", long_prompt + "\n");
    write(d / "bad.yaml", "gpu_batch_size: [1,\n");
    write(d / "policy-neg.yaml", "gpu_batch_size: -4\n");
    fs::create_directories(d / "noweights");
    fs::copy_file(kLlama + "/config.json", d / "noweights/config.json");
    fs::copy_file(kLlama + "/tokenizer.json", d / "noweights/tokenizer.json");
    fs::create_directories(d / "badconfig");
    write(d / "badconfig/config.json", "{\"model_type\": ");
    fs::create_directories(d / "truncst");
    for (const auto& e : fs::directory_iterator(kLlama))
      fs::copy_file(e.path(), d / "truncst" / e.path().filename());
    write(d / "truncst/model-00001-of-00002.safetensors",
          slurp_prefix(kLlama + "/model-00001-of-00002.safetensors", 50));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  static std::string sub(const std::string& s) {
    std::string out;
    for (char c : s) out += c == '@' ? dir_->string() : std::string(1, c);
    return out;
  }
  static fs::path* dir_;
};

fs::path* BadInputCli::dir_ = nullptr;

TEST_P(BadInputCli, OneErrorLineNonZeroExitNoOutput) {
  const BadInput& c = GetParam();
  const fs::path run_dir = *dir_ / c.name;
  fs::create_directories(run_dir);
  std::vector<std::string> args;
  for (const auto& a : c.args) args.push_back(sub(a));
  const auto r = run_strata(args, run_dir.string());
  EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
  std::vector<std::string> errors;
  size_t pos = 0;
  while ((pos = r.err.find("strata: error:", pos)) != std::string::npos) {
    const size_t end = r.err.find('\n', pos);
    errors.push_back(r.err.substr(pos, end - pos));
    pos = end;
  }
  ASSERT_EQ(errors.size(), 1u) << r.err;
  EXPECT_EQ(r.err.substr(r.err.find("strata: error:")).find('\n'), errors[0].size())
      << "the error is not one line:\n"
      << r.err;
  for (const auto& w : c.want)
    EXPECT_NE(errors[0].find(sub(w)), std::string::npos)
        << "'" << sub(w) << "' not in: " << errors[0];
  EXPECT_FALSE(fs::exists(*dir_ / "out.jsonl"));
  EXPECT_FALSE(fs::exists(*dir_ / "out.jsonl.partial"));
}

// generate with the fixture model, the scratch prompt file and output, and `extra`.
std::vector<std::string> gen(std::vector<std::string> extra, std::string prompts = "@/p.txt",
                             std::string model = kLlama) {
  std::vector<std::string> a = {"generate", "--model",  model,        "--prompts",
                                prompts,    "--output", "@/out.jsonl"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

const BadInput kCases[] = {
    // Models.
    {"ModelMissing", gen({}, "@/p.txt", "@/nosuch.gguf"), {"@/nosuch.gguf", "no such file"}},
    {"ModelDirWithoutConfig", gen({}, "@/p.txt", "@/emptydir"), {"@/emptydir", "config.json"}},
    {"ModelZeroBytes", gen({}, "@/p.txt", "@/zero.gguf"), {"@/zero.gguf", "truncated"}},
    {"ModelTruncatedGguf", gen({}, "@/p.txt", "@/trunc.gguf"), {"@/trunc.gguf", "past the end"}},
    {"ModelNotGguf", gen({}, "@/p.txt", "@/notgguf.gguf"), {"@/notgguf.gguf", "not a GGUF"}},
    {"ModelNoWeights", gen({}, "@/p.txt", "@/noweights"), {"@/noweights", "no weights"}},
    {"ModelConfigNotJson", gen({}, "@/p.txt", "@/badconfig"), {"@/badconfig/config.json", "JSON"}},
    {"ModelTruncatedSafetensors",
     gen({}, "@/p.txt", "@/truncst"),
     {"model-00001-of-00002.safetensors", "past the end"}},
    {"InspectTextFile", {"inspect", "--model", "@/p.txt"}, {"@/p.txt", "not a GGUF"}},
    // Prompt files.
    {"PromptsMissing", gen({}, "@/nosuch.txt"), {"@/nosuch.txt", "cannot open"}},
    {"PromptsDirectory", gen({}, "@/emptydir"), {"@/emptydir", "is a directory"}},
    {"PromptsEmpty", gen({}, "@/empty.txt"), {"@/empty.txt", "no prompts"}},
    {"PromptsInvalidUtf8", gen({}, "@/badutf.txt"), {"@/badutf.txt:1", "byte 4", "0xC3", "UTF-8"}},
    {"PromptsCutUtf8", gen({}, "@/badutf2.txt"), {"@/badutf2.txt:2", "0xE2 0x82", "UTF-8"}},
    {"PromptTooLong", gen({}, "@/long.txt"), {"@/long.txt:1", "512 tokens", "--skip-long"}},
    {"JsonlPromptNotString",
     gen({}, "@/wrongtype.jsonl"),
     {"@/wrongtype.jsonl:1", "'prompt'", "integer"}},
    {"JsonlMaxTokensString",
     gen({}, "@/wrongmax.jsonl"),
     {"@/wrongmax.jsonl:1", "'max_new_tokens'", "string"}},
    {"JsonlMaxTokensNegative",
     gen({}, "@/negmax.jsonl"),
     {"@/negmax.jsonl:1", "'max_new_tokens'", "-3"}},
    {"JsonlNotJson", gen({}, "@/badjson.jsonl"), {"@/badjson.jsonl:1", "not valid JSON"}},
    {"JsonlArray", gen({}, "@/array.jsonl"), {"@/array.jsonl:1", "array"}},
    {"JsonlStopNotString", gen({}, "@/stoptype.jsonl"), {"@/stoptype.jsonl:1", "'stop'"}},
    // Flags: numbers.
    {"MaxNewTokensNegative", gen({"--max-new-tokens", "-1"}), {"--max-new-tokens", "-1"}},
    {"BatchSizeZero", gen({"--batch-size", "0"}), {"--batch-size", "0"}},
    {"BatchSizeHuge", gen({"--batch-size", "99999999999"}), {"--batch-size", "99999999999"}},
    {"BatchSizeNotANumber", gen({"--batch-size", "lots"}), {"--batch-size", "lots"}, 2},
    {"BatchSizeTwice",
     gen({"--batch-size", "2", "--gpu-batch-size", "4"}),
     {"--batch-size 2", "--gpu-batch-size 4"}},
    {"NumGpuBatchesZero", gen({"--num-gpu-batches", "0"}), {"num_gpu_batches", "0"}},
    {"TopPTooLarge", gen({"--top-p", "2"}), {"--top-p", "2"}},
    {"TopKNegative", gen({"--top-k", "-3"}), {"--top-k", "-3"}},
    {"TemperatureNegative", gen({"--temperature", "-1"}), {"--temperature", "-1"}},
    {"RepetitionPenaltyZero", gen({"--repetition-penalty", "0"}), {"--repetition-penalty", "0"}},
    {"ThreadsNegative", gen({"--threads", "-2"}), {"thread count", "-2"}},
    {"StopEmpty", gen({"--stop", ""}), {"--stop", "\"\""}},
    // Flags: budgets, placement, dtypes.
    {"CpuMemZero", gen({"--cpu-mem", "0"}), {"--cpu-mem", "0"}},
    {"CpuMemNegative", gen({"--cpu-mem", "-5G"}), {"--cpu-mem", "-5G"}},
    {"CpuMemUnknownUnit", gen({"--cpu-mem", "12Q"}), {"--cpu-mem", "12Q"}},
    {"GpuMemUnknownUnit", gen({"--gpu-mem", "5X"}), {"--gpu-mem", "5X"}},
    {"DiskMemZero",
     gen({"--disk-mem", "0", "--percent", "0", "0", "100", "0", "100", "0"}),
     {"--disk-mem", "0"}},
    {"CpuMemBelowTheWeights", gen({"--cpu-mem", "1K"}), {"RAM budget", "1.00K"}},
    {"PercentNegative", gen({"--percent", "-10", "0", "0", "0", "0", "0"}), {"--percent", "-10"}},
    {"PercentOver100", gen({"--percent", "60", "60", "50", "50", "50", "50"}), {"--percent", "60"}},
    {"PercentTooFew", gen({"--percent", "10", "0", "0", "0", "0"}), {"--percent", "6", "5"}, 2},
    {"ComputeDtypeUnknown", gen({"--compute-dtype", "f64"}), {"--compute-dtype", "f64"}, 2},
    {"CompressKvUnknown", gen({"--compress-kv", "q3"}), {"--compress-kv", "q3"}},
    {"KvGroupUnknown", gen({"--compress-kv", "q4", "--kv-group", "48"}), {"--kv-group", "48"}},
    {"SparseBudgetBelowAPage", gen({"--sparse-budget", "8"}), {"--sparse-budget 8", "page"}},
    {"SparseBudgetNegative", gen({"--sparse-budget", "-1"}), {"--sparse-budget -1"}},
    {"SparseBudgetOnCuda",
     gen({"--sparse-budget", "64", "--device", "cuda"}),
     {"--sparse-budget 64", "CPU only"}},
    {"DeviceUnknown", gen({"--device", "tpu"}), {"tpu"}},
    {"OffloadDirIsAFile",
     gen({"--offload-dir", "@/p.txt", "--percent", "0", "0", "100", "0", "100", "0"}),
     {"@/p.txt"}},
    {"OutputIsADirectory",
     {"generate", "--model", kLlama, "--prompts", "@/p.txt", "--output", "@/emptydir"},
     {"@/emptydir", "is a directory"}},
    {"OutputDirMissing",
     {"generate", "--model", kLlama, "--prompts", "@/p.txt", "--output", "@/nosuch/out.jsonl"},
     {"@/nosuch/out.jsonl", "does not exist"}},
    {"PolicyMissing", gen({"--policy", "@/nosuch.yaml"}), {"@/nosuch.yaml"}},
    {"PolicyNotYaml", gen({"--policy", "@/bad.yaml"}), {"@/bad.yaml", "YAML"}},
    {"PolicyNegativeBatch", gen({"--policy", "@/policy-neg.yaml"}), {"policy-neg.yaml", "-4"}},
    {"HardwareUnknown",
     gen({"--policy", "auto", "--hardware", "nosuch"}),
     {"--hardware", "nosuch"}},
    {"UnknownFlag", gen({"--frobnicate"}), {"--frobnicate"}, 2},
    // Other subcommands.
    {"BenchPromptLenZero",
     {"bench", "--model", kLlama, "--prompt-len", "0", "--gen-len", "4", "--batch", "1"},
     {"--prompt-len", "0"}},
    {"BenchPastTheContext",
     {"bench", "--model", kLlama, "--prompt-len", "99999", "--gen-len", "4", "--batch", "1"},
     {"--prompt-len", "99999", "512"}},
    {"PerplexityTextMissing",
     {"perplexity", "--model", kLlama, "--text", "@/nosuch.txt"},
     {"@/nosuch.txt"}},
    {"PerplexitySparseWithoutDecode",
     {"perplexity", "--model", kLlama, "--text", "@/p.txt", "--sparse-budget", "64"},
     {"--sparse-budget 64", "--decode-from"}},
    {"PerplexityDecodeFromPastTheChunk",
     {"perplexity", "--model", kLlama, "--text", "@/p.txt", "--ctx", "16", "--decode-from", "16"},
     {"--decode-from 16", "15"}},
    {"PerplexityCtxZero",
     {"perplexity", "--model", kLlama, "--text", "@/p.txt", "--ctx", "0"},
     {"--ctx", "0"}},
    {"PolicyPromptLenNegative",
     {"policy", "--model", kLlama, "--hardware", "t4-flexgen", "--prompt-len", "-1", "--gen-len",
      "3"},
     {"--prompt-len", "-1"}},
    {"ConvertIntoAFile", {"convert", "--model", kLlama, "--out", "@/p.txt"}, {"@/p.txt"}},
};

INSTANTIATE_TEST_SUITE_P(Matrix, BadInputCli, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(BadInputCli, MatrixHasAtLeastThirtyCases) {
  EXPECT_GE(std::size(kCases), 30u);
}

}  // namespace
}  // namespace strata
