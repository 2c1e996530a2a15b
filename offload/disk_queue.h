// The request queues behind DiskIo (disk_io.h), internal to the disk I/O
// layer: a request cut into chunks of at most chunk_bytes (aligned for
// O_DIRECT, or through a bounce buffer), their completion, injected faults
// (disk_faults.h) and the statistics, common to both queues; the queues
// themselves are UringQueue (disk_queue_uring.cpp: one thread owns an
// io_uring ring, submits and reaps) and ThreadQueue
// (disk_queue_threads.cpp: pread/pwrite worker threads).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/log.h"
#include "offload/disk_faults.h"
#include "offload/disk_io.h"

namespace strata::disk_detail {

using Clock = std::chrono::steady_clock;

// What to tell a user about errno `e` after the reason ("; the disk is
// full: ..."), empty when there is nothing to add.
std::string io_hint(int e);

struct FileState {
  std::string path;
  bool writable = false;
  int fd_buffered = -1;
  int fd_direct = -1;
  std::atomic<bool> direct_ok{false};
  std::atomic<bool> direct_warned{false};

  ~FileState() {
    if (fd_direct >= 0) ::close(fd_direct);
    if (fd_buffered >= 0) ::close(fd_buffered);
  }

  uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_buffered, &st) != 0) return 0;
    return static_cast<uint64_t>(st.st_size);
  }

  // The filesystem refused a direct I/O: the rest of this file goes buffered.
  void give_up_direct(int e) {
    direct_ok.store(false, std::memory_order_relaxed);
    if (!direct_warned.exchange(true)) {
      spdlog::info("{}: the filesystem refused O_DIRECT I/O ({}); using buffered I/O for this file",
                   path, std::strerror(e));
    }
  }
};

enum class Op : uint8_t { kRead = 0, kWrite = 1 };

struct RequestState {
  Op op = Op::kRead;
  std::shared_ptr<FileState> file;
  uint64_t offset = 0;
  size_t len = 0;
  std::byte* mem = nullptr;
  // An injected fault (disk_faults.h), handed to the first chunk cut.
  std::optional<DiskFaultKind> fault;
  // Cut before every request queued that is not urgent (compute waits for it).
  bool urgent = false;
  std::atomic<uint64_t> bytes_left{0};  // caller bytes not yet finished (done or dropped)
  std::atomic<bool> failed{false};
  std::atomic<bool> done{false};
  std::mutex error_mu;
  std::string error;  // the first failure, written before `failed`

  void fail_with(std::string msg) {
    std::lock_guard lk(error_mu);
    if (error.empty()) error = std::move(msg);
    failed.store(true, std::memory_order_release);
  }
};

// A request still being cut into chunks: `pos` bytes of it are cut.
struct Pending {
  std::shared_ptr<RequestState> req;
  uint64_t pos = 0;
};

// Queues `r` in `pending`: after the urgent requests queued before it when
// it is urgent (ahead of the others, the one being cut included), else last.
void queue_pending(std::deque<Pending>& pending, std::shared_ptr<RequestState> r);

// One I/O: the caller's part [offset, offset + len) at `mem`, and the I/O
// that moves it: io_len bytes at io_offset through io_mem (the caller's
// memory, or a bounce buffer covering whole pages around the part).
struct Chunk {
  std::shared_ptr<RequestState> req;
  uint64_t offset = 0;
  size_t len = 0;
  std::byte* mem = nullptr;
  bool bounce = false;
  bool direct = false;  // through the O_DIRECT descriptor
  uint64_t io_offset = 0;
  size_t io_len = 0;
  // Bytes the I/O must move: a bounced read may stop at the end of the file
  // once the caller's part is in.
  size_t io_need = 0;
  size_t io_done = 0;
  std::byte* io_mem = nullptr;
  std::optional<DiskFaultKind> fault;  // injected into this chunk's I/O results
  bool fault_started = false;          // a short read has returned its part
};

enum class Step { kDone, kResubmit, kFailed };

// The queue behind a DiskIo: io_uring or threads. Owns the cutting of
// requests into chunks, their completion, and the statistics.
class Queue {
 public:
  explicit Queue(const DiskIoOptions& o) : opt_(o) {}
  virtual ~Queue() = default;
  virtual void push(std::shared_ptr<RequestState> r) = 0;
  virtual const char* name() const = 0;
  virtual bool buffers_registered() const { return false; }

  DiskStats stats() const;

  void reset_stats();

  void count_request() { n_requests_.fetch_add(1, std::memory_order_relaxed); }

 protected:
  // Cuts the next chunk of `p` into `c` (bounce: a buffer of chunk_bytes for
  // this chunk). False when nothing is left to cut: the request is fully cut,
  // or it failed and its uncut rest was dropped.
  bool cut_next(Pending& p, Chunk& c, std::byte* bounce);

  static void plan_plain(Chunk& c, bool direct);

  // Before the first I/O of a chunk: a bounced write copies its data in.
  static void before_first_io(Chunk& c) {
    if (c.bounce && c.req->op == Op::kWrite) std::memcpy(c.io_mem, c.mem, c.len);
  }

  // The I/O of `c` as it stands: descriptor, memory, length, file offset.
  static int io_fd(const Chunk& c) {
    return c.direct ? c.req->file->fd_direct : c.req->file->fd_buffered;
  }
  static std::byte* io_addr(const Chunk& c) { return c.io_mem + c.io_done; }
  static size_t io_left(const Chunk& c) { return c.io_len - c.io_done; }
  static uint64_t io_pos(const Chunk& c) { return c.io_offset + c.io_done; }

  // What to do after an I/O of `c` moved `res` bytes (or failed with -errno).
  Step after_io(Chunk& c, int64_t res);

  // The result an injected fault makes of `res` (disk_faults.h). A shortened
  // direct I/O stays a multiple of the page size, which the engine would
  // otherwise take for the end of the file.
  static int64_t inject(Chunk& c, int64_t res);

  // A chunk is over (ok: its bytes moved).
  void finish_chunk(Chunk& c, bool ok);

  void finish_bytes(const std::shared_ptr<RequestState>& req, uint64_t n);

  void io_started() {
    std::lock_guard lk(busy_mu_);
    if (in_flight_++ == 0) busy_since_ = Clock::now();
  }
  void io_ended();

  DiskIoOptions opt_;

 private:
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0}, n_requests_{0}, n_chunks_{0},
      n_bounced_{0}, n_buffered_{0};
  mutable std::mutex busy_mu_;
  int64_t in_flight_ = 0;
  int64_t busy_ns_ = 0;
  Clock::time_point busy_since_ = Clock::now();
};

// The io_uring queue with its ring thread started; null (and `why`) when
// the ring cannot be set up.
std::unique_ptr<Queue> make_uring_queue(const DiskIoOptions& o, std::string* why);
// The pread/pwrite queue and the number of threads it runs.
std::unique_ptr<Queue> make_thread_queue(const DiskIoOptions& o);
int thread_queue_threads(const DiskIoOptions& o);

}  // namespace strata::disk_detail
