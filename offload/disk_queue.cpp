// What both request queues share (disk_queue.h): cutting requests into
// chunks, the result of an I/O, injected faults, completion, statistics.
#include "offload/disk_queue.h"

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "core/error.h"

namespace strata::disk_detail {

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

void queue_pending(std::deque<Pending>& pending, std::shared_ptr<RequestState> r) {
  auto at = pending.end();
  if (r->urgent) {
    at = std::find_if(pending.begin(), pending.end(),
                      [](const Pending& p) { return !p.req->urgent; });
  }
  pending.insert(at, Pending{std::move(r), 0});
}

DiskStats Queue::stats() const {
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

void Queue::reset_stats() {
  bytes_read_ = bytes_written_ = n_requests_ = n_chunks_ = n_bounced_ = n_buffered_ = 0;
  std::lock_guard lk(busy_mu_);
  busy_ns_ = 0;
  busy_since_ = Clock::now();
}

bool Queue::cut_next(Pending& p, Chunk& c, std::byte* bounce) {
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

void Queue::plan_plain(Chunk& c, bool direct) {
  c.direct = direct;
  c.io_offset = c.offset;
  c.io_len = c.io_need = c.len;
  c.io_mem = c.mem;
}

Step Queue::after_io(Chunk& c, int64_t res) {
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
                            io_pos(c), std::strerror(e), io_hint(e)));
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

int64_t Queue::inject(Chunk& c, int64_t res) {
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

void Queue::finish_chunk(Chunk& c, bool ok) {
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

void Queue::finish_bytes(const std::shared_ptr<RequestState>& req, uint64_t n) {
  if (n == 0) return;
  const uint64_t before = req->bytes_left.fetch_sub(n, std::memory_order_acq_rel);
  STRATA_ASSERT(before >= n);
  if (before == n) {
    req->done.store(true, std::memory_order_release);
    req->done.notify_all();
  }
}

void Queue::io_ended() {
  std::lock_guard lk(busy_mu_);
  STRATA_ASSERT(in_flight_ > 0);
  if (--in_flight_ == 0) {
    busy_ns_ +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - busy_since_).count();
  }
}

}  // namespace strata::disk_detail
