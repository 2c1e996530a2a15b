// Transfer queues and copy(dst, src) (offload/transfer.h): bytes land where
// they should over every host-reachable pair, queue numbers order the
// caller's waits, spans and links are accounted, a failure comes back as an
// Error from the next wait, and the trace is valid Chrome JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "offload/aligned_buffer.h"
#include "offload/disk_io.h"
#include "offload/trace.h"
#include "offload/transfer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("strata-transfer-" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::byte> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

TEST(Transfer, CopiesBetweenRamAndDiskInQueueOrder) {
  TempDir dir;
  CpuBackend backend(1);
  DiskIo disk;
  auto trace = std::make_shared<Trace>();
  Mover mover(backend, &disk);
  TransferQueue loads("load", trace.get()), stores("store", trace.get());
  const DiskFile f = DiskFile::open((dir.path / "x.bin").string(), OpenMode::kCreate);

  // Odd sizes and offsets: the disk I/O layer bounces what O_DIRECT cannot take.
  const std::vector<std::pair<uint64_t, size_t>> pieces = {
      {0, 8192}, {8192, 3000}, {12288, 1}, {20000, 70001}, {100000, 4096}};
  std::vector<std::vector<std::byte>> src;
  uint64_t last = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    src.push_back(random_bytes(pieces[i].second, static_cast<uint32_t>(i)));
    last = mover.copy(Place::disk(f, pieces[i].first), Place::memory(Tier::kCpu, src[i].data()),
                      src[i].size(), stores, {"piece", "kv", 0});
    EXPECT_EQ(last, i + 1);
  }
  stores.wait(last);
  EXPECT_TRUE(stores.done(last));
  EXPECT_EQ(stores.n_done(), pieces.size());
  // Read back into device memory (host memory on the CPU device: gpu is RAM).
  AlignedBuffer back(200000);
  uint64_t n = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    n = mover.copy(Place::memory(Tier::kGpu, back.data() + pieces[i].first),
                   Place::disk(f, pieces[i].first), pieces[i].second, loads, {"piece", "kv", 1});
  }
  loads.wait(n);
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(std::memcmp(back.data() + pieces[i].first, src[i].data(), src[i].size()), 0) << i;
  }
  // RAM to RAM.
  std::vector<std::byte> copy(src[3].size());
  stores.wait(mover.copy(Place::memory(Tier::kCpu, copy.data()),
                         Place::memory(Tier::kGpu, src[3].data()), copy.size(), stores,
                         {"ram", "activations", 2}));
  EXPECT_EQ(copy, src[3]);

  // Accounting: links named as the CPU device sees them, spans that do not
  // overlap on one queue, busy time = sum of spans.
  uint64_t written = 0;
  for (const auto& p : pieces) written += p.second;
  const auto sl = stores.links();
  ASSERT_TRUE(sl.count("cpu->disk"));
  EXPECT_EQ(sl.at("cpu->disk").bytes, written);
  EXPECT_EQ(sl.at("cpu->cpu").bytes, copy.size());
  EXPECT_EQ(loads.links().at("disk->cpu").bytes, written);
  // The same by what moved (the labels' kinds).
  ASSERT_EQ(sl.at("cpu->disk").by_kind.size(), 1u);
  EXPECT_EQ(sl.at("cpu->disk").by_kind.at("kv").bytes, written);
  EXPECT_DOUBLE_EQ(sl.at("cpu->disk").by_kind.at("kv").busy_s, sl.at("cpu->disk").busy_s);
  EXPECT_EQ(sl.at("cpu->cpu").by_kind.at("activations").bytes, copy.size());
  EXPECT_EQ(mover.link_name(Tier::kDisk, Tier::kGpu), "disk->cpu");
  double sum = 0, end = -1;
  for (const Trace::Span& s : trace->spans()) {
    if (s.queue != "load") continue;
    EXPECT_GE(s.start_us + 1e-6, end) << "load spans overlap";
    end = s.start_us + s.dur_us;
    sum += s.dur_us;
  }
  EXPECT_NEAR(sum * 1e-6, loads.busy_s(), 1e-9);
  EXPECT_EQ(trace->size(), 2 * pieces.size() + 1);
}

TEST(Transfer, AFailureComesBackFromTheNextWait) {
  TempDir dir;
  CpuBackend backend(1);
  DiskIo disk;
  Mover mover(backend, &disk);
  TransferQueue loads("load", nullptr);
  const DiskFile f = DiskFile::open((dir.path / "short.bin").string(), OpenMode::kCreate);
  std::vector<std::byte> one(4096);
  disk.write_sync(f, 0, one.data(), one.size());
  AlignedBuffer buf(1 << 16);
  // Reading past the end of the file fails; a later good read still runs.
  const uint64_t bad = mover.copy(Place::memory(Tier::kCpu, buf.data()), Place::disk(f, 0), 1 << 16,
                                  loads, {"bad", "weights", 0});
  const uint64_t good = mover.copy(Place::memory(Tier::kCpu, buf.data()), Place::disk(f, 0), 4096,
                                   loads, {"good", "weights", 0});
  try {
    loads.wait(bad);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short.bin"), std::string::npos) << e.what();
  }
  EXPECT_THROW(loads.wait(good), Error);  // the queue keeps its first failure
  EXPECT_TRUE(loads.done(good));
}

TEST(Trace, IsChromeTraceJsonWithOneThreadPerQueue) {
  Trace t;
  t.add({"layer 0 k=0", "compute", "compute", 10, 5, 0, 0});
  t.add({"weights blk.1", "load", "weights", 8, 7, 1 << 20, 0});
  t.add({"kv layer 0 k=0", "store", "kv", 16, 2, 4096, 0});
  const auto j = nlohmann::json::parse(t.to_json());
  ASSERT_TRUE(j.contains("traceEvents"));
  std::map<std::string, int> tid_of;
  int n_x = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") {
      EXPECT_EQ(e["name"], "thread_name");
      tid_of[e["args"]["name"].get<std::string>()] = e["tid"].get<int>();
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    ++n_x;
    EXPECT_TRUE(e.contains("ts") && e.contains("dur") && e.contains("pid") && e.contains("tid"));
  }
  EXPECT_EQ(n_x, 3);
  EXPECT_EQ(tid_of.size(), 3u);
  EXPECT_NE(tid_of["compute"], tid_of["load"]);
  EXPECT_NE(tid_of["load"], tid_of["store"]);
}

}  // namespace
}  // namespace strata
