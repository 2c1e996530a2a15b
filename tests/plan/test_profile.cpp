// `strata profile` end to end on this machine: --quick writes a hardware
// profile (to -o or stdout) whose every measured number is positive and
// finite, that find_hardware_profile loads, whose YAML reads back to the same
// text, and that `strata policy` plans with; no temporary file is left behind.
// Bad input (an offload directory that is missing, unwritable or too full, an
// output file that cannot be written) fails at once with one line on stderr
// and exit code 1.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "offload/measure.h"
#include "plan/machine_profile.h"
#include "policy/hardware.h"
#include "support/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

struct CliRun {
  int exit_code = -1;  // -1: did not exit normally
  std::string out, err;
  double seconds = 0;
};

// A scratch directory removed (with its contents) at the end of the test.
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name)
      : dir(fs::temp_directory_path() /
            ("strata_test_profile_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir, ec);
  }
};

// In the child, as root: drop to the unprivileged user (root ignores
// directory permissions); exit 125 when that fails.
void drop_to_nobody() {
  if (::geteuid() != 0) return;
  if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
    ::_exit(125);
  }
}

// Runs strata with `args` (support/run_cli.h), stdout and stderr captured in
// files under `scratch`, as the unprivileged user with `as_nobody`, timed.
CliRun run_strata(const std::vector<std::string>& args, const fs::path& scratch,
                  bool as_nobody = false) {
  const auto t0 = std::chrono::steady_clock::now();
  const test::CliResult r =
      test::run_strata(args, scratch.string(), {}, as_nobody ? drop_to_nobody : nullptr);
  return {r.exit_code, r.out, r.err,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Files in `dir` other than the ones named.
std::vector<std::string> stray_files(const fs::path& dir, const std::vector<std::string>& keep) {
  std::vector<std::string> stray;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (std::find(keep.begin(), keep.end(), name) == keep.end()) stray.push_back(name);
  }
  return stray;
}

void expect_measured(const HardwareProfile& hw) {
  EXPECT_EQ(hw.device, DeviceKind::kCpu);
  const std::pair<const char*, double> numbers[] = {
      {"memory.cpu", hw.cpu_mem},
      {"memory.disk", hw.disk_mem},
      {"links.disk_to_cpu", hw.disk_to_cpu},
      {"links.cpu_to_disk", hw.cpu_to_disk},
      {"links.cpu_to_disk_kv", hw.cpu_to_disk_kv},
      {"device_compute.gemm_prefill_tflops", hw.gemm_prefill_flops},
      {"device_compute.gemm_decode_tflops", hw.gemm_decode_flops},
      {"device_compute.attention_prefill_tflops", hw.attention_prefill_flops},
      {"device_compute.attention_decode_tflops", hw.attention_decode_flops},
      {"device_compute.mem_bandwidth", hw.device_mem_bandwidth},
      {"cpu_compute.gemm_tflops", hw.cpu_gemm_flops},
      {"cpu_compute.attention_tflops", hw.cpu_attention_flops},
      {"cpu_compute.mem_bandwidth", hw.cpu_mem_bandwidth},
  };
  for (const auto& [key, v] : numbers) {
    EXPECT_TRUE(std::isfinite(v) && v > 0) << key << " = " << v;
  }
  // Sizes are what this machine has: RAM rounded down, and the free disk at
  // most what the filesystem had (with room for other writers meanwhile).
  EXPECT_LE(hw.cpu_mem, static_cast<double>(total_ram_bytes()));
  EXPECT_GT(hw.cpu_mem, 0.9 * static_cast<double>(total_ram_bytes()));
  // FLOP/s are FLOP/s, not TFLOP/s read twice: a 2-core CPU does more than
  // 10^8 and less than 10^15 of them.
  for (double f : {hw.gemm_prefill_flops, hw.gemm_decode_flops, hw.attention_prefill_flops,
                   hw.attention_decode_flops}) {
    EXPECT_GT(f, 1e8);
    EXPECT_LT(f, 1e15);
  }
  // Bytes per second: more than 1 MB/s, less than 10 TB/s.
  for (double b : {hw.disk_to_cpu, hw.cpu_to_disk, hw.cpu_to_disk_kv, hw.device_mem_bandwidth}) {
    EXPECT_GT(b, 1e6);
    EXPECT_LT(b, 1e13);
  }
  // KV page reads at each request size the engine's pages come in: a page
  // record of a few KiB up to an extent of a sequence's records.
  ASSERT_EQ(hw.disk_to_cpu_kv.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(hw.disk_to_cpu_kv[i].first, 4096.0 * (1 << (2 * i)));
    EXPECT_GT(hw.disk_to_cpu_kv[i].second, 1e5);
    EXPECT_LT(hw.disk_to_cpu_kv[i].second, 1e13);
  }
  // The same reads in batches of 1 to 16 requests, as a decode layer's load
  // issues them.
  ASSERT_EQ(hw.disk_to_cpu_kv_batches.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(hw.disk_to_cpu_kv_batches[i].first, static_cast<double>(1 << i));
    EXPECT_GT(hw.disk_to_cpu_kv_batches[i].second, 1e5);
    EXPECT_LT(hw.disk_to_cpu_kv_batches[i].second, 1e13);
  }
  // Weight loads at smaller requests than disk_to_cpu's (a small model's
  // layer), that rate last.
  ASSERT_EQ(hw.disk_to_cpu_weights.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(hw.disk_to_cpu_weights[i].first, 1048576.0 * (1 << (2 * i)));
    EXPECT_GT(hw.disk_to_cpu_weights[i].second, 1e5);
    EXPECT_LT(hw.disk_to_cpu_weights[i].second, 1e13);
  }
  EXPECT_GT(hw.disk_to_cpu_weights[3].first, hw.disk_to_cpu_weights[2].first);
  EXPECT_EQ(hw.disk_to_cpu_weights[3].second, hw.disk_to_cpu);
  // The same loads beside compute, at the same sizes.
  ASSERT_EQ(hw.disk_to_cpu_beside_compute.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(hw.disk_to_cpu_beside_compute[i].first, hw.disk_to_cpu_weights[i].first);
    EXPECT_GT(hw.disk_to_cpu_beside_compute[i].second, 1e5);
    EXPECT_LT(hw.disk_to_cpu_beside_compute[i].second, 1e13);
  }
}

TEST(Profile, QuickWritesAProfileThatPolicyPlansWith) {
  Scratch s("quick");
  const fs::path offload = s.dir / "offload";
  fs::create_directories(offload);
  const fs::path yaml = s.dir / "hw.yaml";
  const CliRun r = run_strata(
      {"profile", "--quick", "--offload-dir", offload.string(), "-o", yaml.string()}, s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("profile: disk"), std::string::npos) << r.err;  // progress lines
  EXPECT_NE(r.err.find("wrote " + yaml.string()), std::string::npos) << r.err;
  // The temporary disk file and the output's temporary file are gone.
  EXPECT_TRUE(stray_files(offload, {}).empty());
  EXPECT_EQ(stray_files(s.dir, {"offload", "hw.yaml", "cli.stdout", "cli.stderr"}),
            std::vector<std::string>{});

  const HardwareProfile hw = find_hardware_profile(yaml.string());
  EXPECT_EQ(hw.name, "this-machine");
  expect_measured(hw);
  EXPECT_LE(hw.disk_mem, static_cast<double>(free_disk_bytes(offload.string())) + (1 << 30));

  // The header says what each number is; the YAML after it is exactly what
  // the profile writes again (the numbers read back unchanged).
  const std::string text = test::slurp(yaml.string());
  for (const char* what :
       {"# Hardware profile of this machine", "machine:", "date:", "commit ",
        "links.disk_to_cpu:", "links.cpu_to_disk:", "links.cpu_to_disk_kv:", "gemm_prefill_tflops:",
        "gemm_decode_tflops:", "attention_prefill_tflops:", "attention_decode_tflops:",
        "mem_bandwidth:", "host->device", "device->host"}) {
    EXPECT_NE(text.find(what), std::string::npos) << what;
  }
  const std::string body = hardware_profile_to_yaml(hw);
  ASSERT_GE(text.size(), body.size());
  EXPECT_EQ(text.substr(text.size() - body.size()), body);

  // `strata policy` plans with it, for a preset shape and for a model on disk.
  for (const std::string& model :
       {std::string("smollm2-135m"), std::string(STRATA_TEST_DATA) + "/models/llama"}) {
    const CliRun p =
        run_strata({"policy", "--model", model, "--hardware", yaml.string(), "--prompt-len", "64",
                    "--gen-len", "8", "--max-block", "64", "--json"},
                   s.dir);
    ASSERT_EQ(p.exit_code, 0) << model << ": " << p.err;
    const nlohmann::json j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["hardware"], "this-machine");
    const double total = j["predicted"]["total_tokens_per_s"].get<double>();
    EXPECT_TRUE(std::isfinite(total) && total > 0) << model << ": " << total;
  }
}

TEST(Profile, WithoutOutputPrintsTheYamlOnStdout) {
  Scratch s("stdout");
  const CliRun r = run_strata({"profile", "--quick", "--offload-dir", s.dir.string(),
                               "--disk-bytes", "64M", "--name", "bench-box"},
                              s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const HardwareProfile hw = parse_hardware_profile(r.out, "stdout of strata profile");
  EXPECT_EQ(hw.name, "bench-box");
  expect_measured(hw);
  EXPECT_NE(r.out.find("sequential reads of 64.0M of a file"), std::string::npos) << r.out;
  // Progress went to stderr, not into the YAML.
  EXPECT_EQ(r.out.find("[info]"), std::string::npos);
  EXPECT_NE(r.err.find("profile:"), std::string::npos);
}

// One line on stderr, "strata: error: ..." containing every `parts`, exit 1.
void expect_one_line_failure(const CliRun& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("strata: error: ", 0), 0u) << r.err;
  for (const std::string& p : parts)
    EXPECT_NE(r.err.find(p), std::string::npos) << p << ": " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_LT(r.seconds, 10) << "bad input must fail before anything is measured";
}

TEST(Profile, UnwritableOffloadDirFailsWithOneLine) {
  Scratch s("readonly");
  const fs::path ro = s.dir / "readonly";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                          fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const CliRun r = run_strata({"profile", "--quick", "--offload-dir", ro.string()}, s.dir,
                              /*as_nobody=*/true);
  if (r.exit_code == 125) GTEST_SKIP() << "running as root and cannot drop to an unprivileged user";
  expect_one_line_failure(r, {ro.string(), "cannot create a file", "--offload-dir"});
  EXPECT_TRUE(fs::is_empty(ro));
}

TEST(Profile, MissingOrFullOffloadDirFailsWithOneLine) {
  Scratch s("missing");
  const fs::path missing = s.dir / "no-such-dir";
  expect_one_line_failure(run_strata({"profile", "--offload-dir", missing.string()}, s.dir),
                          {missing.string(), "no such directory"});
  const fs::path file = s.dir / "a-file";
  std::ofstream(file) << "x";
  expect_one_line_failure(run_strata({"profile", "--offload-dir", file.string()}, s.dir),
                          {file.string(), "not a directory"});
  // More than any disk here has free.
  expect_one_line_failure(
      run_strata({"profile", "--offload-dir", s.dir.string(), "--disk-bytes", "1000000T"}, s.dir),
      {s.dir.string(), "free", "--disk-bytes"});
  expect_one_line_failure(
      run_strata({"profile", "--offload-dir", s.dir.string(), "--disk-bytes", "lots"}, s.dir),
      {"--disk-bytes", "lots"});
  EXPECT_EQ(stray_files(s.dir, {"a-file", "cli.stdout", "cli.stderr"}), std::vector<std::string>{});
}

TEST(Profile, UnwritableOutputFailsBeforeMeasuring) {
  Scratch s("output");
  const fs::path out = s.dir / "no-such-dir" / "hw.yaml";
  expect_one_line_failure(
      run_strata({"profile", "--offload-dir", s.dir.string(), "-o", out.string()}, s.dir),
      {out.string(), "cannot write"});
  expect_one_line_failure(
      run_strata({"profile", "--offload-dir", s.dir.string(), "-o", s.dir.string()}, s.dir),
      {s.dir.string(), "is a directory"});
}

TEST(Profile, PolicyAutoMeasuresAgainAProfileCachedByAnEarlierVersion) {
  Scratch s("cache");
  const fs::path offload = s.dir / "offload";
  fs::create_directories(offload);
  ASSERT_EQ(::setenv("XDG_CACHE_HOME", (s.dir / "cache").c_str(), 1), 0);
  const std::string path = this_machine_profile_path(offload.string());
  EXPECT_EQ(fs::path(path).parent_path(), s.dir / "cache" / "strata");
  EXPECT_NE(
      fs::path(path).filename().string().find(fmt::format("hardware-v{}-", kMachineProfileVersion)),
      std::string::npos)
      << path;
  // An earlier version's profile (readable, without the loads beside
  // compute), cached under that version's name.
  const std::string earlier =
      this_machine_profile_path(offload.string(), kMachineProfileVersion - 1);
  ASSERT_NE(earlier, path);
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(earlier) << "name: stale\ndevice: cpu\nmemory: {cpu: 1G, disk: 16G}\n"
                            "links: {disk_to_cpu: 2G, cpu_to_disk: 1G}\n"
                            "cpu_compute: {gemm_tflops: 1, attention_tflops: 0.1}\n";
  ASSERT_EQ(load_hardware_profile(earlier).name, "stale");
  const HardwareProfile hw = this_machine_profile(offload.string());
  EXPECT_EQ(hw.name, "this-machine");
  expect_measured(hw);
  const HardwareProfile cached = load_hardware_profile(path);
  EXPECT_EQ(cached.name, "this-machine");
  EXPECT_EQ(cached.disk_to_cpu_beside_compute, hw.disk_to_cpu_beside_compute);
  // Now it is read from the cache, not measured again.
  const auto written = fs::last_write_time(path);
  EXPECT_EQ(this_machine_profile(offload.string()).disk_to_cpu_beside_compute,
            hw.disk_to_cpu_beside_compute);
  EXPECT_EQ(fs::last_write_time(path), written);
  EXPECT_TRUE(stray_files(offload, {}).empty());  // the disk measurement's file is gone
}

// The weight-load reads: every size timed once per round (rounds interleaved
// over the sizes), each rate the bytes over the time of all its passes, so
// that it lies between its slowest and fastest pass.
TEST(Profile, WeightReadsAreTimedInInterleavedRounds) {
  Scratch s("stream");
  DiskMeasureOptions o;
  o.file_bytes = uint64_t{32} << 20;
  o.kv_bytes = uint64_t{4} << 20;
  o.repeats = 1;
  o.stream_rounds = 3;
  o.stream_bytes = size_t{8} << 20;
  o.stream_total_bytes = uint64_t{20} << 20;  // two requests of 8M per pass
  o.stream_sizes = {size_t{1} << 20, size_t{4} << 20, size_t{8} << 20};  // 8M: not below
  o.stream_sized_bytes = uint64_t{8} << 20;
  o.kv_read_sizes = {size_t{16} << 10};
  o.kv_read_requests = 64;
  // A load beside each size's pass: running while it reads, and stopped
  // (returned) once it is done.
  std::atomic<int> starts{0}, running{0};
  std::atomic<int64_t> spins{0};
  o.beside = [&](const std::atomic<bool>& stop) {
    ++starts;
    ++running;
    while (!stop) ++spins;
    --running;
  };
  const DiskRates r = measure_disk(s.dir.string(), o);
  EXPECT_EQ(starts, 4 * 3);  // each size in the warm-up round and three timed ones
  EXPECT_EQ(running, 0);
  EXPECT_GT(spins, 0);
  EXPECT_EQ(r.read_stream_beside.n, 3);
  EXPECT_GT(r.read_stream_beside_bytes_per_s(), 0);
  ASSERT_EQ(r.read_stream_sized_beside.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.read_stream_sized_beside[i].n, 3);
    EXPECT_GT(r.read_stream_sized_beside_bytes_per_s(i), 0);
  }
  EXPECT_EQ(r.stream_pass_bytes, uint64_t{16} << 20);
  EXPECT_EQ(r.read_stream.n, 3);
  ASSERT_EQ(r.stream_sizes, (std::vector<size_t>{size_t{1} << 20, size_t{4} << 20}));
  ASSERT_EQ(r.read_stream_sized.size(), 2u);
  std::vector<RunTimes> all = r.read_stream_sized;
  all.push_back(r.read_stream);
  for (const RunTimes& t : all) {
    EXPECT_EQ(t.n, 3);
    EXPECT_GT(t.lo, 0);
    EXPECT_LE(t.lo, t.median);
    EXPECT_LE(t.median, t.hi);
    EXPECT_NEAR(t.wall_s, 3 * t.median, 1e-9 * t.wall_s);  // the mean pass
  }
  EXPECT_GT(r.read_stream_bytes_per_s(), 0);
  EXPECT_TRUE(fs::is_empty(s.dir));  // the scratch file is gone
}

TEST(Profile, CheckOffloadDirNamesTheProblem) {
  Scratch s("check");
  EXPECT_NO_THROW(check_offload_dir(s.dir.string(), 1 << 20));
  EXPECT_TRUE(fs::is_empty(s.dir));  // the probe file is gone
  try {
    check_offload_dir((s.dir / "nope").string(), 1 << 20);
    ADD_FAILURE() << "a missing directory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such directory"), std::string::npos) << e.what();
  }
  const uint64_t free = free_disk_bytes(s.dir.string());
  EXPECT_GT(free, 0u);
  EXPECT_THROW(check_offload_dir(s.dir.string(), free + 1), Error);
}

}  // namespace
}  // namespace strata
