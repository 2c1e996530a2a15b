// `strata policy` end to end: --json prints one object with the documented
// names and the same numbers as the library, the evaluate path (--percent,
// --policy) agrees with the library's evaluation, -o writes a policy that
// loads back, and bad input ends in one line on stderr and exit code 1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "policy/cost_model.h"
#include "policy/search.h"
#include "support/run_cli.h"

namespace strata {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("strata_test_cli_policy_" + std::to_string(::getpid()) + "_" + name);
}

CliRun run_strata(const std::string& args) {
  const test::CliResult r = test::run_strata_line(args);
  return {r.exit_code, r.out, r.err};
}

// Predictions are printed by nlohmann with full double precision.
void expect_prediction(const nlohmann::json& j, const Prediction& p) {
  EXPECT_DOUBLE_EQ(j["predicted"]["prefill_tokens_per_s"].get<double>(), p.prefill_tokens_per_s);
  EXPECT_DOUBLE_EQ(j["predicted"]["decode_tokens_per_s"].get<double>(), p.decode_tokens_per_s);
  EXPECT_DOUBLE_EQ(j["predicted"]["total_tokens_per_s"].get<double>(), p.total_tokens_per_s);
  for (const char* tier : {"gpu", "cpu", "disk"}) {
    const TierUse& u = p.memory[tier[0] == 'g' ? 0 : (tier[0] == 'c' ? 1 : 2)];
    EXPECT_DOUBLE_EQ(j["memory"][tier]["peak"].get<double>(), u.peak) << tier;
    EXPECT_DOUBLE_EQ(j["memory"][tier]["budget"].get<double>(), u.budget) << tier;
  }
}

TEST(CliPolicy, JsonSearchParsesAndMatchesTheLibrary) {
  const CliRun r = run_strata(
      "policy --model opt-30b --hardware t4 --prompt-len 512 --gen-len 32 "
      "--max-block 512 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // one object, nothing else
  for (const char* key :
       {"policy", "predicted", "memory", "bound", "model", "hardware", "workload"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["model"], "opt-30b");
  EXPECT_EQ(j["hardware"], "t4-flexgen");
  EXPECT_EQ(j["mode"], "search");
  EXPECT_TRUE(j["fits"].get<bool>());
  const nlohmann::json& pol = j["policy"];
  for (const char* kind : {"weights", "kv_cache", "activations"}) {
    const double sum = pol[kind]["gpu"].get<double>() + pol[kind]["cpu"].get<double>() +
                       pol[kind]["disk"].get<double>();
    EXPECT_NEAR(sum, 1.0, 1e-12) << kind;
  }
  EXPECT_TRUE(j["bound"]["term"].is_string());

  const HardwareProfile hw = find_hardware_profile("t4");
  SearchOptions o;
  o.max_block_size = 512;
  const SearchResult lib =
      search_policy(find_model_preset("opt-30b"), hw, {512, 32}, budgets_of(hw), o);
  EXPECT_EQ(pol["gpu_batch_size"].get<int64_t>(), lib.policy.gpu_batch_size);
  EXPECT_EQ(pol["num_gpu_batches"].get<int64_t>(), lib.policy.num_gpu_batches);
  EXPECT_DOUBLE_EQ(pol["weights"]["gpu"].get<double>(), lib.policy.placement[Share::kWGpu]);
  expect_prediction(j, lib.prediction);
}

TEST(CliPolicy, PercentFlagsEvaluateTheFixedPolicy) {
  const CliRun r = run_strata(
      "policy --model opt-30b --hardware t4 --percent 20 80 0 100 0 100 "
      "--gpu-batch-size 48 --num-gpu-batches 3 --cpu-attention --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["mode"], "evaluate");
  const Policy p = load_policy(std::string(STRATA_POLICIES_DIR) + "/flexgen-opt-30b-t4.yaml");
  const HardwareProfile hw = find_hardware_profile("t4");
  const Prediction lib = predict(find_model_preset("opt-30b"), hw, {512, 32}, p, budgets_of(hw));
  expect_prediction(j, lib);
  // Over budget in our memory model: said on stderr in one line, exit 0.
  if (!lib.fits) {
    EXPECT_FALSE(j["fits"].get<bool>());
    EXPECT_NE(r.err.find("warning: this policy does not fit: needs"), std::string::npos) << r.err;
  }

  // The same policy from its YAML file.
  const CliRun f = run_strata("policy --model opt-30b --hardware t4 --json --policy " +
                              std::string(STRATA_POLICIES_DIR) + "/flexgen-opt-30b-t4.yaml");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  expect_prediction(nlohmann::json::parse(f.out), lib);
}

// --shared-prefix: every sequence's prompt begins with the same tokens,
// computed once per block (whole pages: 500 of 512 shares 496, each
// prompt's last token computed by its prefill); the evaluation is the
// library's with that workload, and the search plans with it too.
TEST(CliPolicy, SharedPrefixIsPricedAsComputedOncePerBlock) {
  const std::string given =
      "policy --model opt-30b --hardware t4 --percent 20 80 0 100 0 100 "
      "--gpu-batch-size 48 --num-gpu-batches 3 --cpu-attention --json";
  const CliRun r = run_strata(given + " --shared-prefix 500");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["workload"]["shared_tokens"].get<double>(), 496);
  // Its KV stored once: all but one of the block's 144 sequences take it.
  EXPECT_EQ(j["workload"]["kv_shared_seqs"].get<int64_t>(), 143);
  EXPECT_EQ(j["workload"]["kv_shared_tokens"].get<int64_t>(), 496);
  const Policy p = load_policy(std::string(STRATA_POLICIES_DIR) + "/flexgen-opt-30b-t4.yaml");
  const HardwareProfile hw = find_hardware_profile("t4");
  Workload w{512, 32};
  w.shared_tokens = 496;
  w.prefix_step_tokens = 496;
  w.prefix_steps = 1;
  w.kv_shared_seqs = 143;
  w.kv_shared_tokens = 496;
  const Prediction shared = predict(find_model_preset("opt-30b"), hw, w, p, budgets_of(hw));
  expect_prediction(j, shared);
  // The KV cache (all in RAM here) holds 143 x 496 tokens fewer.
  w.kv_shared_seqs = 0;
  const Prediction stored = predict(find_model_preset("opt-30b"), hw, w, p, budgets_of(hw));
  const ModelShape opt = find_model_preset("opt-30b");
  EXPECT_NEAR(stored.memory[1].kv_cache - shared.memory[1].kv_cache,
              143.0 * 496 * 2 * static_cast<double>(opt.kv_dim()) * 2 * opt.n_layer,
              1e-9 * stored.memory[1].kv_cache);
  const CliRun none = run_strata(given);
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_GT(j["predicted"]["prefill_tokens_per_s"].get<double>(),
            nlohmann::json::parse(none.out)["predicted"]["prefill_tokens_per_s"].get<double>());

  const CliRun searched = run_strata(
      "policy --model opt-1.3b --hardware t4 --max-block 256 --shared-prefix 384 --json");
  ASSERT_EQ(searched.exit_code, 0) << searched.err;
  const nlohmann::json s = nlohmann::json::parse(searched.out);
  EXPECT_EQ(s["mode"], "search");
  EXPECT_EQ(s["workload"]["shared_tokens"].get<double>(),
            s["policy"]["gpu_batch_size"].get<int64_t>() *
                        s["policy"]["num_gpu_batches"].get<int64_t>() >=
                    2
                ? 384
                : 0);
}

TEST(CliPolicy, OutputFileLoadsBack) {
  const auto path = temp_path("out.yaml");
  const CliRun r = run_strata(
      "policy --model llama-3-8b --hardware t4 --gpu-mem 12G --cpu-mem 64G "
      "--compress-weight q4 --max-block 256 --json -o " +
      path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["memory"]["gpu"]["budget"].get<double>(), 12.0 * 1073741824);
  EXPECT_DOUBLE_EQ(j["memory"]["cpu"]["budget"].get<double>(), 64.0 * 1073741824);
  const Policy p = load_policy(path.string());
  EXPECT_EQ(p.gpu_batch_size, j["policy"]["gpu_batch_size"].get<int64_t>());
  EXPECT_EQ(p.placement[Share::kWGpu], j["policy"]["weights"]["gpu"].get<double>());
  EXPECT_EQ(p.compress_weight.bits, 4);
  EXPECT_NE(read_file(path).find("# Strata policy for llama-3-8b on t4-flexgen"),
            std::string::npos);
  // Evaluating the written file reproduces the prediction.
  const CliRun e = run_strata(
      "policy --model llama-3-8b --hardware t4 --gpu-mem 12G --cpu-mem 64G --json "
      "--policy " +
      path.string());
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(e.out)["predicted"]["total_tokens_per_s"].get<double>(),
                   j["predicted"]["total_tokens_per_s"].get<double>());
  std::filesystem::remove(path);
}

TEST(CliPolicy, TextOutputShowsPlacementAndBound) {
  const CliRun r = run_strata("policy --model opt-6.7b --hardware t4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part :
       {"placement", "weights", "KV cache", "memory (peak)", "predicted", "bound"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part;
  }
}

TEST(CliPolicy, BadInputIsOneLineAndExitCodeOne) {
  struct Case {
    const char* args;
    const char* expect;
  };
  const Case cases[] = {
      {"policy --model gpt-9 --hardware t4", "is not a model preset"},
      {"policy --model opt-30b --hardware t4 --gpu-mem lots", "--gpu-mem: 'lots' is not a size"},
      {"policy --model opt-30b --hardware t4 --percent 90 20 0 100 0 100", "is more than 100"},
      {"policy --model opt-30b --hardware t4 --compress-kv q3", "'q3' is not a compression"},
      {"policy --model opt-30b --hardware /nonexistent/hw.yaml",
       "/nonexistent/hw.yaml: cannot open"},
      {"policy --model opt-175b --hardware t4 --cpu-mem 16G --disk-mem 0", "does not fit"},
      {"policy --model opt-30b --hardware t4 --prompt-len 2040 --gen-len 32", "tokens of context"},
      {"policy --model opt-30b --hardware t4 --prompt-len 64 --shared-prefix 65",
       "--shared-prefix 65 is not allowed; use 0 to --prompt-len (64)"},
      {"policy --model opt-30b --hardware t4 --sparse-budget 512",
       "--sparse-budget 512: sparse attention runs on the CPU only"},
  };
  for (const Case& c : cases) {
    const CliRun r = run_strata(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  }
}

}  // namespace
}  // namespace strata
