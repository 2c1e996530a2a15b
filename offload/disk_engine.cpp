// The disk engine: requests cut into chunks (disk_detail::Queue), served by
// one io_uring ring thread (UringQueue) or by pread/pwrite threads
// (ThreadQueue); DiskFile descriptors; the bandwidth measurement.
#include "offload/disk_engine.h"

#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "offload/disk_faults.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(int e) {
  return std::strerror(e);
}

// Why a file could not be opened, with what to do about it.
std::string open_error(const std::string& path, int e, OpenMode mode) {
  const bool writing = mode != OpenMode::kRead;
  switch (e) {
    case ENOENT:
      return writing ? fmt::format("{}: cannot create the file: its directory does not exist", path)
                     : fmt::format("{}: no such file", path);
    case EACCES:
    case EPERM:
      return writing
                 ? fmt::format("{}: permission denied; choose a directory you can write to", path)
                 : fmt::format("{}: permission denied; check the file's permissions", path);
    case EISDIR:
      return fmt::format("{}: is a directory, not a file", path);
    case ENOTDIR:
      return fmt::format("{}: a component of the path is not a directory", path);
    case EROFS:
      return fmt::format("{}: the filesystem is read-only; choose another directory", path);
    case ENOSPC:
      return fmt::format("{}: no space left on the device; free space or choose another directory",
                         path);
    default:
      return fmt::format("{}: cannot open: {}", path, errno_text(e));
  }
}

std::string io_hint(int e) {
  switch (e) {
    case ENOSPC:
      return "; the disk is full: free space or choose another directory";
    case EDQUOT:
      return "; the disk quota is exhausted: free space or choose another directory";
    case EFBIG:
      return "; the file size limit (ulimit -f) or the filesystem's largest file size was reached";
    case EIO:
      return "; the device reported an I/O error: check the disk";
    case EROFS:
      return "; the filesystem is read-only: choose another directory";
    default:
      return "";
  }
}

// A file size limit (ulimit -f) kills a process that writes past it with
// SIGXFSZ unless the signal is ignored; ignored, the write fails with EFBIG and
// becomes an Error naming the file. Done once, and only where nobody installed
// a handler.
void ignore_file_size_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGXFSZ, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
      ::signal(SIGXFSZ, SIG_IGN);
  });
}

}  // namespace

namespace disk_detail {

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
                   path, errno_text(e));
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

// The queue behind a DiskEngine: io_uring or threads. Owns the cutting of
// requests into chunks, their completion, and the statistics.
class Queue {
 public:
  explicit Queue(const DiskEngineOptions& o) : opt_(o) {}
  virtual ~Queue() = default;
  virtual void push(std::shared_ptr<RequestState> r) = 0;
  virtual const char* name() const = 0;
  virtual bool buffers_registered() const { return false; }

  DiskStats stats() const {
    DiskStats s;
    s.bytes_read = bytes_read_.load();
    s.bytes_written = bytes_written_.load();
    s.n_requests = n_requests_.load();
    s.n_chunks = n_chunks_.load();
    s.n_bounced = n_bounced_.load();
    s.n_buffered = n_buffered_.load();
    std::lock_guard lk(busy_mu_);
    int64_t ns = busy_ns_;
    if (in_flight_ > 0)
      ns +=
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - busy_since_).count();
    s.busy_s = ns * 1e-9;
    return s;
  }

  void reset_stats() {
    bytes_read_ = bytes_written_ = n_requests_ = n_chunks_ = n_bounced_ = n_buffered_ = 0;
    std::lock_guard lk(busy_mu_);
    busy_ns_ = 0;
    busy_since_ = Clock::now();
  }

  void count_request() { n_requests_.fetch_add(1, std::memory_order_relaxed); }

 protected:
  // Cuts the next chunk of `p` into `c` (bounce: a buffer of chunk_bytes for
  // this chunk). False when nothing is left to cut: the request is fully cut,
  // or it failed and its uncut rest was dropped.
  bool cut_next(Pending& p, Chunk& c, std::byte* bounce) {
    RequestState& r = *p.req;
    if (p.pos == r.len) return false;
    if (r.failed.load(std::memory_order_acquire)) {
      finish_bytes(p.req, r.len - p.pos);
      p.pos = r.len;
      return false;
    }
    const bool direct = r.file->direct_ok.load(std::memory_order_relaxed);
    const uint64_t start = r.offset + p.pos, end = r.offset + r.len;
    uint64_t n;
    if (!direct) {
      n = std::min<uint64_t>(end - start, opt_.chunk_bytes);
    } else if (start % kDiskAlign != 0) {
      n = std::min(end, align_up(start, kDiskAlign)) - start;  // unaligned head
    } else if (align_down(end, kDiskAlign) <= start) {
      n = end - start;  // partial tail page
    } else {
      const uint64_t grid = align_down(start, opt_.chunk_bytes) + opt_.chunk_bytes;
      n = std::min(grid, align_down(end, kDiskAlign)) - start;
    }
    c = Chunk{};
    c.req = p.req;
    c.offset = start;
    c.len = n;
    c.mem = r.mem + p.pos;
    c.fault = std::exchange(r.fault, std::nullopt);
    p.pos += n;
    const bool aligned = start % kDiskAlign == 0 && n % kDiskAlign == 0;
    if (!direct) {
      plan_plain(c, false);
    } else if (aligned && is_aligned(c.mem, kDiskAlign)) {
      plan_plain(c, true);
    } else if (r.op == Op::kRead || aligned) {
      // Whole pages around the part, through the bounce buffer.
      c.bounce = true;
      c.direct = true;
      c.io_offset = align_down(start, kDiskAlign);
      c.io_len = align_up(start + n, kDiskAlign) - c.io_offset;
      c.io_need = r.op == Op::kRead ? start + n - c.io_offset : c.io_len;
      c.io_mem = bounce;
      STRATA_ASSERT(c.io_len <= opt_.chunk_bytes);
    } else {
      plan_plain(c, false);  // a partial page of a write: the buffered descriptor
    }
    n_chunks_.fetch_add(1, std::memory_order_relaxed);
    if (c.bounce) n_bounced_.fetch_add(1, std::memory_order_relaxed);
    if (!c.direct) n_buffered_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  static void plan_plain(Chunk& c, bool direct) {
    c.direct = direct;
    c.io_offset = c.offset;
    c.io_len = c.io_need = c.len;
    c.io_mem = c.mem;
  }

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
  Step after_io(Chunk& c, int64_t res) {
    RequestState& r = *c.req;
    if (c.fault) res = inject(c, res);
    if (res == -EAGAIN || res == -EINTR) return Step::kResubmit;
    if (res < 0) {
      const int e = static_cast<int>(-res);
      if (e == EINVAL && c.direct) {
        r.file->give_up_direct(e);
        c.direct = false;
        n_buffered_.fetch_add(1, std::memory_order_relaxed);
        return Step::kResubmit;
      }
      r.fail_with(fmt::format("{}: {} of {} bytes at offset {} failed at offset {}: {}{}",
                              r.file->path, r.op == Op::kRead ? "read" : "write", r.len, r.offset,
                              io_pos(c), errno_text(e), io_hint(e)));
      return Step::kFailed;
    }
    c.io_done += static_cast<size_t>(res);
    if (c.io_done >= c.io_need) return Step::kDone;
    // A read stops short only at the end of the file (a direct read at a
    // position that is not a page boundary has reached it too).
    const bool at_eof = res == 0 || (c.direct && c.io_done % kDiskAlign != 0);
    if (r.op == Op::kRead && at_eof) {
      r.fail_with(
          fmt::format("{}: read of {} bytes at offset {} goes past the end of the file ({} bytes); "
                      "the file is truncated or the offset is wrong",
                      r.file->path, r.len, r.offset, r.file->size()));
      return Step::kFailed;
    }
    if (r.op == Op::kWrite && res == 0) {
      r.fail_with(
          fmt::format("{}: write of {} bytes at offset {} stopped at offset {}; the disk may be "
                      "full: free space or choose another directory",
                      r.file->path, r.len, r.offset, io_pos(c)));
      return Step::kFailed;
    }
    if (c.direct && (c.io_done % kDiskAlign != 0)) {
      c.direct = false;  // the rest of a short direct write is not page-aligned
      n_buffered_.fetch_add(1, std::memory_order_relaxed);
    }
    return Step::kResubmit;
  }

  // The result an injected fault makes of `res` (disk_faults.h). A shortened
  // direct I/O stays a multiple of the page size, which the engine would
  // otherwise take for the end of the file.
  static int64_t inject(Chunk& c, int64_t res) {
    auto shorten = [&](int64_t n) {
      int64_t half = n / 2;
      if (c.direct)
        half = static_cast<int64_t>(align_down(static_cast<uint64_t>(half), kDiskAlign));
      return half;
    };
    switch (*c.fault) {
      case DiskFaultKind::kIoError:
        c.fault.reset();
        return -EIO;
      case DiskFaultKind::kNoSpace:
        c.fault.reset();
        return -ENOSPC;
      case DiskFaultKind::kShortRead:
        if (c.fault_started || res <= 0) {
          c.fault.reset();
          return res < 0 ? res : 0;  // then the end of the file
        }
        c.fault_started = true;
        return shorten(res);
      case DiskFaultKind::kPartial:
        if (res > 1 && shorten(res) > 0) {
          c.fault.reset();
          return shorten(res);
        }
        return res;  // too small to cut here: the next I/O of this chunk
    }
    return res;
  }

  // A chunk is over (ok: its bytes moved).
  void finish_chunk(Chunk& c, bool ok) {
    RequestState& r = *c.req;
    if (ok) {
      if (c.bounce && r.op == Op::kRead)
        std::memcpy(c.mem, c.io_mem + (c.offset - c.io_offset), c.len);
      (r.op == Op::kRead ? bytes_read_ : bytes_written_)
          .fetch_add(c.len, std::memory_order_relaxed);
    }
    std::shared_ptr<RequestState> req = std::move(c.req);
    const uint64_t n = c.len;
    c = Chunk{};
    finish_bytes(req, n);
  }

  void finish_bytes(const std::shared_ptr<RequestState>& req, uint64_t n) {
    if (n == 0) return;
    const uint64_t before = req->bytes_left.fetch_sub(n, std::memory_order_acq_rel);
    STRATA_ASSERT(before >= n);
    if (before == n) {
      req->done.store(true, std::memory_order_release);
      req->done.notify_all();
    }
  }

  void io_started() {
    std::lock_guard lk(busy_mu_);
    if (in_flight_++ == 0) busy_since_ = Clock::now();
  }
  void io_ended() {
    std::lock_guard lk(busy_mu_);
    STRATA_ASSERT(in_flight_ > 0);
    if (--in_flight_ == 0) {
      busy_ns_ +=
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - busy_since_).count();
    }
  }

  DiskEngineOptions opt_;

 private:
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0}, n_requests_{0}, n_chunks_{0},
      n_bounced_{0}, n_buffered_{0};
  mutable std::mutex busy_mu_;
  int64_t in_flight_ = 0;
  int64_t busy_ns_ = 0;
  Clock::time_point busy_since_ = Clock::now();
};

// ---- io_uring: one thread owns the ring, submits and reaps ----

class UringQueue final : public Queue {
 public:
  // Starts the ring thread; null (and `why`) when the ring cannot be set up.
  static std::unique_ptr<Queue> create(const DiskEngineOptions& o, std::string* why) {
    std::unique_ptr<UringQueue> q(new UringQueue(o));
    std::promise<std::string> ready;
    std::future<std::string> result = ready.get_future();
    q->thread_ = std::thread([qp = q.get(), &ready] { qp->run(ready); });
    std::string err = result.get();
    if (!err.empty()) {
      q->thread_.join();
      *why = err;
      return nullptr;
    }
    return q;
  }

  ~UringQueue() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    if (efd_ >= 0) wake();
    if (thread_.joinable()) thread_.join();
    // Torn down here, after the join: the eventfd must outlive every wake().
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (efd_ >= 0) ::close(efd_);
  }

  void push(std::shared_ptr<RequestState> r) override {
    {
      std::lock_guard lk(mu_);
      incoming_.push_back(std::move(r));
    }
    wake();
  }

  const char* name() const override { return "io_uring"; }
  bool buffers_registered() const override { return registered_; }

 private:
  explicit UringQueue(const DiskEngineOptions& o) : Queue(o) {}

  void wake() {
    const uint64_t one = 1;
    // A full counter (2^64 - 2 wake-ups pending) cannot happen; EINTR retries.
    while (::write(efd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }

  // Sets the ring up on this thread (the only one that will submit), reports
  // the outcome, then serves requests until stopped.
  void run(std::promise<std::string>& ready) {
    const int depth = opt_.queue_depth;
    io_uring_params p{};
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN;
    const unsigned entries = static_cast<unsigned>(depth) + 2;
    int ret = io_uring_queue_init_params(entries, &ring_, &p);
    if (ret == -EINVAL) {  // kernels before 6.0 lack these flags
      p = io_uring_params{};
      ret = io_uring_queue_init_params(entries, &ring_, &p);
    }
    if (ret < 0) {
      ready.set_value(fmt::format("io_uring_queue_init: {}", errno_text(-ret)));
      return;
    }
    const int efd = ::eventfd(0, EFD_CLOEXEC);
    if (efd < 0) {
      const int e = errno;
      io_uring_queue_exit(&ring_);
      ready.set_value(fmt::format("eventfd: {}", errno_text(e)));
      return;
    }
    efd_ = efd;
    slots_.resize(depth);
    bounce_.reserve(depth);
    for (int i = 0; i < depth; ++i) {
      bounce_.emplace_back(opt_.chunk_bytes);
      free_slots_.push_back(depth - 1 - i);
    }
    if (opt_.register_buffers) register_buffers();
    ring_ready_ = true;
    ready.set_value({});
    loop();
  }

  void register_buffers() {
    std::vector<iovec> iov;
    for (auto& b : bounce_) iov.push_back({b.data(), b.size()});
    for (auto& f : opt_.fixed_buffers) iov.push_back({f.data(), f.size()});
    const int ret =
        io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size()));
    if (ret < 0) {
      spdlog::info("io_uring: fixed buffers not registered ({}); the kernel pins pages per request",
                   errno_text(-ret));
      return;
    }
    registered_ = true;
  }

  // The fixed-buffer index covering [addr, addr + n), or -1.
  int fixed_index(int slot, const Chunk& c, const std::byte* addr, size_t n) const {
    if (!registered_) return -1;
    if (c.bounce) return slot;
    for (size_t k = 0; k < opt_.fixed_buffers.size(); ++k) {
      const auto& f = opt_.fixed_buffers[k];
      if (addr >= f.data() && addr < f.data() + f.size() &&
          n <= static_cast<size_t>(f.data() + f.size() - addr)) {
        return static_cast<int>(bounce_.size() + k);
      }
    }
    return -1;
  }

  io_uring_sqe* get_sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    STRATA_ASSERT(sqe != nullptr);
    return sqe;
  }

  void arm_wakeup() {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_read(sqe, efd_, &efd_value_, sizeof(efd_value_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  void prep(int slot) {
    Chunk& c = slots_[slot];
    if (c.io_done == 0) before_first_io(c);
    io_uring_sqe* sqe = get_sqe();
    std::byte* addr = io_addr(c);
    const unsigned n = static_cast<unsigned>(io_left(c));
    const int fixed = fixed_index(slot, c, addr, n);
    if (c.req->op == Op::kRead) {
      if (fixed >= 0)
        io_uring_prep_read_fixed(sqe, io_fd(c), addr, n, io_pos(c), fixed);
      else
        io_uring_prep_read(sqe, io_fd(c), addr, n, io_pos(c));
    } else {
      if (fixed >= 0)
        io_uring_prep_write_fixed(sqe, io_fd(c), addr, n, io_pos(c), fixed);
      else
        io_uring_prep_write(sqe, io_fd(c), addr, n, io_pos(c));
    }
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot) + 1);
  }

  void loop() {
    arm_wakeup();
    for (;;) {
      bool stop;
      {
        std::lock_guard lk(mu_);
        for (auto& r : incoming_) pending_.push_back(Pending{std::move(r), 0});
        incoming_.clear();
        stop = stop_;
      }
      for (int s : resubmit_) prep(s);
      resubmit_.clear();
      while (!free_slots_.empty() && !pending_.empty()) {
        const int s = free_slots_.back();
        if (!cut_next(pending_.front(), slots_[s], bounce_[s].data())) {
          pending_.pop_front();
          continue;
        }
        free_slots_.pop_back();
        ++n_in_flight_;
        io_started();
        prep(s);
      }
      if (stop && pending_.empty() && n_in_flight_ == 0) break;
      const int ret = io_uring_submit_and_wait(&ring_, 1);
      STRATA_ASSERT_MSG(ret >= 0 || ret == -EINTR || ret == -EAGAIN || ret == -EBUSY,
                        "io_uring_submit_and_wait: {}", errno_text(-ret));
      unsigned head, seen = 0;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == kWakeTag) {
          arm_wakeup();
          continue;
        }
        const int s = static_cast<int>(tag - 1);
        const Step st = after_io(slots_[s], cqe->res);
        if (st == Step::kResubmit) {
          resubmit_.push_back(s);
          continue;
        }
        finish_chunk(slots_[s], st == Step::kDone);
        free_slots_.push_back(s);
        --n_in_flight_;
        io_ended();
      }
      io_uring_cq_advance(&ring_, seen);
    }
  }

  static constexpr uint64_t kWakeTag = 0;

  std::thread thread_;
  io_uring ring_{};
  int efd_ = -1;             // set before `ready`, closed by the destructor
  bool ring_ready_ = false;  // the ring is set up (torn down by the destructor)
  uint64_t efd_value_ = 0;
  bool registered_ = false;

  std::mutex mu_;  // guards incoming_ and stop_
  std::deque<std::shared_ptr<RequestState>> incoming_;
  bool stop_ = false;

  // Ring thread only.
  std::deque<Pending> pending_;
  std::vector<Chunk> slots_;
  std::vector<AlignedBuffer> bounce_;  // one per slot
  std::vector<int> free_slots_;
  std::vector<int> resubmit_;
  int n_in_flight_ = 0;
};

// ---- fallback: pread/pwrite worker threads ----

class ThreadQueue final : public Queue {
 public:
  explicit ThreadQueue(const DiskEngineOptions& o) : Queue(o) {
    const int n = n_threads(o);
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
  }

  ~ThreadQueue() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  static int n_threads(const DiskEngineOptions& o) { return std::min(o.queue_depth, 64); }

  void push(std::shared_ptr<RequestState> r) override {
    {
      std::lock_guard lk(mu_);
      pending_.push_back(Pending{std::move(r), 0});
    }
    cv_.notify_one();
  }

  const char* name() const override { return "threads"; }

 private:
  void work() {
    AlignedBuffer bounce(opt_.chunk_bytes);
    Chunk c;
    for (;;) {
      {
        std::unique_lock lk(mu_);
        for (;;) {
          cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
          if (pending_.empty()) return;  // stopping, nothing left
          if (cut_next(pending_.front(), c, bounce.data())) break;
          pending_.pop_front();
        }
        if (!pending_.empty()) cv_.notify_one();  // more to cut: wake a peer
      }
      io_started();
      const bool ok = run(c);
      io_ended();
      finish_chunk(c, ok);
    }
  }

  bool run(Chunk& c) {
    before_first_io(c);
    for (;;) {
      const ssize_t r =
          c.req->op == Op::kRead
              ? ::pread(io_fd(c), io_addr(c), io_left(c), static_cast<off_t>(io_pos(c)))
              : ::pwrite(io_fd(c), io_addr(c), io_left(c), static_cast<off_t>(io_pos(c)));
      const Step st = after_io(c, r < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(r));
      if (st != Step::kResubmit) return st == Step::kDone;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace disk_detail

// ---- DiskFile ----

DiskFile DiskFile::open(const std::string& path, OpenMode mode, bool direct) {
  const int access = mode == OpenMode::kRead ? O_RDONLY : O_RDWR;
  const int create = mode == OpenMode::kCreate ? O_CREAT | O_TRUNC : 0;
  if (mode != OpenMode::kRead) ignore_file_size_signal();
  auto s = std::make_shared<disk_detail::FileState>();
  s->path = path;
  s->writable = mode != OpenMode::kRead;
  s->fd_buffered = ::open(path.c_str(), access | create | O_CLOEXEC, 0644);
  if (s->fd_buffered < 0) fail("{}", open_error(path, errno, mode));
  struct stat st {};
  if (::fstat(s->fd_buffered, &st) != 0 || !S_ISREG(st.st_mode)) {
    fail("{}: not a regular file", path);
  }
  if (direct) {
    s->fd_direct = ::open(path.c_str(), access | O_DIRECT | O_CLOEXEC);
    if (s->fd_direct >= 0) {
      s->direct_ok = true;
    } else if (errno == EINVAL) {
      s->direct_warned = true;
      spdlog::info(
          "{}: the filesystem does not support O_DIRECT; using buffered I/O for this file "
          "(the page cache may serve repeated reads)",
          path);
    } else {
      fail("{}", open_error(path, errno, mode));
    }
  }
  DiskFile f;
  f.s_ = std::move(s);
  return f;
}

const std::string& DiskFile::path() const {
  STRATA_ASSERT(s_);
  return s_->path;
}

bool DiskFile::direct() const {
  return s_ && s_->direct_ok.load();
}

uint64_t DiskFile::size() const {
  STRATA_ASSERT(s_);
  return s_->size();
}

void DiskFile::allocate(uint64_t bytes) const {
  STRATA_ASSERT(s_);
  if (bytes == 0) return;
  if (::fallocate(s_->fd_buffered, 0, 0, static_cast<off_t>(bytes)) == 0) return;
  const int e = errno;
  if (e == EOPNOTSUPP || e == ENOSYS || e == EINVAL) {
    spdlog::debug("{}: fallocate not supported ({}); a full disk will show up while writing",
                  s_->path, errno_text(e));
    return;
  }
  fail("{}: cannot reserve {} on disk: {}{}", s_->path, format_bytes(static_cast<double>(bytes)),
       errno_text(e), io_hint(e));
}

void DiskFile::truncate(uint64_t bytes) const {
  STRATA_ASSERT(s_);
  if (::ftruncate(s_->fd_buffered, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    fail("{}: cannot set the size to {} bytes: {}{}", s_->path, bytes, errno_text(e), io_hint(e));
  }
}

void DiskFile::sync() const {
  STRATA_ASSERT(s_);
  if (::fdatasync(s_->fd_buffered) != 0) {
    const int e = errno;
    fail("{}: cannot flush to disk: {}{}", s_->path, errno_text(e), io_hint(e));
  }
}

// ---- DiskEngine ----

DiskEngine::DiskEngine(DiskEngineOptions o) : options_(std::move(o)) {
  if (options_.chunk_bytes == 0 || options_.chunk_bytes % kDiskAlign != 0 ||
      options_.chunk_bytes > (size_t{1} << 30)) {
    fail("disk engine: chunk size {} is not a multiple of {} between 4K and 1G",
         options_.chunk_bytes, kDiskAlign);
  }
  if (options_.queue_depth < 1 || options_.queue_depth > 1024) {
    fail("disk engine: queue depth {} is not between 1 and 1024", options_.queue_depth);
  }
  const int n_threads = disk_detail::ThreadQueue::n_threads(options_);
  bool want_uring = options_.use_io_uring;
  const char* env = std::getenv("STRATA_DISABLE_IO_URING");
  if (want_uring && env && *env && std::strcmp(env, "0") != 0) {
    want_uring = false;
    spdlog::info(
        "io_uring disabled by STRATA_DISABLE_IO_URING={}; using {} pread/pwrite threads for disk "
        "I/O",
        env, n_threads);
  }
  if (want_uring) {
    std::string why;
    queue_ = disk_detail::UringQueue::create(options_, &why);
    if (!queue_) {
      spdlog::warn("io_uring unavailable ({}); using {} pread/pwrite threads for disk I/O", why,
                   n_threads);
    }
  } else if (!options_.use_io_uring) {
    spdlog::debug("disk engine: io_uring not requested; using {} pread/pwrite threads", n_threads);
  }
  if (!queue_) queue_ = std::make_unique<disk_detail::ThreadQueue>(options_);
}

DiskEngine::~DiskEngine() = default;  // the queue drains what is in flight, then stops

Ticket DiskEngine::submit(int op, const DiskFile& file, uint64_t offset, std::byte* mem, size_t n) {
  STRATA_ASSERT_MSG(file.is_open(), "disk engine: request on a file that is not open");
  STRATA_ASSERT_MSG(n == 0 || mem != nullptr, "disk engine: null buffer");
  if (offset > UINT64_MAX - n || offset + n > static_cast<uint64_t>(INT64_MAX)) {
    fail("{}: offset {} + {} bytes is past the largest file offset", file.path(), offset, n);
  }
  auto r = std::make_shared<disk_detail::RequestState>();
  r->op = static_cast<disk_detail::Op>(op);
  r->file = file.s_;
  r->offset = offset;
  r->len = n;
  r->mem = mem;
  r->bytes_left = n;
  if (n > 0) r->fault = disk_detail::take_disk_fault(op == 0, file.path());
  queue_->count_request();
  if (n == 0) {
    r->done = true;
    return Ticket(std::move(r));
  }
  queue_->push(r);
  return Ticket(std::move(r));
}

Ticket DiskEngine::read(const DiskFile& file, uint64_t offset, void* dst, size_t n) {
  return submit(0, file, offset, static_cast<std::byte*>(dst), n);
}

Ticket DiskEngine::write(const DiskFile& file, uint64_t offset, const void* src, size_t n) {
  // The engine only reads `src` for writes; the request type is shared.
  return submit(1, file, offset, const_cast<std::byte*>(static_cast<const std::byte*>(src)), n);
}

void DiskEngine::wait(const Ticket& t) {
  if (!t.s_) return;
  disk_detail::RequestState& r = *t.s_;
  while (!r.done.load(std::memory_order_acquire)) r.done.wait(false, std::memory_order_acquire);
  if (r.failed.load(std::memory_order_acquire)) {
    std::lock_guard lk(r.error_mu);
    throw Error(r.error);
  }
}

bool DiskEngine::poll(const Ticket& t) const {
  return !t.s_ || t.s_->done.load(std::memory_order_acquire);
}

void DiskEngine::read_sync(const DiskFile& file, uint64_t offset, void* dst, size_t n) {
  wait(read(file, offset, dst, n));
}

void DiskEngine::write_sync(const DiskFile& file, uint64_t offset, const void* src, size_t n) {
  wait(write(file, offset, src, n));
}

DiskStats DiskEngine::stats() const {
  return queue_->stats();
}
void DiskEngine::reset_stats() {
  queue_->reset_stats();
}
const char* DiskEngine::backend_name() const {
  return queue_->name();
}
bool DiskEngine::buffers_registered() const {
  return queue_->buffers_registered();
}

// ---- bandwidth measurement ----

DiskBandwidth measure_disk_bandwidth(const std::string& dir, uint64_t file_bytes,
                                     size_t block_bytes, int queue_depth, bool use_io_uring,
                                     bool fixed_buffers) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory; pass the directory to measure", dir);
  if (block_bytes == 0 || block_bytes % kDiskAlign != 0) {
    fail("disk bandwidth: block size {} is not a multiple of {}", block_bytes, kDiskAlign);
  }
  const uint64_t n_blocks = std::max<uint64_t>(1, file_bytes / block_bytes);
  const std::string path =
      (fs::path(dir) / fmt::format(".strata-bandwidth-{}.tmp", ::getpid())).string();
  struct Remove {
    std::string p;
    ~Remove() { ::unlink(p.c_str()); }
  } remove_file{path};

  // Incompressible contents, one buffer per request in flight.
  std::vector<AlignedBuffer> bufs;
  std::mt19937_64 rng(12345);
  for (int i = 0; i < queue_depth; ++i) {
    bufs.emplace_back(block_bytes);
    auto* w = reinterpret_cast<uint64_t*>(bufs.back().data());
    for (size_t k = 0; k < block_bytes / 8; ++k) w[k] = rng();
  }
  DiskEngineOptions o;
  o.chunk_bytes = block_bytes;
  o.queue_depth = queue_depth;
  o.use_io_uring = use_io_uring;
  o.register_buffers = fixed_buffers;
  if (fixed_buffers) {
    for (auto& b : bufs) o.fixed_buffers.push_back(b.bytes());
  }
  DiskEngine engine(o);
  DiskFile f = DiskFile::open(path, OpenMode::kCreate, true);
  f.allocate(n_blocks * block_bytes);
  std::vector<Ticket> t(queue_depth);
  auto pass = [&](bool write) {
    const auto t0 = Clock::now();
    for (uint64_t b = 0; b < n_blocks; ++b) {
      const size_t s = b % queue_depth;
      engine.wait(t[s]);
      t[s] = write ? engine.write(f, b * block_bytes, bufs[s].data(), block_bytes)
                   : engine.read(f, b * block_bytes, bufs[s].data(), block_bytes);
    }
    for (auto& x : t) engine.wait(x);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  DiskBandwidth r;
  r.file_bytes = n_blocks * block_bytes;
  r.block_bytes = block_bytes;
  r.queue_depth = queue_depth;
  r.direct = f.direct();
  r.backend = engine.backend_name();
  r.write_bytes_per_s = r.file_bytes / pass(true);
  r.read_bytes_per_s = r.file_bytes / pass(false);
  return r;
}

}  // namespace strata
