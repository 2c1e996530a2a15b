// Nothing lost, end to end through the strata executable on the tiny Llama
// fixture with its weights streamed from the disk tier:
//  - kill -9 at 20 moments spread over a run (building the pack, prefill,
//    decode, appending records), each followed by a resume: the final output
//    equals the uninterrupted run byte for byte, and after every kill the
//    .partial holds only whole records, none twice;
//  - a .partial whose last line was cut mid-record: the line is dropped with
//    a warning and the run completes to the same output;
//  - injected disk faults (STRATA_DISK_FAULT, offload/disk_faults.h) on a read
//    of the weight pack, a read and a write of the KV file, through io_uring
//    and through the thread fallback: one `strata: error:` line naming the
//    file and the operation, exit status 1, no output file, a .partial of
//    whole records that the same command resumes to the same output;
//  - a flipped byte in a layer of the weight pack (its disk share, and the
//    RAM share of a requantized pack read in place): caught by the tensor's
//    checksum before its bytes are used, one error line, the manifest set
//    aside, and the next run rebuilds the pack and gives the same output.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "generate/generate_test_util.h"
#include "support/batch_files.h"
#include "support/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::finish_strata;
using test::read_text;
using test::run_strata;
using test::ScratchDir;
using test::start_strata;
using test::test_data;
using test::write_text;

const std::string kLlama = test_data("models/llama");

std::string prompts(int n) {
  return test::word_prompts(n, 5);
}

// Weights wholly on disk (the pack in dir/od), KV and activations in RAM;
// `kv_on_disk` puts the KV cache on the disk tier too.
std::vector<std::string> generate_args(const ScratchDir& dir, bool kv_on_disk = false) {
  return {"generate",
          "--model",
          kLlama,
          "--prompts",
          dir.file("p.txt"),
          "--output",
          dir.file("out.jsonl"),
          "--max-new-tokens",
          "12",
          "--batch-size",
          "2",
          "--compute-dtype",
          "f32",
          "--offload-dir",
          dir.file("od"),
          "--percent",
          "0",
          "0",
          kv_on_disk ? "0" : "100",
          "0",
          "100",
          "0"};
}

// The records of a .partial (after its header), each checked to be whole:
// an object with an index below n and a record, no index twice. A last line
// without its newline is allowed (the kill came inside the write) and not
// counted.
size_t check_partial(const std::string& path, size_t n) {
  std::set<uint64_t> seen;
  for (const auto& j : test::partial_records(path)) {
    EXPECT_TRUE(j.contains("record") && j["record"].is_object()) << j;
    const uint64_t index = j.at("index").get<uint64_t>();
    EXPECT_LT(index, n);
    EXPECT_TRUE(seen.insert(index).second) << "prompt " << index << " twice in " << path;
  }
  return seen.size();
}

// One run of `args` in `dir`, killed (SIGKILL) once `wait` returns. When
// the run got to its end first (or was killed after the output's rename),
// its output must be `want`, and it is removed with its .partial so that
// the next run starts over: finished is true. Else the killed run must
// have failed (and left no output, or it would count as finished).
struct KillResult {
  bool finished = false;
  test::CliResult run;
};
KillResult kill_run(const std::vector<std::string>& args, const ScratchDir& dir,
                    const std::function<void()>& wait, const std::string& want) {
  KillResult k;
  const pid_t pid = start_strata(args, dir.path());
  EXPECT_GT(pid, 0);
  if (pid <= 0) return k;
  wait();
  ::kill(pid, SIGKILL);
  k.run = finish_strata(pid, dir.path());
  if (fs::exists(dir.file("out.jsonl"))) {
    EXPECT_EQ(read_text(dir.file("out.jsonl")), want);
    fs::remove(dir.file("out.jsonl"));
    fs::remove(dir.file("out.jsonl.partial"));
    k.finished = true;
  } else {
    EXPECT_NE(k.run.exit_code, 0) << "no output, yet the run succeeded:\n" << k.run.err;
  }
  return k;
}

// Sleeps for `ms` milliseconds.
void sleep_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

class CrashResume : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(ref_.file("p.txt"), prompts(kPrompts));
    const auto start = std::chrono::steady_clock::now();
    const auto r = run_strata(generate_args(ref_), ref_.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    run_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    want_ = read_text(ref_.file("out.jsonl"));
    ASSERT_FALSE(want_.empty());
  }
  static constexpr int kPrompts = 12;
  ScratchDir ref_;
  double run_ms_ = 0;
  std::string want_;
};

TEST_F(CrashResume, KilledAtTwentyMomentsAndResumedGivesTheSameBytes) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), prompts(kPrompts));
  std::mt19937 rng(20);
  int kills = 0, before_pack = 0, with_records = 0;
  size_t done = 0;  // records in the .partial
  for (int i = 0; kills < 20 && i < 60; ++i) {
    // Every fifth try starts without the pack and is killed as soon as the
    // pack's weights file is being written; the others land anywhere in
    // what is left of the run (a resumed run has less to do).
    const bool fresh_pack = i % 5 == 0;
    if (fresh_pack) fs::remove_all(dir.file("od"));
    const double left = static_cast<double>(kPrompts - done + 1) / (kPrompts + 1);
    const double delay_ms = std::uniform_real_distribution<double>(1.0, run_ms_ * left)(rng);
    const auto wait = [&] {
      if (!fresh_pack) return sleep_ms(delay_ms);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!fs::exists(dir.file("od/weights.bin.tmp")) &&
             std::chrono::steady_clock::now() < until)
        sleep_ms(0.1);
    };
    if (kill_run(generate_args(dir), dir, wait, want_).finished) {
      done = 0;
      continue;
    }
    ++kills;
    if (!fs::exists(dir.file("od/manifest.json"))) ++before_pack;
    done = check_partial(dir.file("out.jsonl.partial"), kPrompts);
    if (done > 0) ++with_records;
  }
  std::printf("kills: %d (%d before the pack was complete, %d after records were written)\n", kills,
              before_pack, with_records);
  EXPECT_EQ(kills, 20) << "too few runs were killed: the run is shorter than the delays";
  EXPECT_GE(before_pack, 1) << "no kill landed before the pack was complete";
  EXPECT_GE(with_records, 1) << "no kill landed after a record was written";
  const auto r = run_strata(generate_args(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_text(dir.file("out.jsonl")), want_);
  EXPECT_FALSE(fs::exists(dir.file("out.jsonl.partial")));
}

TEST_F(CrashResume, TornLastLineIsDroppedWithAWarning) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), prompts(kPrompts));
  // A run stopped by a fault after some records, then its last record cut
  // in the middle as a crash inside the write would leave it.
  auto r =
      run_strata(generate_args(dir), dir.path(), {"STRATA_DISK_FAULT=eio:read:150:weights.bin"});
  ASSERT_EQ(r.exit_code, 1) << r.err;
  const std::string partial = dir.file("out.jsonl.partial");
  std::string content = read_text(partial);
  const size_t n = check_partial(partial, kPrompts);
  ASSERT_GE(n, 1u) << "the fault came before any record; move it later";
  ASSERT_EQ(content.back(), '\n');
  const size_t last = content.rfind('\n', content.size() - 2);
  content.resize(last + 1 + (content.size() - last) / 2);
  write_text(partial, content);
  EXPECT_EQ(check_partial(partial, kPrompts), n - 1);
  r = run_strata(generate_args(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("[warning]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dropping an incomplete last line"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(dir.file("out.jsonl")), want_);
}

// Prompts sharing a preamble (a whole page of it and more), in blocks of
// two: each block takes the preamble's pages kept from the block before (in
// RAM, or on disk). Killed at random moments and resumed, the output is
// that of an uninterrupted run without prefix sharing, byte for byte.
TEST(CrashResumeSharing, KilledAndResumedGivesTheRecordsOfARunWithoutSharing) {
  // Longer runs than generate_args' (48 new tokens, 20 prompts), so that
  // the kills land in the generation as often as in the start.
  constexpr int kN = 20;
  auto args_of = [](const ScratchDir& d, bool kv_on_disk) {
    std::vector<std::string> a = generate_args(d, kv_on_disk);
    *(std::find(a.begin(), a.end(), "--max-new-tokens") + 1) = "48";
    return a;
  };
  std::string p;
  std::istringstream lines(prompts(kN));
  for (std::string line; std::getline(lines, line);) {
    p += "once upon a time there was a dog who ran far away and the cat sat on a mat, " + line +
         "\n";
  }
  for (const bool kv_on_disk : {false, true}) {
    ScratchDir ref, dir;
    write_text(ref.file("p.txt"), p);
    write_text(dir.file("p.txt"), p);
    std::vector<std::string> args = args_of(ref, kv_on_disk);
    args.push_back("--no-prefix-sharing");
    auto r = run_strata(args, ref.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string want = read_text(ref.file("out.jsonl"));
    // Uninterrupted with sharing: the same bytes, and the blocks after the
    // first took the preamble kept from the block before.
    ScratchDir once;
    write_text(once.file("p.txt"), p);
    args = args_of(once, kv_on_disk);
    args.insert(args.end(), {"--report", once.file("report.json")});
    r = run_strata(args, once.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(read_text(once.file("out.jsonl")), want) << "KV on disk " << kv_on_disk;
    const auto report = nlohmann::json::parse(read_text(once.file("report.json")));
    EXPECT_GT(report["prefix_reused_tokens"].get<int64_t>(), 0) << report;
    EXPECT_EQ(report["prefix_steps"].get<int64_t>(), 1) << report;
    // How long a run takes once the pack is there: the kills land within it.
    fs::remove(once.file("out.jsonl"));
    const auto start = std::chrono::steady_clock::now();
    r = run_strata(args, once.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const double run_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::mt19937 rng(kv_on_disk ? 7 : 5);
    int kills = 0, with_records = 0;
    size_t done = 0;
    for (int i = 0; (kills < 6 || with_records == 0) && i < 40; ++i) {
      const double left = static_cast<double>(kN - done + 1) / (kN + 1);
      const double delay_ms = std::uniform_real_distribution<double>(1.0, run_ms * left)(rng);
      SCOPED_TRACE(kv_on_disk ? "KV on disk" : "KV in RAM");
      const auto wait = [&] { sleep_ms(delay_ms); };
      if (kill_run(args_of(dir, kv_on_disk), dir, wait, want).finished) {
        done = 0;
        continue;
      }
      ++kills;
      done = check_partial(dir.file("out.jsonl.partial"), kN);
      if (done > 0) ++with_records;
    }
    EXPECT_GE(kills, 6) << "too few runs were killed: the run is shorter than the delays";
    EXPECT_GE(with_records, 1) << "no kill landed after a record was written";
    r = run_strata(args_of(dir, kv_on_disk), dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(read_text(dir.file("out.jsonl")), want) << "KV on disk " << kv_on_disk;
  }
}

struct FaultCase {
  const char* name;
  const char* spec;  // STRATA_DISK_FAULT
  bool kv_on_disk;
  const char* file;  // what the error line must name
  const char* op;    // and the operation
  bool threads;      // the pread/pwrite fallback instead of io_uring
};

class DiskFaultCli : public ::testing::TestWithParam<FaultCase> {};

TEST_P(DiskFaultCli, OneLineExitOneWholeRecordsAndResume) {
  const FaultCase& c = GetParam();
  ScratchDir ref, dir;
  for (const ScratchDir* d : {&ref, &dir}) write_text(d->file("p.txt"), prompts(8));
  std::vector<std::string> env;
  if (c.threads) env.push_back("STRATA_DISABLE_IO_URING=1");
  auto r = run_strata(generate_args(ref, c.kv_on_disk), ref.path(), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string want = read_text(ref.file("out.jsonl"));

  env.push_back(std::string("STRATA_DISK_FAULT=") + c.spec);
  r = run_strata(generate_args(dir, c.kv_on_disk), dir.path(), env);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const size_t at = r.err.find("strata: error:");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string line = r.err.substr(at);
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
  EXPECT_NE(line.find(c.file), std::string::npos) << line;
  EXPECT_NE(line.find(c.op), std::string::npos) << line;
  EXPECT_FALSE(fs::exists(dir.file("out.jsonl")));
  check_partial(dir.file("out.jsonl.partial"), 8);

  env.pop_back();
  r = run_strata(generate_args(dir, c.kv_on_disk), dir.path(), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_text(dir.file("out.jsonl")), want);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, DiskFaultCli,
    ::testing::Values(
        FaultCase{"PackReadEio", "eio:read:60:weights.bin", false, "weights.bin", "read", false},
        FaultCase{"PackReadEioThreads", "eio:read:60:weights.bin", false, "weights.bin", "read",
                  true},
        FaultCase{"PackShortRead", "short:read:40:weights.bin", false, "weights.bin",
                  "past the end of the file", false},
        FaultCase{"KvReadEio", "eio:read:30:strata-kv-", true, "strata-kv-", "read", false},
        FaultCase{"KvStoreNoSpace", "enospc:write:30:strata-kv-", true, "strata-kv-", "write",
                  false},
        FaultCase{"KvStoreNoSpaceThreads", "enospc:write:30:strata-kv-", true, "strata-kv-",
                  "write", true}),
    [](const auto& info) { return std::string(info.param.name); });

struct DamageCase {
  const char* name;
  std::vector<std::string> placement;  // flags after the common ones
};

class DamagedPack : public ::testing::TestWithParam<DamageCase> {};

TEST_P(DamagedPack, FlippedByteIsCaughtBeforeUseAndThePackRebuilt) {
  const DamageCase& c = GetParam();
  ScratchDir dir;
  write_text(dir.file("p.txt"), prompts(4));
  auto args = [&] {
    std::vector<std::string> a = {"generate",
                                  "--model",
                                  kLlama,
                                  "--prompts",
                                  dir.file("p.txt"),
                                  "--output",
                                  dir.file("out.jsonl"),
                                  "--max-new-tokens",
                                  "6",
                                  "--compute-dtype",
                                  "f32",
                                  "--offload-dir",
                                  dir.file("od")};
    a.insert(a.end(), c.placement.begin(), c.placement.end());
    return a;
  };
  auto r = run_strata(args(), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string want = read_text(dir.file("out.jsonl"));
  fs::remove(dir.file("out.jsonl"));
  // Flip one bit inside the last matrix of layer 1.
  const auto manifest = nlohmann::json::parse(read_text(dir.file("od/manifest.json")));
  uint64_t at = 0;
  std::string tensor;
  for (const auto& u : manifest["units"]) {
    if (u["name"] != "blk.1") continue;
    at = u["tensors"].back()["offset"].get<uint64_t>() + 100;
    tensor = u["tensors"].back()["name"].get<std::string>();
  }
  ASSERT_GT(at, 0u);
  std::string bytes = read_text(dir.file("od/weights.bin"));
  bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
  write_text(dir.file("od/weights.bin"), bytes);

  r = run_strata(args(), dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string line = r.err.substr(std::min(r.err.size(), r.err.find("strata: error:")));
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << r.err;
  for (const std::string& w :
       {std::string("weights.bin"), tensor, std::string("checksum"), std::string("damaged")}) {
    EXPECT_NE(line.find(w), std::string::npos) << w << " not in: " << line;
  }
  EXPECT_FALSE(fs::exists(dir.file("out.jsonl")));
  EXPECT_FALSE(fs::exists(dir.file("od/manifest.json")));
  EXPECT_TRUE(fs::exists(dir.file("od/manifest.json.damaged")));

  r = run_strata(args(), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("building the weight pack"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(dir.file("out.jsonl")), want);
}

INSTANTIATE_TEST_SUITE_P(
    Shares, DamagedPack,
    ::testing::Values(DamageCase{"DiskShare", {"--percent", "0", "0", "100", "0", "100", "0"}},
                      DamageCase{"RequantizedInRam", {"--compress-weight", "q8"}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata
