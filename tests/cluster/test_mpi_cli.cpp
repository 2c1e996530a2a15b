// `mpirun -np N strata generate` end to end on the tiny Llama fixture (CPU
// device, one thread per rank; --allow-run-as-root and --oversubscribe, as
// CI runs as root on 2 cores):
//  - 2 and 3 ranks write the same output as one process, byte for byte,
//    each rank computing a non-empty share; with seeded sampling too; with
//    the weights on disk in one offload directory (one pack, built once);
//  - kill -9 of one rank (a worker, then rank 0, the writer) mid-run ends the
//    job with a non-zero status naming the rank; the same command again (with
//    another number of ranks too) completes to the same output, no record
//    twice or missing;
//  - ranks started with other settings refuse the job, each with one line;
//  - a rank that cannot open the model ends the job with its message, no hang.
// Skipped with a message where strata is built without MPI.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/batch_files.h"
#include "support/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::finish_strata;
using test::read_text;
using test::ScratchDir;
using test::start_program;
using test::test_data;
using test::write_text;

const std::string kLlama = test_data("models/llama");

std::string prompts(int n) {
  return test::word_prompts(n, 9);
}

std::vector<std::string> generate_args(const ScratchDir& dir, const std::string& extra = "") {
  std::vector<std::string> a = {"generate",
                                "--model",
                                kLlama,
                                "--prompts",
                                dir.file("p.txt"),
                                "--output",
                                dir.file("out.jsonl"),
                                "--max-new-tokens",
                                "24",
                                "--batch-size",
                                "2",
                                "--compute-dtype",
                                "f32",
                                "--threads",
                                "1"};
  for (const auto& w : test::split_args(extra)) a.push_back(w);
  return a;
}

std::vector<std::string> mpirun(int np) {
  return {STRATA_MPIEXEC,
          "--allow-run-as-root",
          "--oversubscribe",
          "--mca",
          "btl_vader_single_copy_mechanism",
          "none",
          "-np",
          std::to_string(np)};
}

// mpirun -np `np` strata `args`.
std::vector<std::string> mpi_command(int np, const std::vector<std::string>& args) {
  auto argv = mpirun(np);
  argv.push_back(STRATA_BIN);
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Waits for `pid`; a run past `limit_s` is stopped and reported as a hang.
test::CliResult finish_within(pid_t pid, const ScratchDir& dir, double limit_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGTERM);  // mpirun ends its ranks
      auto r = finish_strata(pid, dir.path());
      ADD_FAILURE() << "still running after " << limit_s << " s (a hang):\n" << r.err;
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  test::CliResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_text(dir.file("cli.stdout"));
  r.err = read_text(dir.file("cli.stderr"));
  return r;
}

test::CliResult run_mpi(int np, const ScratchDir& dir, const std::string& extra = "") {
  return finish_within(start_program(mpi_command(np, generate_args(dir, extra)), dir.path()), dir,
                       120);
}

// The pid of the strata process of rank `rank` whose command line names
// `marker` (a scratch path: tests may run side by side); -1 when none.
pid_t rank_pid(int rank, const std::string& marker) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_text(e.path().string() + "/cmdline");
    if (cmd.rfind(STRATA_BIN, 0) != 0 || cmd.find(marker) == std::string::npos) continue;
    const std::string env = read_text(e.path().string() + "/environ");
    for (size_t p = 0; p < env.size();) {
      const size_t end = env.find('\0', p);
      if (env.compare(p, (end == std::string::npos ? env.size() : end) - p, want) == 0) {
        return std::stoi(name);
      }
      if (end == std::string::npos) break;
      p = end + 1;
    }
  }
  return -1;
}

// The indices of a .partial's whole records; none twice.
std::set<uint64_t> partial_records(const std::string& path) {
  std::set<uint64_t> seen;
  for (const auto& j : test::partial_records(path)) {
    EXPECT_TRUE(seen.insert(j.at("index").get<uint64_t>()).second)
        << "prompt " << j["index"] << " twice in " << path;
  }
  return seen;
}

class Mpi : public ::testing::Test {
 protected:
  static constexpr int kPrompts = 300;
  void SetUp() override {
    if (std::string(STRATA_MPIEXEC).empty()) {
      GTEST_SKIP() << "strata is built without MPI (install Open MPI: scripts/install-deps.sh)";
    }
    write_text(ref_.file("p.txt"), prompts(kPrompts));
    const auto r = test::run_strata(generate_args(ref_), ref_.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    want_ = read_text(ref_.file("out.jsonl"));
    ASSERT_FALSE(want_.empty());
  }
  ScratchDir ref_;
  std::string want_;
};

TEST_F(Mpi, TwoAndThreeRanksWriteTheSameOutputAsOneProcess) {
  for (int np : {2, 3}) {
    ScratchDir dir;
    write_text(dir.file("p.txt"), prompts(kPrompts));
    const auto r = run_mpi(np, dir, "--report " + dir.file("report.json"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(read_text(dir.file("out.jsonl")), want_) << np << " ranks";
    EXPECT_FALSE(fs::exists(dir.file("out.jsonl.partial")));
    const auto report = nlohmann::json::parse(read_text(dir.file("report.json")));
    EXPECT_EQ(report["n_ranks"], np);
    EXPECT_EQ(report["n_prompts"], kPrompts);
    ASSERT_EQ(report["ranks"].size(), static_cast<size_t>(np));
    for (const auto& rank : report["ranks"]) {
      EXPECT_GT(rank["n_prompts"].get<int>(), 0) << "rank " << rank["rank"] << " had no share";
    }
    EXPECT_NE(r.out.find("strata report: " + std::to_string(np) + " ranks"), std::string::npos)
        << r.out;
  }
}

TEST_F(Mpi, RanksShareOneOffloadDirectoryWithTheWeightsOnDisk) {
  // The first rank builds the weight pack; the other opens it.
  ScratchDir dir;
  write_text(dir.file("p.txt"), prompts(kPrompts));
  const auto r = run_mpi(2, dir, "--offload-dir " + dir.file("od") + " --percent 0 0 100 0 100 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_text(dir.file("out.jsonl")), want_);
  EXPECT_TRUE(fs::exists(dir.file("od/manifest.json")));
}

TEST_F(Mpi, SeededSamplingGivesTheSameOutputOverRanks) {
  const std::string sampling = "--temperature 0.9 --top-p 0.95 --seed 11";
  ScratchDir one, two;
  write_text(one.file("p.txt"), prompts(kPrompts));
  write_text(two.file("p.txt"), prompts(kPrompts));
  const auto r1 = test::run_strata(generate_args(one, sampling), one.path());
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  const auto r2 = run_mpi(2, two, sampling);
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  const std::string sampled = read_text(one.file("out.jsonl"));
  EXPECT_NE(sampled, want_) << "sampling gave the greedy output";
  EXPECT_EQ(read_text(two.file("out.jsonl")), sampled);
}

TEST_F(Mpi, KilledRankThenTheSameCommandGivesTheSameOutput) {
  // Kill a worker, resume with 3 ranks; kill rank 0, resume with 2.
  for (const auto& [victim, resume_np] : {std::pair{1, 3}, std::pair{0, 2}}) {
    ScratchDir dir;
    write_text(dir.file("p.txt"), prompts(kPrompts));
    const pid_t job = start_program(mpi_command(2, generate_args(dir)), dir.path());
    ASSERT_GT(job, 0);
    // Mid-run: once the .partial holds a few records.
    const std::string partial = dir.file("out.jsonl.partial");
    pid_t pid = -1;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until) {
      if (pid < 0) pid = rank_pid(victim, dir.path());
      if (pid > 0 && fs::exists(partial) && partial_records(partial).size() >= 4) break;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    ASSERT_GT(pid, 0) << "rank " << victim << " was not found";
    ::kill(pid, SIGKILL);
    const auto killed = finish_within(job, dir, 60);
    if (fs::exists(dir.file("out.jsonl"))) {
      GTEST_SKIP() << "the job finished before the kill; it is too short for this machine";
    }
    EXPECT_NE(killed.exit_code, 0) << killed.err;
    EXPECT_NE(killed.err.find("rank " + std::to_string(victim)), std::string::npos) << killed.err;
    const size_t kept = partial_records(partial).size();
    EXPECT_GE(kept, 4u);
    EXPECT_LT(kept, static_cast<size_t>(kPrompts)) << "the kill came after the last record";

    const auto r = run_mpi(resume_np, dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(read_text(dir.file("out.jsonl")), want_)
        << "killed rank " << victim << ", resumed with " << resume_np;
    EXPECT_FALSE(fs::exists(partial));
  }
}

TEST_F(Mpi, RanksWithOtherSettingsRefuseTheJob) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), prompts(kPrompts));
  auto argv = mpirun(1);
  argv.push_back(STRATA_BIN);
  for (const auto& a : generate_args(dir, "--seed 1")) argv.push_back(a);
  argv.insert(argv.end(), {":", "-np", "1", STRATA_BIN});
  for (const auto& a : generate_args(dir, "--seed 2")) argv.push_back(a);
  const auto r = finish_within(start_program(argv, dir.path()), dir, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the ranks do not run the same job: rank 1 on"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("out.jsonl")));
  EXPECT_FALSE(fs::exists(dir.file("out.jsonl.partial")));
}

TEST_F(Mpi, ARankThatCannotOpenTheModelEndsTheJob) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), prompts(kPrompts));
  auto argv = mpirun(1);
  argv.push_back(STRATA_BIN);
  for (const auto& a : generate_args(dir)) argv.push_back(a);
  argv.insert(argv.end(), {":", "-np", "1", STRATA_BIN});
  auto bad = generate_args(dir);
  bad[2] = dir.file("no-such-model.gguf");
  for (const auto& a : bad) argv.push_back(a);
  const auto r = finish_within(start_program(argv, dir.path()), dir, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("strata: error: rank 1 of 2 on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no-such-model.gguf"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("out.jsonl")));
}

}  // namespace
}  // namespace strata
