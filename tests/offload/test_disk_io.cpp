// The disk I/O layer against an oracle (plain file reads and writes): round
// trips at odd sizes, offsets and buffer addresses, many requests in flight,
// both the io_uring queue and the pread/pwrite fallback, and the error paths
// (past the end of a file, read-only file, unwritable directory, file size
// limit, full filesystem).
#include <gtest/gtest.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "core/error.h"
#include "io/file_writers.h"
#include "offload/disk_io.h"
#include "offload/disk_queue.h"
#include "offload/offload_test_util.h"

namespace strata {
namespace {

using offload_test::pattern;
using offload_test::read_file;
using offload_test::write_file;
using test_files::TempDir;

DiskIoOptions opts(bool io_uring, size_t chunk = size_t{1} << 20, int depth = 8) {
  DiskIoOptions o;
  o.use_io_uring = io_uring;
  o.chunk_bytes = chunk;
  o.queue_depth = depth;
  return o;
}

// Expects `f` to throw an Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

class DiskIoTest : public ::testing::TestWithParam<bool> {
 protected:
  bool uring() const { return GetParam(); }
};

TEST_P(DiskIoTest, UsesTheRequestedBackend) {
  DiskIo e(opts(uring()));
  if (uring() && std::string(e.backend_name()) != "io_uring")
    GTEST_SKIP() << "io_uring unavailable here";
  EXPECT_STREQ(e.backend_name(), uring() ? "io_uring" : "threads");
}

TEST_P(DiskIoTest, RoundTripOddSizesOffsetsAndAddresses) {
  TempDir dir;
  const std::string path = dir / "f.bin";
  constexpr size_t kFile = size_t{4} << 20;
  std::vector<std::byte> expected = pattern(kFile, 1);
  write_file(path, expected);
  DiskIo e(opts(uring(), size_t{64} << 10, 8));
  const DiskFile f = DiskFile::open(path, OpenMode::kReadWrite);
  const size_t sizes[] = {1, 4095, 4096, 4097, (size_t{1} << 20) + 3, 65536 * 3 + 17};
  const uint64_t offsets[] = {0, 1, 4095, 4096, 4097, 65536 - 5, (uint64_t{1} << 20) + 123};
  const size_t misalign[] = {0, 1, 3};
  constexpr size_t kGuard = 4096;
  uint32_t seed = 2;
  for (size_t n : sizes) {
    for (uint64_t off : offsets) {
      for (size_t mis : misalign) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " off=" << off << " mis=" << mis);
        const std::vector<std::byte> data = pattern(n, seed++);
        AlignedBuffer src(n + kGuard);
        std::memcpy(src.data() + mis, data.data(), n);
        e.write_sync(f, off, src.data() + mis, n);
        std::copy(data.begin(), data.end(), expected.begin() + off);

        AlignedBuffer dst(n + 3 * kGuard);
        std::memset(dst.data(), 0xAB, dst.size());
        std::byte* p = dst.data() + kGuard + mis;
        e.read_sync(f, off, p, n);
        ASSERT_EQ(std::memcmp(p, data.data(), n), 0);
        for (std::byte* g = dst.data(); g < p; ++g) ASSERT_EQ(*g, std::byte{0xAB});
        for (std::byte* g = p + n; g < dst.data() + dst.size(); ++g) ASSERT_EQ(*g, std::byte{0xAB});
      }
    }
  }
  EXPECT_EQ(f.size(), kFile);
  const std::vector<std::byte> on_disk = read_file(path);
  ASSERT_EQ(on_disk.size(), expected.size());
  EXPECT_TRUE(on_disk == expected) << "file differs from the oracle";
}

TEST_P(DiskIoTest, WritesExtendANewFileAndTailsReadBack) {
  TempDir dir;
  DiskIo e(opts(uring()));
  for (size_t n : {size_t{1}, size_t{4095}, size_t{4097}, (size_t{1} << 20) + 3}) {
    const std::string path = dir / ("new-" + std::to_string(n));
    const DiskFile f = DiskFile::open(path, OpenMode::kCreate);
    const std::vector<std::byte> data = pattern(n, static_cast<uint32_t>(n));
    e.write_sync(f, 0, data.data(), n);
    EXPECT_EQ(f.size(), n);
    EXPECT_TRUE(read_file(path) == data);
    std::vector<std::byte> back(n);
    e.read_sync(f, 0, back.data(), n);
    EXPECT_TRUE(back == data);
    // The last byte alone, through a partial page at the end of the file.
    std::byte last{};
    e.read_sync(f, n - 1, &last, 1);
    EXPECT_EQ(last, data[n - 1]);
  }
}

TEST_P(DiskIoTest, ManyConcurrentRequests) {
  TempDir dir;
  const std::string path = dir / "many.bin";
  DiskIo e(opts(uring(), size_t{128} << 10, 4));
  const DiskFile f = DiskFile::open(path, OpenMode::kCreate);
  // 300 disjoint segments of random length at random gaps.
  std::mt19937 rng(7);
  struct Seg {
    uint64_t off;
    size_t n;
    std::vector<std::byte> data;
  };
  std::vector<Seg> segs;
  uint64_t pos = 0;
  for (int i = 0; i < 300; ++i) {
    pos += rng() % 5000;
    const size_t n = 1 + rng() % 70000;
    segs.push_back({pos, n, pattern(n, 1000 + i)});
    pos += n;
  }
  std::vector<Ticket> t;
  for (const auto& s : segs) t.push_back(e.write(f, s.off, s.data.data(), s.n));
  for (size_t i = t.size(); i-- > 0;) e.wait(t[i]);
  for (const auto& x : t) EXPECT_TRUE(e.poll(x));

  // Reads from four threads at once, each waiting for its own tickets.
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      std::vector<std::vector<std::byte>> bufs;
      std::vector<Ticket> mine;
      std::vector<size_t> idx;
      for (size_t i = th; i < segs.size(); i += 4) {
        bufs.emplace_back(segs[i].n);
        idx.push_back(i);
      }
      for (size_t k = 0; k < idx.size(); ++k)
        mine.push_back(e.read(f, segs[idx[k]].off, bufs[k].data(), segs[idx[k]].n));
      for (size_t k = 0; k < idx.size(); ++k) {
        e.wait(mine[k]);
        if (bufs[k] != segs[idx[k]].data) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);

  // One request of many more chunks than the queue depth.
  const std::vector<std::byte> big = read_file(path);
  std::vector<std::byte> back(big.size());
  e.read_sync(f, 0, back.data(), back.size());
  EXPECT_TRUE(back == big);
}

// An urgent read (one compute waits for) is cut before the requests queued
// ahead of it that are not under way: with one chunk in flight and a
// backlog of 32 MiB in 4 KiB chunks, it is done, with its bytes, while the
// last of the backlog is not.
TEST_P(DiskIoTest, UrgentReadsOvertakeTheBacklog) {
  TempDir dir;
  const std::string path = dir / "urgent.bin";
  const size_t n = size_t{1} << 20;
  write_file(path, pattern(8 * n, 3));
  const std::vector<std::byte> want = read_file(path);
  DiskIo e(opts(uring(), 4096, 1));
  const DiskFile f = DiskFile::open(path, OpenMode::kRead);
  std::vector<std::vector<std::byte>> backlog(32, std::vector<std::byte>(n));
  std::vector<Ticket> t;
  for (size_t i = 0; i < backlog.size(); ++i) {
    t.push_back(e.read(f, (i % 8) * n, backlog[i].data(), n));
  }
  std::vector<std::byte> got(3 * 4096 + 5);
  const uint64_t at = 5 * n + 123;
  e.wait(e.read(f, at, got.data(), got.size(), /*urgent=*/true));
  EXPECT_FALSE(e.poll(t.back()));
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + static_cast<ptrdiff_t>(at)));
  for (const Ticket& x : t) e.wait(x);
  for (size_t i = 0; i < backlog.size(); ++i) {
    EXPECT_TRUE(std::equal(backlog[i].begin(), backlog[i].end(),
                           want.begin() + static_cast<ptrdiff_t>((i % 8) * n)))
        << i;
  }
}

TEST_P(DiskIoTest, ReadPastTheEndIsAnError) {
  TempDir dir;
  const std::string path = dir / "short.bin";
  const std::vector<std::byte> data = pattern(10000, 3);
  write_file(path, data);
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(path, OpenMode::kRead);
  std::vector<std::byte> buf(20000);
  expect_error([&] { e.read_sync(f, 0, buf.data(), 20000); },
               {path, "past the end", "10000 bytes"});
  expect_error([&] { e.read_sync(f, 9999, buf.data(), 2); }, {path, "offset 9999"});
  expect_error([&] { e.read_sync(f, 16384, buf.data(), 4096); }, {path, "past the end"});
  expect_error([&] { e.read_sync(f, 8192, buf.data(), 8192); }, {path, "past the end"});
  // Up to the last byte is fine.
  e.read_sync(f, 9000, buf.data(), 1000);
  EXPECT_EQ(std::memcmp(buf.data(), data.data() + 9000, 1000), 0);
  // The engine is still usable after errors.
  e.read_sync(f, 0, buf.data(), 10000);
  EXPECT_EQ(std::memcmp(buf.data(), data.data(), 10000), 0);
}

TEST_P(DiskIoTest, WriteToAReadOnlyFileIsAnError) {
  TempDir dir;
  const std::string path = dir / "ro.bin";
  write_file(path, pattern(8192, 4));
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(path, OpenMode::kRead);
  const std::vector<std::byte> data = pattern(8192, 5);
  expect_error([&] { e.write_sync(f, 0, data.data(), 8192); },
               {path, "write of 8192 bytes at offset 0"});
}

TEST_P(DiskIoTest, FileSizeLimitMakesWritesFail) {
  TempDir dir;
  const std::string path = dir / "big.bin";
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(path, OpenMode::kCreate);
  const std::vector<std::byte> data = pattern(size_t{3} << 20, 6);
  {
    offload_test::FileSizeLimit limit(size_t{1} << 20);
    ASSERT_TRUE(limit.ok());
    expect_error([&] { e.write_sync(f, 0, data.data(), data.size()); }, {path, "File too large"});
    expect_error([&] { f.allocate(data.size()); }, {path, "cannot reserve"});
  }
  // Below the limit again, the same engine and file work.
  e.write_sync(f, 0, data.data(), data.size());
  EXPECT_TRUE(read_file(path) == data);
}

TEST_P(DiskIoTest, FullFilesystemIsAnError) {
  TempDir dir;
  const std::string mnt = dir / "mnt";
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno)
                 << "); FileSizeLimitMakesWritesFail covers the write error path";
  }
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string path = mnt + "/full.bin";
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(path, OpenMode::kCreate);
  const std::vector<std::byte> data = pattern(size_t{3} << 20, 7);
  expect_error([&] { e.write_sync(f, 0, data.data(), data.size()); },
               {path, "No space left", "disk is full"});
  expect_error([&] { f.allocate(size_t{8} << 20); }, {path, "No space left"});
}

TEST_P(DiskIoTest, StatisticsCountBytesAndBusyTime) {
  TempDir dir;
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(dir / "s.bin", OpenMode::kCreate);
  const std::vector<std::byte> data = pattern((size_t{2} << 20) + 5, 8);
  e.write_sync(f, 0, data.data(), data.size());
  std::vector<std::byte> back(data.size());
  e.read_sync(f, 0, back.data(), back.size());
  e.read_sync(f, 7, back.data(), 100);
  const DiskStats s = e.stats();
  EXPECT_EQ(s.bytes_written, data.size());
  EXPECT_EQ(s.bytes_read, data.size() + 100);
  EXPECT_EQ(s.n_requests, 3u);
  EXPECT_GE(s.n_chunks, 5u);
  EXPECT_GE(s.n_bounced + s.n_buffered, 2u);  // the tail page of the write, the unaligned read
  EXPECT_GT(s.busy_s, 0);
  e.reset_stats();
  EXPECT_EQ(e.stats().bytes_read, 0u);
  EXPECT_EQ(e.stats().busy_s, 0);
}

TEST_P(DiskIoTest, PollAndEmptyRequests) {
  TempDir dir;
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(dir / "p.bin", OpenMode::kCreate);
  EXPECT_TRUE(e.poll(Ticket()));
  e.wait(Ticket());
  const Ticket z = e.write(f, 0, nullptr, 0);
  EXPECT_TRUE(e.poll(z));
  const std::vector<std::byte> data = pattern(size_t{1} << 20, 9);
  const Ticket t = e.write(f, 0, data.data(), data.size());
  e.wait(t);
  EXPECT_TRUE(e.poll(t));
  e.wait(t);  // waiting twice is fine
}

TEST_P(DiskIoTest, BufferedFilesRoundTrip) {
  TempDir dir;
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(dir / "b.bin", OpenMode::kCreate, /*direct=*/false);
  EXPECT_FALSE(f.direct());
  const std::vector<std::byte> data = pattern((size_t{1} << 20) + 4097, 10);
  e.write_sync(f, 5, data.data(), data.size());
  std::vector<std::byte> back(data.size());
  e.read_sync(f, 5, back.data(), back.size());
  EXPECT_TRUE(back == data);
  EXPECT_EQ(e.stats().n_bounced, 0u);
}

TEST_P(DiskIoTest, FixedBuffersRoundTrip) {
  TempDir dir;
  AlignedBuffer staging(size_t{4} << 20);
  DiskIoOptions o = opts(uring(), size_t{256} << 10, 8);
  o.fixed_buffers = {staging.bytes()};
  DiskIo e(o);
  if (uring() && std::string(e.backend_name()) == "io_uring") {
    EXPECT_TRUE(e.buffers_registered()) << "registration failed (see the log)";
  }
  const DiskFile f = DiskFile::open(dir / "fx.bin", OpenMode::kCreate);
  const std::vector<std::byte> data = pattern(staging.size(), 11);
  std::memcpy(staging.data(), data.data(), data.size());
  e.write_sync(f, 0, staging.data(), staging.size());
  std::memset(staging.data(), 0, staging.size());
  e.read_sync(f, 0, staging.data(), staging.size());
  EXPECT_EQ(std::memcmp(staging.data(), data.data(), data.size()), 0);
  e.read_sync(f, 4096 + 3, staging.data() + 1, 100000);  // bounced, into registered memory
  EXPECT_EQ(std::memcmp(staging.data() + 1, data.data() + 4096 + 3, 100000), 0);
}

TEST_P(DiskIoTest, DestructionWaitsForRequestsInFlight) {
  TempDir dir;
  const std::string path = dir / "d.bin";
  const std::vector<std::byte> data = pattern(size_t{6} << 20, 12);
  {
    DiskIo e(opts(uring(), size_t{256} << 10, 2));
    const DiskFile f = DiskFile::open(path, OpenMode::kCreate);
    for (size_t off = 0; off < data.size(); off += size_t{1} << 20) {
      e.write(f, off, data.data() + off, size_t{1} << 20);  // never waited
    }
  }
  EXPECT_TRUE(read_file(path) == data);
}

TEST_P(DiskIoTest, MeasuresBandwidthAndRemovesItsFile) {
  TempDir dir;
  const DiskBandwidth b =
      measure_disk_bandwidth(dir.path().string(), size_t{8} << 20, size_t{1} << 20, 4, uring());
  EXPECT_EQ(b.file_bytes, size_t{8} << 20);
  EXPECT_GT(b.read_bytes_per_s, 0);
  EXPECT_GT(b.write_bytes_per_s, 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

INSTANTIATE_TEST_SUITE_P(Backends, DiskIoTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "io_uring" : "threads"; });

TEST(DiskIo, EnvironmentVariableSelectsTheFallback) {
  ::setenv("STRATA_DISABLE_IO_URING", "1", 1);
  DiskIo e;
  ::unsetenv("STRATA_DISABLE_IO_URING");
  EXPECT_STREQ(e.backend_name(), "threads");
  TempDir dir;
  const DiskFile f = DiskFile::open(dir / "env.bin", OpenMode::kCreate);
  const std::vector<std::byte> data = pattern(12345, 13);
  e.write_sync(f, 0, data.data(), data.size());
  std::vector<std::byte> back(data.size());
  e.read_sync(f, 0, back.data(), back.size());
  EXPECT_TRUE(back == data);
}

// In a child process where io_uring_setup fails (a seccomp filter, as in
// containers that forbid io_uring): the engine falls back to threads.
TEST(DiskIo, FallsBackWhenTheRingCannotBeSetUp) {
  TempDir dir;
  const std::string path = dir / "seccomp.bin";
  const pid_t pid = ::fork();
  if (pid == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      ::_exit(3);
    }
    try {
      DiskIo e;
      if (std::string(e.backend_name()) != "threads") ::_exit(1);
      const DiskFile f = DiskFile::open(path, OpenMode::kCreate);
      const std::vector<std::byte> data = pattern(100000, 14);
      e.write_sync(f, 3, data.data(), data.size());
      std::vector<std::byte> back(data.size());
      e.read_sync(f, 3, back.data(), back.size());
      ::_exit(back == data ? 0 : 2);
    } catch (...) {
      ::_exit(4);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "cannot install a seccomp filter here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: not the fallback, 2: data differ, 4: an Error";
}

// Urgent requests go after the urgent ones queued before them and ahead of
// every other, the one being cut included; the others go last.
TEST(DiskQueue, UrgentRequestsQueueAheadOfTheOthers) {
  auto req = [](bool urgent) {
    auto r = std::make_shared<disk_detail::RequestState>();
    r->urgent = urgent;
    return r;
  };
  std::deque<disk_detail::Pending> q;
  const auto a = req(false), b = req(false), u1 = req(true), u2 = req(true), c = req(false);
  disk_detail::queue_pending(q, a);
  q.front().pos = 4096;  // being cut
  disk_detail::queue_pending(q, b);
  disk_detail::queue_pending(q, u1);
  disk_detail::queue_pending(q, u2);
  disk_detail::queue_pending(q, c);
  std::vector<disk_detail::RequestState*> order;
  for (const auto& p : q) order.push_back(p.req.get());
  EXPECT_EQ(order, (std::vector<disk_detail::RequestState*>{u1.get(), u2.get(), a.get(), b.get(),
                                                            c.get()}));
  EXPECT_EQ(q[2].pos, 4096u);  // a keeps what it cut
}

TEST(DiskIo, BadOptionsAreErrors) {
  DiskIoOptions o;
  o.chunk_bytes = 1000;
  expect_error([&] { DiskIo e(o); }, {"chunk size 1000"});
  o = DiskIoOptions{};
  o.queue_depth = 0;
  expect_error([&] { DiskIo e(o); }, {"queue depth 0"});
}

TEST(DiskFile, OpenErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir / "missing.bin";
  expect_error([&] { DiskFile::open(missing, OpenMode::kRead); }, {missing, "no such file"});
  expect_error([&] { DiskFile::open(dir / "no/such/dir/f.bin", OpenMode::kCreate); },
               {"does not exist"});
  expect_error([&] { DiskFile::open(dir.path().string(), OpenMode::kRead); },
               {dir.path().string(), "not a regular file"});
  expect_error([&] { DiskFile::open(dir.path().string(), OpenMode::kCreate); }, {"is a directory"});
}

TEST(DiskFile, UnwritableDirectoryIsAnError) {
  TempDir dir;
  const std::filesystem::path ro = dir.path() / "ro";
  std::filesystem::create_directories(ro);
  ::chmod(ro.c_str(), 0555);
  {
    offload_test::NoPermissionOverride guard;
    if (!offload_test::dir_is_unwritable(ro)) {
      ::chmod(ro.c_str(), 0755);
      GTEST_SKIP() << "cannot make a directory unwritable for this process";
    }
    const std::string path = (ro / "f.bin").string();
    expect_error([&] { DiskFile::open(path, OpenMode::kCreate); }, {path, "permission denied"});
  }
  ::chmod(ro.c_str(), 0755);
}

}  // namespace
}  // namespace strata
