// Injected disk faults (offload/disk_faults.h) through both disk I/O layer
// queues: EIO on a read and on a write, a read cut short, ENOSPC on a write,
// each at the N-th matching request and naming the file and the operation;
// a partial I/O that the engine resubmits transparently; the count and the
// path filter; and the STRATA_DISK_FAULT parser.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "io/file_writers.h"
#include "core/error.h"
#include "offload/disk_io.h"
#include "offload/disk_faults.h"
#include "offload/offload_test_util.h"

namespace strata {
namespace {

namespace ot = offload_test;

struct Disarm {
  ~Disarm() { disarm_disk_fault(); }
};

DiskIoOptions opts(bool io_uring) {
  DiskIoOptions o;
  o.use_io_uring = io_uring;
  o.chunk_bytes = size_t{64} << 10;
  o.queue_depth = 4;
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

class DiskFaultTest : public ::testing::TestWithParam<bool> {
 protected:
  bool uring() const { return GetParam(); }
  void SetUp() override {
    path_ = dir_ / "weights.bin";
    data_ = ot::pattern(kBytes, 7);
    ot::write_file(path_, data_);
  }
  static constexpr size_t kBytes = size_t{256} << 10;
  test_files::TempDir dir_;
  std::string path_;
  std::vector<std::byte> data_;
  Disarm disarm_;
};

TEST_P(DiskFaultTest, IoErrorOnTheNthReadNamesFileAndOperation) {
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(path_, OpenMode::kRead);
  arm_disk_fault({DiskFaultKind::kIoError, DiskFaultOp::kRead, 3, ""});
  std::vector<std::byte> buf(kBytes);
  for (int i = 1; i <= 2; ++i) {
    EXPECT_EQ(error_of([&] { e.read_sync(f, 0, buf.data(), buf.size()); }), "") << i;
    EXPECT_EQ(buf, data_);
  }
  const std::string err = error_of([&] { e.read_sync(f, 4096, buf.data(), 8192); });
  EXPECT_NE(err.find(path_), std::string::npos) << err;
  EXPECT_NE(err.find("read of 8192 bytes at offset 4096"), std::string::npos) << err;
  EXPECT_NE(err.find("Input/output error"), std::string::npos) << err;
  EXPECT_EQ(disk_faults_fired(), 1u);
  // Once fired, later requests succeed again.
  EXPECT_EQ(error_of([&] { e.read_sync(f, 0, buf.data(), buf.size()); }), "");
  EXPECT_EQ(buf, data_);
}

TEST_P(DiskFaultTest, ShortReadIsTheEndOfTheFile) {
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(path_, OpenMode::kRead);
  arm_disk_fault({DiskFaultKind::kShortRead, DiskFaultOp::kRead, 1, ""});
  std::vector<std::byte> buf(kBytes);
  const std::string err = error_of([&] { e.read_sync(f, 0, buf.data(), buf.size()); });
  EXPECT_NE(err.find(path_), std::string::npos) << err;
  EXPECT_NE(err.find("goes past the end of the file"), std::string::npos) << err;
}

TEST_P(DiskFaultTest, PartialIoIsResubmittedAndCorrect) {
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(path_, OpenMode::kReadWrite);
  std::vector<std::byte> buf(kBytes);
  arm_disk_fault({DiskFaultKind::kPartial, DiskFaultOp::kRead, 1, ""});
  e.read_sync(f, 0, buf.data(), buf.size());
  EXPECT_EQ(disk_faults_fired(), 1u);
  EXPECT_EQ(buf, data_);
  // A write cut in two the same way lands whole.
  const std::vector<std::byte> other = ot::pattern(kBytes, 9);
  arm_disk_fault({DiskFaultKind::kPartial, DiskFaultOp::kWrite, 1, ""});
  e.write_sync(f, 0, other.data(), other.size());
  EXPECT_EQ(disk_faults_fired(), 1u);
  EXPECT_EQ(ot::read_file(path_), other);
}

TEST_P(DiskFaultTest, NoSpaceOnAWriteNamesFileAndSaysTheDiskIsFull) {
  DiskIo e(opts(uring()));
  const std::string kv = dir_ / "kv.bin";
  const DiskFile f = DiskFile::open(kv, OpenMode::kCreate);
  arm_disk_fault({DiskFaultKind::kNoSpace, DiskFaultOp::kWrite, 2, "kv.bin"});
  e.write_sync(f, 0, data_.data(), 4096);
  const std::string err = error_of([&] { e.write_sync(f, 4096, data_.data(), 4096); });
  EXPECT_NE(err.find(kv), std::string::npos) << err;
  EXPECT_NE(err.find("write of 4096 bytes at offset 4096"), std::string::npos) << err;
  EXPECT_NE(err.find("the disk is full"), std::string::npos) << err;
}

TEST_P(DiskFaultTest, OnlyMatchingRequestsCount) {
  DiskIo e(opts(uring()));
  const DiskFile f = DiskFile::open(path_, OpenMode::kReadWrite);
  arm_disk_fault({DiskFaultKind::kIoError, DiskFaultOp::kRead, 1, "kv"});  // another file
  std::vector<std::byte> buf(4096);
  for (int i = 0; i < 4; ++i) e.read_sync(f, 0, buf.data(), buf.size());
  arm_disk_fault({DiskFaultKind::kIoError, DiskFaultOp::kWrite, 1, ""});  // another operation
  for (int i = 0; i < 4; ++i) e.read_sync(f, 0, buf.data(), buf.size());
  EXPECT_EQ(disk_faults_fired(), 0u);
  EXPECT_NE(error_of([&] { e.write_sync(f, 0, buf.data(), buf.size()); }), "");
  EXPECT_EQ(disk_faults_fired(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, DiskFaultTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "io_uring" : "threads"; });

TEST(DiskFaultSpec, ParsesEveryField) {
  const DiskFault f = parse_disk_fault("enospc:write:12:kv-", "X");
  EXPECT_EQ(f.kind, DiskFaultKind::kNoSpace);
  EXPECT_EQ(f.op, DiskFaultOp::kWrite);
  EXPECT_EQ(f.nth, 12u);
  EXPECT_EQ(f.path_part, "kv-");
  const DiskFault g = parse_disk_fault("eio:any:1", "X");
  EXPECT_EQ(g.op, DiskFaultOp::kAny);
  EXPECT_EQ(g.path_part, "");
  EXPECT_EQ(parse_disk_fault("short:read:2:/a:b", "X").path_part, "/a:b");
}

TEST(DiskFaultSpec, MalformedSpecsNameTheVariable) {
  for (const char* bad : {"", "eio", "eio:read", "boom:read:1", "eio:seek:1", "eio:read:0",
                          "eio:read:-1", "eio:read:1x", "short:write:1", "enospc:read:1"}) {
    const std::string err = error_of([&] { parse_disk_fault(bad, "STRATA_DISK_FAULT"); });
    EXPECT_NE(err.find("STRATA_DISK_FAULT=" + std::string(bad)), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace strata
