// The disk I/O layer (disk_io.h): DiskFile descriptors, DiskIo over one of
// the request queues (disk_queue.h), and the bandwidth measurement.
#include "offload/disk_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "offload/disk_queue.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;
using disk_detail::io_hint;

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
      return fmt::format("{}: cannot open: {}", path, std::strerror(e));
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
                  s_->path, std::strerror(e));
    return;
  }
  fail("{}: cannot reserve {} on disk: {}{}", s_->path, format_bytes(static_cast<double>(bytes)),
       std::strerror(e), io_hint(e));
}

void DiskFile::truncate(uint64_t bytes) const {
  STRATA_ASSERT(s_);
  if (::ftruncate(s_->fd_buffered, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    fail("{}: cannot set the size to {} bytes: {}{}", s_->path, bytes, std::strerror(e), io_hint(e));
  }
}

void DiskFile::sync() const {
  STRATA_ASSERT(s_);
  if (::fdatasync(s_->fd_buffered) != 0) {
    const int e = errno;
    fail("{}: cannot flush to disk: {}{}", s_->path, std::strerror(e), io_hint(e));
  }
}

// ---- DiskIo ----

DiskIo::DiskIo(DiskIoOptions o) : options_(std::move(o)) {
  if (options_.chunk_bytes == 0 || options_.chunk_bytes % kDiskAlign != 0 ||
      options_.chunk_bytes > (size_t{1} << 30)) {
    fail("disk I/O layer: chunk size {} is not a multiple of {} between 4K and 1G",
         options_.chunk_bytes, kDiskAlign);
  }
  if (options_.queue_depth < 1 || options_.queue_depth > 1024) {
    fail("disk I/O layer: queue depth {} is not between 1 and 1024", options_.queue_depth);
  }
  const int n_threads = disk_detail::thread_queue_threads(options_);
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
    queue_ = disk_detail::make_uring_queue(options_, &why);
    if (!queue_) {
      spdlog::warn("io_uring unavailable ({}); using {} pread/pwrite threads for disk I/O", why,
                   n_threads);
    }
  } else if (!options_.use_io_uring) {
    spdlog::debug("disk I/O layer: io_uring not requested; using {} pread/pwrite threads", n_threads);
  }
  if (!queue_) queue_ = disk_detail::make_thread_queue(options_);
}

DiskIo::~DiskIo() = default;  // the queue drains what is in flight, then stops

Ticket DiskIo::submit(int op, const DiskFile& file, uint64_t offset, std::byte* mem, size_t n,
                      bool urgent) {
  STRATA_ASSERT_MSG(file.is_open(), "disk I/O layer: request on a file that is not open");
  STRATA_ASSERT_MSG(n == 0 || mem != nullptr, "disk I/O layer: null buffer");
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
  r->urgent = urgent;
  if (n > 0) r->fault = disk_detail::take_disk_fault(op == 0, file.path());
  queue_->count_request();
  if (n == 0) {
    r->done = true;
    return Ticket(std::move(r));
  }
  queue_->push(r);
  return Ticket(std::move(r));
}

Ticket DiskIo::read(const DiskFile& file, uint64_t offset, void* dst, size_t n, bool urgent) {
  return submit(0, file, offset, static_cast<std::byte*>(dst), n, urgent);
}

Ticket DiskIo::write(const DiskFile& file, uint64_t offset, const void* src, size_t n) {
  // The engine only reads `src` for writes; the request type is shared.
  return submit(1, file, offset, const_cast<std::byte*>(static_cast<const std::byte*>(src)), n);
}

void DiskIo::wait(const Ticket& t) {
  if (!t.s_) return;
  disk_detail::RequestState& r = *t.s_;
  while (!r.done.load(std::memory_order_acquire)) r.done.wait(false, std::memory_order_acquire);
  if (r.failed.load(std::memory_order_acquire)) {
    std::lock_guard lk(r.error_mu);
    throw Error(r.error);
  }
}

bool DiskIo::poll(const Ticket& t) const {
  return !t.s_ || t.s_->done.load(std::memory_order_acquire);
}

void DiskIo::read_sync(const DiskFile& file, uint64_t offset, void* dst, size_t n) {
  wait(read(file, offset, dst, n));
}

void DiskIo::write_sync(const DiskFile& file, uint64_t offset, const void* src, size_t n) {
  wait(write(file, offset, src, n));
}

DiskStats DiskIo::stats() const {
  return queue_->stats();
}
void DiskIo::reset_stats() {
  queue_->reset_stats();
}
const char* DiskIo::backend_name() const {
  return queue_->name();
}
bool DiskIo::buffers_registered() const {
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
  DiskIoOptions o;
  o.chunk_bytes = block_bytes;
  o.queue_depth = queue_depth;
  o.use_io_uring = use_io_uring;
  o.register_buffers = fixed_buffers;
  if (fixed_buffers) {
    for (auto& b : bufs) o.fixed_buffers.push_back(b.bytes());
  }
  DiskIo engine(o);
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
