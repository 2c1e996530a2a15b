// Fault injection for the disk I/O layer: tests arm a fault at the N-th request
// that matches (an operation and, optionally, a part of the file's path), and
// the engine's queue (io_uring or threads alike) turns the result of that
// request's first I/O into the fault. What the caller then sees is exactly
// what a real failure gives: an Error from DiskIo::wait naming the file,
// the operation and the offset.
//
// Two ways to arm:
//   arm_disk_fault(...)        in-process, for unit tests;
//   STRATA_DISK_FAULT=SPEC     in the environment, for tests of the strata
//                              executable; read when the first request is made.
// SPEC is KIND:OP:N[:PATH_PART]: KIND eio | short | partial | enospc, OP read |
// write | any, N the 1-based count of matching requests, PATH_PART a substring
// the file's path must contain. `short` makes a read end early, as on a file
// cut short (an error); `partial` returns part of the bytes once, which the
// engine must resubmit transparently (not an error). A malformed SPEC is an
// Error naming the variable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace strata {

enum class DiskFaultKind : uint8_t {
  kIoError,    // the I/O fails with EIO
  kShortRead,  // a read returns part of its bytes, then end of file
  kPartial,    // an I/O moves part of its bytes once; resubmitted, not an error
  kNoSpace,    // a write fails with ENOSPC
};

enum class DiskFaultOp : uint8_t { kRead, kWrite, kAny };

struct DiskFault {
  DiskFaultKind kind = DiskFaultKind::kIoError;
  DiskFaultOp op = DiskFaultOp::kAny;
  uint64_t nth = 1;       // the N-th matching request (1 = the first)
  std::string path_part;  // empty: any file
};

// Parses KIND:OP:N[:PATH_PART]; Error naming `what` and the value when malformed.
DiskFault parse_disk_fault(const std::string& spec, const std::string& what);

// Arms `f` (replacing any armed fault and restarting the count); disarm stops it.
void arm_disk_fault(const DiskFault& f);
void disarm_disk_fault();
// How many requests the armed fault has hit so far (0 or 1).
uint64_t disk_faults_fired();

namespace disk_detail {
// Called by DiskIo for every request: the fault this request carries, if
// it is the armed one's N-th match. Cheap when nothing is armed.
std::optional<DiskFaultKind> take_disk_fault(bool is_read, const std::string& path);
}  // namespace disk_detail

}  // namespace strata
