// Transfer queues and copy(dst, src) between tiers (transfer.h).
#include "offload/transfer.h"

#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/thread_name.h"
#include "kernels/backend.h"
#include "offload/aligned_buffer.h"
#include "offload/trace.h"

namespace strata {

using Clock = std::chrono::steady_clock;

TransferQueue::TransferQueue(std::string name, Trace* trace, bool urgent)
    : name_(std::move(name)), trace_(trace), urgent_(urgent), last_end_(Clock::now()) {
  worker_ = std::thread([this] { run(); });
}

TransferQueue::~TransferQueue() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  worker_.join();  // the worker finishes every queued transfer first
}

uint64_t TransferQueue::push(std::function<void()> finish, const std::string& link,
                             uint64_t bytes, TransferLabel label) {
  uint64_t n;
  {
    std::lock_guard lk(mu_);
    n = ++n_queued_;
    items_.push_back(Item{n, std::move(finish), link, bytes, std::move(label), Clock::now()});
  }
  cv_work_.notify_one();
  return n;
}

uint64_t TransferQueue::last() const {
  std::lock_guard lk(mu_);
  return n_queued_;
}

void TransferQueue::wait(uint64_t n) {
  std::unique_lock lk(mu_);
  STRATA_ASSERT_MSG(n <= n_queued_, "{} queue: wait for transfer {} of {}", name_, n, n_queued_);
  cv_done_.wait(lk, [&] { return n_done_ >= n; });
  if (error_) std::rethrow_exception(error_);
}

bool TransferQueue::done(uint64_t n) const {
  std::lock_guard lk(mu_);
  return n_done_ >= n;
}

uint64_t TransferQueue::n_done() const {
  std::lock_guard lk(mu_);
  return n_done_;
}

std::map<std::string, EngineStats::Link> TransferQueue::links() const {
  std::lock_guard lk(mu_);
  return links_;
}

double TransferQueue::busy_s() const {
  std::lock_guard lk(mu_);
  return busy_s_;
}

void TransferQueue::run() {
  name_this_thread(name_);
  for (;;) {
    Item item;
    {
      std::unique_lock lk(mu_);
      cv_work_.wait(lk, [&] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;  // stop_ and nothing left
      item = std::move(items_.front());
      items_.pop_front();
    }
    std::exception_ptr failure;
    try {
      item.finish();
    } catch (...) {
      failure = std::current_exception();
    }
    const Clock::time_point end = Clock::now();
    {
      std::lock_guard lk(mu_);
      const Clock::time_point start = std::max(item.queued, last_end_);
      const double dur = std::chrono::duration<double>(end - start).count();
      last_end_ = end;
      if (!failure) {
        for (size_t b = 0; !item.link.empty() && b <= item.link.size();) {
          size_t e = item.link.find(',', b);
          if (e == std::string::npos) e = item.link.size();
          EngineStats::Link& l = links_[item.link.substr(b, e - b)];
          l.bytes += item.bytes;
          l.busy_s += dur;
          if (!item.label.cat.empty()) {
            EngineStats::LinkPart& part = l.by_kind[item.label.cat];
            part.bytes += item.bytes;
            part.busy_s += dur;
          }
          b = e + 1;
        }
        busy_s_ += dur;
        if (trace_ != nullptr) {
          trace_->add({item.label.name, name_, item.label.cat, trace_->us_since_origin(start),
                       dur * 1e6, item.bytes, item.label.step});
        }
      } else if (!error_) {
        error_ = failure;
      }
      n_done_ = item.n;
    }
    cv_done_.notify_all();
  }
}

Mover::Mover(Backend& backend, DiskIo* disk, DeviceCopies* device_copies)
    : backend_(backend),
      disk_(disk),
      device_copies_(device_copies),
      host_(backend.memory_is_host()) {}

std::function<void()> Mover::device_copy(void* dst, const void* src, size_t bytes,
                                         bool to_device) {
  if (device_copies_ != nullptr) {
    return to_device ? device_copies_->to_device(dst, src, bytes)
                     : device_copies_->to_host(dst, src, bytes);
  }
  return device_copy_sync(dst, src, bytes, to_device);
}

std::function<void()> Mover::device_copy_sync(void* dst, const void* src, size_t bytes,
                                              bool to_device) {
  Backend& be = backend_;
  return [&be, dst, src, bytes, to_device] {
    if (to_device) {
      be.copy_to_device(dst, src, bytes);
    } else {
      be.copy_to_host(dst, src, bytes);
    }
    be.synchronize();
  };
}

std::function<void()> Mover::device_copy_later(void* dst, const void* src, size_t bytes) {
  if (device_copies_ != nullptr) return device_copies_->to_device_later(dst, src, bytes);
  return device_copy_sync(dst, src, bytes, true);
}

std::string Mover::link_name(Tier src, Tier dst) const {
  auto name = [&](Tier t) -> std::string {
    if (host_ && t == Tier::kGpu) return "cpu";
    return std::string(tier_name(t));
  };
  return name(src) + "->" + name(dst);
}

uint64_t Mover::copy(const Place& dst, const Place& src, size_t bytes, TransferQueue& queue,
                     TransferLabel label, void* relay) {
  const std::string link = link_name(src.tier, dst.tier);
  const bool src_disk = src.tier == Tier::kDisk, dst_disk = dst.tier == Tier::kDisk;
  STRATA_ASSERT_MSG(!(src_disk && dst_disk), "copy from disk to disk");
  if (src_disk || dst_disk) {
    STRATA_ASSERT_MSG(disk_ != nullptr, "copy to or from disk without a disk I/O layer");
  }
  DiskIo* disk = disk_;
  // Memory the disk I/O layer can reach directly: host RAM (cpu, or gpu when
  // the device computes on host memory).
  auto host_mem = [&](const Place& p) { return p.tier == Tier::kCpu || host_; };

  if (src_disk && host_mem(dst)) {
    const Ticket t = disk->read(*src.file, src.offset, dst.mem, bytes, queue.urgent());
    return queue.push([disk, t] { disk->wait(t); }, link, bytes, std::move(label));
  }
  if (dst_disk && host_mem(src)) {
    const Ticket t = disk->write(*dst.file, dst.offset, src.mem, bytes);
    return queue.push([disk, t] { disk->wait(t); }, link, bytes, std::move(label));
  }
  // A relay's host leg: the caller's buffer, or one made for this copy.
  std::shared_ptr<AlignedBuffer> owned;
  if ((src_disk || dst_disk) && relay == nullptr) {
    owned = std::make_shared<AlignedBuffer>(bytes);
    relay = owned->data();
  }
  if (src_disk) {
    // disk -> device memory: read into host staging, then up to the device
    // once the read is in (ordered now against the device's compute).
    const Ticket t = disk->read(*src.file, src.offset, relay, bytes, queue.urgent());
    std::function<void()> up = device_copy_later(dst.mem, relay, bytes);
    return queue.push(
        [disk, t, owned, up] {
          disk->wait(t);
          up();
        },
        link_name(Tier::kDisk, Tier::kCpu) + "," + link_name(Tier::kCpu, Tier::kGpu), bytes,
        std::move(label));
  }
  if (dst_disk) {
    // device memory -> disk: down to host staging, then to the file.
    std::function<void()> down = device_copy(relay, src.mem, bytes, false);
    const DiskFile* file = dst.file;
    const uint64_t offset = dst.offset;
    return queue.push(
        [disk, down, owned, relay, file, offset, bytes] {
          down();
          disk->wait(disk->write(*file, offset, relay, bytes));
        },
                      link_name(Tier::kGpu, Tier::kCpu) + "," + link_name(Tier::kCpu, Tier::kDisk),
                      bytes, std::move(label));
  }
  // Memory to memory.
  void* to = dst.mem;
  const void* from = src.mem;
  if (host_mem(src) && host_mem(dst)) {
    STRATA_ASSERT_MSG(to != from, "copy of {} bytes onto itself", bytes);
    return queue.push([to, from, bytes] { std::memcpy(to, from, bytes); }, link, bytes,
                      std::move(label));
  }
  if (host_mem(src) != host_mem(dst)) {
    return queue.push(device_copy(to, from, bytes, host_mem(src)), link, bytes, std::move(label));
  }
  Backend& be = backend_;
  return queue.push(
      [&be, to, from, bytes] {
        be.copy(to, from, bytes);
        be.synchronize();
      },
      link, bytes, std::move(label));
}

}  // namespace strata
