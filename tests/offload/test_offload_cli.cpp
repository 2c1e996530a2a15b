// `strata generate` / `strata bench` with placement flags: the same output
// with weights and KV on disk as in RAM, the report's links, peaks and
// queues, the trace as Chrome JSON, --policy FILE and --policy auto, and the
// failures a user can cause (a budget too small, an offload directory that
// is full or hits the file size limit): one line naming the problem, exit
// code 1, and no final OUTPUT (the .partial holds no record).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "offload/offload_test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using CliRun = offload_test::Run;
using offload_test::run_strata;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() /
           ("strata-offload-cli-" + tag + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

const std::string kModel = std::string(STRATA_TEST_DATA) + "/models/llama";

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

std::string prompts(const TempDir& d) {
  const std::string p = d / "prompts.txt";
  write(p,
        "the quick brown fox jumps over the lazy dog\n"
        "once upon a time\n"
        "hello\n"
        "a b c d e f g h i j k l m n o p q r s t u v w x y z\n"
        "strata streams weights from disk\n");
  return p;
}

std::vector<std::string> generate_args(const TempDir& d, const std::string& out,
                                       std::vector<std::string> extra,
                                       const std::string& log_level = "warn",
                                       const std::string& max_new = "24") {
  std::vector<std::string> a = {"--log-level", log_level,          "generate", "--model",
                                kModel,        "--prompts",        prompts(d), "-o",
                                out,           "--max-new-tokens", max_new,    "--compute-dtype",
                                "f32",         "--offload-dir",    d / "off"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// No final output, and no record in the .partial (only its header line).
void expect_no_output(const std::string& out) {
  EXPECT_FALSE(fs::exists(out)) << out;
  if (fs::exists(out + ".partial")) {
    EXPECT_LE(offload_test::count_lines(offload_test::slurp(out + ".partial")), 1)
        << "a record reached " << out << ".partial";
  }
}

TEST(OffloadCli, PlacementGivesTheSameOutputAndReportsLinksPeaksAndQueues) {
  TempDir d("same");
  const CliRun ram = run_strata(generate_args(d, d / "ram.jsonl", {}), d.path.string());
  ASSERT_EQ(ram.exit_code, 0) << ram.err;
  const CliRun off =
      run_strata(generate_args(d, d / "off.jsonl",
                               {"--percent", "0", "50", "0", "0", "0", "100", "--gpu-batch-size",
                                "2", "--num-gpu-batches", "2", "--report", d / "report.json",
                                "--trace", d / "trace.json"}),
                 d.path.string());
  ASSERT_EQ(off.exit_code, 0) << off.err;
  // Other micro-batch sizes may round differently; the same sizes do not.
  const CliRun ram22 = run_strata(
      generate_args(d, d / "ram22.jsonl", {"--gpu-batch-size", "2", "--num-gpu-batches", "2"}),
      d.path.string());
  ASSERT_EQ(ram22.exit_code, 0) << ram22.err;
  EXPECT_EQ(offload_test::slurp(d / "off.jsonl"), offload_test::slurp(d / "ram22.jsonl"));
  EXPECT_TRUE(fs::exists(d / "off/manifest.json")) << "the pack is built in --offload-dir";

  const auto r = nlohmann::json::parse(offload_test::slurp(d / "report.json"));
  EXPECT_EQ(r["policy"]["weights"]["disk"], 0.5);
  EXPECT_EQ(r["policy"]["kv_cache"]["disk"], 1.0);
  EXPECT_EQ(r["policy"]["source"], "flags");
  for (const char* link : {"disk->cpu", "cpu->disk"}) {
    ASSERT_TRUE(r["links"].contains(link)) << r.dump(1);
    EXPECT_GT(r["links"][link]["bytes"].get<double>(), 0);
    EXPECT_GT(r["links"][link]["busy_s"].get<double>(), 0);
    EXPECT_GT(r["links"][link]["gb_per_s"].get<double>(), 0);
  }
  EXPECT_GT(r["peak_bytes"]["cpu"].get<double>(), 0);
  EXPECT_GT(r["peak_bytes"]["disk"].get<double>(), 0);
  for (const char* q : {"compute", "load", "store"}) {
    ASSERT_TRUE(r["queue_busy"].contains(q)) << r.dump(1);
    EXPECT_GT(r["queue_busy"][q].get<double>(), 0);
  }
  EXPECT_NE(off.out.find("link disk->cpu"), std::string::npos) << off.out;

  // The trace opens in Perfetto: Chrome trace events, one named thread per queue.
  const auto t = nlohmann::json::parse(offload_test::slurp(d / "trace.json"));
  std::map<int, std::string> names;
  std::map<std::string, int> spans;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M") {
      names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number() && e["name"].is_string());
    ++spans[names.at(e["tid"].get<int>())];
  }
  EXPECT_GT(spans["compute"], 0);
  EXPECT_GT(spans["load"], 0);
  EXPECT_GT(spans["store"], 0);

  // A second run reuses the pack.
  const CliRun again = run_strata(generate_args(d, d / "again.jsonl",
                                                {"--percent", "0", "50", "0", "0", "0", "100",
                                                 "--gpu-batch-size", "2", "--num-gpu-batches", "2"},
                                                "info"),
                                  d.path.string());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.err.find("building the weight pack"), std::string::npos) << again.err;
  EXPECT_EQ(offload_test::slurp(d / "again.jsonl"), offload_test::slurp(d / "off.jsonl"));
}

TEST(OffloadCli, BudgetTooSmallFailsBeforeAnyWork) {
  TempDir d("budget");
  const std::string out = d / "out.jsonl";
  const CliRun r = run_strata(generate_args(d, out, {"--cpu-mem", "200K"}), d.path.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("strata: error: RAM budget 200K"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is below the"), std::string::npos) << r.err;
  EXPECT_EQ(offload_test::count_lines(r.err), 1) << r.err;
  expect_no_output(out);
  // Disk too small for the weights placed there.
  const CliRun disk = run_strata(
      generate_args(d, out, {"--percent", "0", "0", "0", "100", "0", "100", "--disk-mem", "10K"}),
      d.path.string());
  EXPECT_EQ(disk.exit_code, 1);
  EXPECT_NE(disk.err.find("disk budget 10.0K"), std::string::npos) << disk.err;
  expect_no_output(out);
  EXPECT_FALSE(fs::exists(d / "off/weights.bin")) << "the pack is not built before the check";
}

// A device that is not known, or not on this machine: one line, exit 1,
// nothing written. (With a GPU, --device cuda runs: tests/ops/test_cuda_engine.cpp.)
TEST(OffloadCli, UnknownOrAbsentDeviceFailsWithOneLine) {
  TempDir d("device");
  const std::string out = d / "out.jsonl";
  const CliRun r = run_strata(generate_args(d, out, {"--device", "tpu"}), d.path.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("device tpu is not known; use cpu, cuda or cuda:N"), std::string::npos)
      << r.err;
  EXPECT_EQ(offload_test::count_lines(r.err), 1) << r.err;
  expect_no_output(out);
  const CliRun c = run_strata(generate_args(d, out, {"--device", "cuda:7"}), d.path.string());
  if (c.exit_code == 0) GTEST_SKIP() << "this machine has a GPU cuda:7";
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("cuda"), std::string::npos) << c.err;
  EXPECT_EQ(offload_test::count_lines(c.err), 1) << c.err;
  expect_no_output(out);
}

TEST(OffloadCli, FileSizeLimitInTheOffloadDirectoryFailsCleanly) {
  TempDir d("fsize");
  const std::string out = d / "out.jsonl";
  // Weights on disk: the pack does not fit under the limit.
  const CliRun w =
      run_strata(generate_args(d, out, {"--percent", "0", "0", "0", "100", "0", "100"}),
                 d.path.string(), offload_test::limit_file_size_64k);
  EXPECT_EQ(w.exit_code, 1) << w.err;
  EXPECT_NE(w.err.find("strata: error:"), std::string::npos) << w.err;
  EXPECT_NE(w.err.find("size limit"), std::string::npos) << w.err;
  expect_no_output(out);
  // KV on disk: its file does not fit either.
  fs::remove_all(d / "off");
  const std::string out_kv = d / "out-kv.jsonl";
  const CliRun kv = run_strata(
      generate_args(d, out_kv, {"--percent", "0", "100", "0", "0", "0", "100"}, "warn", "60"),
      d.path.string(), offload_test::limit_file_size_64k);
  EXPECT_EQ(kv.exit_code, 1) << kv.err;
  EXPECT_NE(kv.err.find("strata: error:"), std::string::npos) << kv.err;
  EXPECT_NE(kv.err.find(d / "off"), std::string::npos) << kv.err;
  expect_no_output(out_kv);
}

TEST(OffloadCli, FullOffloadDirectoryFailsCleanly) {
  TempDir d("full");
  const std::string mnt = d / "mnt";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno)
                 << "); FileSizeLimitInTheOffloadDirectoryFailsCleanly covers the error path";
  }
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string out = d / "out.jsonl";
  std::vector<std::string> args =
      generate_args(d, out, {"--percent", "0", "0", "0", "100", "0", "100"});
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--offload-dir") args[i + 1] = mnt + "/off";
  }
  // The default disk budget is the free space: too small, said at once.
  const CliRun budget = run_strata(args, d.path.string());
  EXPECT_EQ(budget.exit_code, 1) << budget.err;
  EXPECT_NE(budget.err.find("disk budget 256K"), std::string::npos) << budget.err;
  expect_no_output(out);
  // A budget larger than the disk: the write that finds it full fails.
  args.push_back("--disk-mem");
  args.push_back("10M");
  const CliRun r = run_strata(args, d.path.string());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("No space left"), std::string::npos) << r.err;
  expect_no_output(out);
}

TEST(OffloadCli, PolicyFileAndPolicyAuto) {
  TempDir d("policy");
  write(d / "policy.yaml",
        "gpu_batch_size: 2\nnum_gpu_batches: 2\nweights: {gpu: 0, cpu: 0.5}\n"
        "kv_cache: {gpu: 0, cpu: 0}\nactivations: {gpu: 0, cpu: 1}\n");
  const CliRun f = run_strata(
      generate_args(d, d / "file.jsonl", {"--policy", d / "policy.yaml", "--report", d / "f.json"}),
      d.path.string());
  ASSERT_EQ(f.exit_code, 0) << f.err;
  const auto rf = nlohmann::json::parse(offload_test::slurp(d / "f.json"));
  EXPECT_EQ(rf["policy"]["source"], d / "policy.yaml");
  EXPECT_EQ(rf["policy"]["block_size"], 4);
  EXPECT_EQ(rf["policy"]["weights"]["disk"], 0.5);
  EXPECT_FALSE(rf.contains("predicted")) << "no hardware profile, no prediction";

  // --policy auto against a given profile: the search's policy runs, and
  // the report sets the cost model's prediction beside the measurement.
  write(d / "hw.yaml",
        "name: test-cpu\ndevice: cpu\nmemory: {cpu: 16G, disk: 100G}\n"
        "links: {disk_to_cpu: 2G, cpu_to_disk: 1G}\n"
        "cpu_compute: {gemm_tflops: 0.2, attention_tflops: 0.02, mem_bandwidth: 20G}\n");
  const CliRun a = run_strata(
      generate_args(d, d / "auto.jsonl",
                    {"--policy", "auto", "--hardware", d / "hw.yaml", "--report", d / "a.json"},
                    "info"),
      d.path.string());
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("policy auto:"), std::string::npos) << a.err;
  const auto ra = nlohmann::json::parse(offload_test::slurp(d / "a.json"));
  EXPECT_EQ(ra["policy"]["source"], "auto");
  EXPECT_EQ(ra["policy"]["hardware_profile"], "test-cpu");
  ASSERT_TRUE(ra.contains("predicted")) << ra.dump(1);
  EXPECT_GT(ra["predicted"]["total_tokens_per_s"].get<double>(), 0);
  EXPECT_TRUE(ra["predicted"].contains("bound"));
  // Everything fits in RAM: the search keeps it there.
  EXPECT_EQ(ra["policy"]["weights"]["disk"], 0.0);
  EXPECT_EQ(offload_test::slurp(d / "auto.jsonl").empty(), false);

  // bench takes the block from the policy.
  const CliRun b =
      run_strata({"--log-level", "warn", "bench", "--model", kModel, "--prompt-len", "8",
                  "--gen-len", "4", "--warmup", "0", "--repeats", "1", "--policy",
                  d / "policy.yaml", "--offload-dir", d / "off", "--report", d / "b.json"},
                 d.path.string());
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto rb = nlohmann::json::parse(offload_test::slurp(d / "b.json"));
  EXPECT_EQ(rb["n_prompts"], 4);
  EXPECT_GT(rb["links"]["disk->cpu"]["bytes"].get<double>(), 0);
  // A bad policy file names itself.
  write(d / "bad.yaml", "gpu_batch_size: 0\n");
  const CliRun bad =
      run_strata(generate_args(d, d / "bad.jsonl", {"--policy", d / "bad.yaml"}), d.path.string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("bad.yaml"), std::string::npos) << bad.err;
}

// --speculate-acceptance pilot: before the plan, a block of the first
// prompts runs with the drafts (the model as its own draft: greedy, every
// draft token accepted) and the search plans with the share measured;
// the pilot writes nothing, and the records are those of a run without
// speculation. A share that is no share, or a pilot where no prompt file
// is, is one line.
TEST(OffloadCli, SpeculationPilotMeasuresTheAcceptanceForThePlan) {
  TempDir d("pilot");
  write(d / "hw.yaml",
        "name: test-cpu\ndevice: cpu\nmemory: {cpu: 16G, disk: 100G}\n"
        "links: {disk_to_cpu: 2G, cpu_to_disk: 1G}\n"
        "cpu_compute: {gemm_tflops: 0.2, attention_tflops: 0.02, mem_bandwidth: 20G}\n");
  const CliRun plain = run_strata(generate_args(d, d / "plain.jsonl", {}), d.path.string());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::vector<std::string> spec = {"--policy",      "auto",        "--hardware",
                                         d / "hw.yaml",   "--speculate", "model",
                                         "--draft-model", kModel,        "--speculate-acceptance"};
  auto with = [&](const std::string& acceptance) {
    std::vector<std::string> extra = spec;
    extra.push_back(acceptance);
    return extra;
  };
  const CliRun p =
      run_strata(generate_args(d, d / "pilot.jsonl", with("pilot"), "info"), d.path.string());
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.err.find("speculation pilot: "), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("draft tokens accepted (100.0 %)"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("(accepted share 1)"), std::string::npos) << p.err;
  EXPECT_EQ(offload_test::slurp(d / "pilot.jsonl"), offload_test::slurp(d / "plain.jsonl"));

  const CliRun bad = run_strata(generate_args(d, d / "bad.jsonl", with("most")), d.path.string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--speculate-acceptance most: give a share above 0 and at most 1, or "
                         "pilot"),
            std::string::npos)
      << bad.err;
  expect_no_output(d / "bad.jsonl");
  std::vector<std::string> bench = {"bench", "--model",       kModel,   "--prompt-len",
                                    "8",     "--gen-len",     "4",      "--batch",
                                    "2",     "--offload-dir", d / "off"};
  const std::vector<std::string> extra = with("pilot");
  bench.insert(bench.end(), extra.begin(), extra.end());
  const CliRun b = run_strata(bench, d.path.string());
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_NE(b.err.find("--speculate-acceptance pilot: runs on generate's prompt file"),
            std::string::npos)
      << b.err;
}

}  // namespace
}  // namespace strata
