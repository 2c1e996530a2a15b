// The disk I/O layer: reads and writes between files and caller memory,
// large requests split into chunks and kept in flight at a queue depth that
// keeps an NVMe busy, with O_DIRECT so the page cache neither helps nor
// hides.
//
// Requests are asynchronous: read()/write() queue the request and return a
// Ticket at once; the caller waits on it (wait) or asks (poll). One thread
// owns an io_uring ring, submits chunks and reaps completions, so a thread
// that submits never blocks on I/O it does not wait for. Where io_uring is
// unavailable (ring set-up fails, or STRATA_DISABLE_IO_URING=1) a pool of
// pread/pwrite threads does the same work, with a log line saying why. The
// two queues are disk_queue.h's; this is their one front.
//
// Alignment: O_DIRECT needs offsets, lengths and addresses that are
// multiples of kDiskAlign. Any request is accepted: an unaligned head or tail
// page and chunks whose memory is misaligned go through a per-slot bounce
// buffer (reads, and writes of whole pages), and the partial pages of a write
// through a second, buffered descriptor of the same file (the kernel keeps the
// two coherent: direct I/O flushes and invalidates the cached pages it
// touches). A filesystem without O_DIRECT (open or first I/O fails with
// EINVAL) makes that file buffered, with a log line.
//
// Failures (I/O errors, a full disk, a read past the end of the file, a short
// write) become an Error from wait() naming the file, the offset, the length
// and the reason. The caller's memory must stay valid until its ticket is done.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "offload/aligned_buffer.h"

namespace strata {

namespace disk_detail {
struct FileState;
struct RequestState;
class Queue;
}  // namespace disk_detail

enum class OpenMode : uint8_t {
  kRead,       // existing file, read only
  kReadWrite,  // existing file
  kCreate,     // created or truncated, read and write
};

// An open file: a direct descriptor (when O_DIRECT is wanted and the
// filesystem has it) and a buffered one. Copies share the descriptors, which
// close when the last copy and the last request using them are gone.
class DiskFile {
 public:
  DiskFile() = default;
  // Throws Error naming the path and the reason (missing, permission denied,
  // a directory, ...) when the file cannot be opened.
  static DiskFile open(const std::string& path, OpenMode mode, bool direct = true);

  bool is_open() const { return s_ != nullptr; }
  const std::string& path() const;
  bool direct() const;    // false when the filesystem has no O_DIRECT, or it was not asked for
  uint64_t size() const;  // current size (fstat)
  // Reserves disk blocks for [0, bytes) (fallocate) so a full disk shows up
  // before any data is written; Error naming the file when there is no room.
  void allocate(uint64_t bytes) const;
  void truncate(uint64_t bytes) const;
  void sync() const;  // fdatasync; Error naming the file on failure

 private:
  friend class DiskIo;
  std::shared_ptr<disk_detail::FileState> s_;
};

// A request in flight; copyable, cheap. A default Ticket is already done.
class Ticket {
 public:
  Ticket() = default;
  bool valid() const { return s_ != nullptr; }

 private:
  friend class DiskIo;
  explicit Ticket(std::shared_ptr<disk_detail::RequestState> s) : s_(std::move(s)) {}
  std::shared_ptr<disk_detail::RequestState> s_;
};

struct DiskIoOptions {
  size_t chunk_bytes = size_t{1} << 20;  // a multiple of kDiskAlign
  int queue_depth = 16;                  // chunks in flight, over all requests
  bool use_io_uring = true;              // false: pread/pwrite threads
  bool register_buffers = true;          // bounce and fixed_buffers as io_uring fixed buffers
  // Caller memory that requests will use often (staging buffers), registered
  // with the ring so the kernel does not pin its pages per request.
  std::vector<std::span<std::byte>> fixed_buffers;
};

struct DiskStats {
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t n_requests = 0;
  uint64_t n_chunks = 0;
  uint64_t n_bounced = 0;   // chunks through a bounce buffer
  uint64_t n_buffered = 0;  // chunks through the buffered descriptor
  double busy_s = 0;        // time with at least one chunk in flight
  double read_gb_per_s() const { return busy_s > 0 ? bytes_read / busy_s / 1e9 : 0; }
  double write_gb_per_s() const { return busy_s > 0 ? bytes_written / busy_s / 1e9 : 0; }
};

class DiskIo {
 public:
  explicit DiskIo(DiskIoOptions options = {});
  // Waits for every request in flight, then stops the engine thread(s).
  ~DiskIo();
  DiskIo(const DiskIo&) = delete;
  DiskIo& operator=(const DiskIo&) = delete;

  // Reads `n` bytes at `offset` of `file` into `dst`. Reading past the end of
  // the file is an error (from wait).
  // `urgent`: cut into chunks before every queued request that is not
  // (a read the caller's compute waits for now).
  Ticket read(const DiskFile& file, uint64_t offset, void* dst, size_t n, bool urgent = false);
  // Writes `n` bytes from `src` at `offset`, extending the file as needed.
  Ticket write(const DiskFile& file, uint64_t offset, const void* src, size_t n);

  // Blocks until the request is done; throws Error when it failed.
  void wait(const Ticket& t);
  // True when the request is done (wait() then returns or throws at once).
  bool poll(const Ticket& t) const;

  // Synchronous forms: read()/write() then wait().
  void read_sync(const DiskFile& file, uint64_t offset, void* dst, size_t n);
  void write_sync(const DiskFile& file, uint64_t offset, const void* src, size_t n);

  DiskStats stats() const;
  void reset_stats();
  const char* backend_name() const;  // "io_uring" or "threads"
  bool buffers_registered() const;
  const DiskIoOptions& options() const { return options_; }

 private:
  Ticket submit(int op, const DiskFile& file, uint64_t offset, std::byte* mem, size_t n,
                bool urgent = false);
  DiskIoOptions options_;
  std::unique_ptr<disk_detail::Queue> queue_;
};

// Sequential bandwidth of the disk under `dir` (for `strata profile`): writes
// a temporary file of `file_bytes` with O_DIRECT in blocks of `block_bytes`,
// `queue_depth` blocks in flight, then reads it back the same way, then
// removes it. Bytes per second as the disk sees them (no page cache).
struct DiskBandwidth {
  double write_bytes_per_s = 0;
  double read_bytes_per_s = 0;
  uint64_t file_bytes = 0;
  size_t block_bytes = 0;
  int queue_depth = 0;
  bool direct = true;
  std::string backend;  // "io_uring" or "threads"
};
// `fixed_buffers`: register the block buffers with the ring (io_uring only).
DiskBandwidth measure_disk_bandwidth(const std::string& dir, uint64_t file_bytes,
                                     size_t block_bytes, int queue_depth, bool use_io_uring = true,
                                     bool fixed_buffers = false);

}  // namespace strata
