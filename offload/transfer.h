// Moving bytes between tiers (docs/DESIGN.md §3): one copy(dst, src) over
// every pair of places (device memory, host RAM, a range of a file on disk),
// with relays and staging inside it, and the transfer queues that run the
// copies in order beside compute.
//
// A TransferQueue is one ordered queue of transfers with a worker thread of
// its own (the engine has one for loads and one for stores): a transfer is
// started when it is queued (a disk request goes to the disk I/O layer at once,
// so several are in flight), and the worker finishes the transfers in queue
// order (waits for the disk, runs a relay's second leg, a device copy) and
// stamps each with its end time. Ordering between queues and compute is by
// sequence numbers: the caller waits for "everything up to n" of a queue
// before it uses or reuses the memory, never for a global barrier.
//
// Time accounting: a transfer's span on its queue runs from when it was
// queued or the previous transfer of the queue ended, whichever is later,
// to its end, so the spans of a queue do not overlap and their sum is the
// time the queue had work: the busy time of the queue and of the link
// ("disk->cpu", "cpu->disk", "cpu->gpu", "gpu->cpu") the bytes crossed.
//
// Invariants: memory handed to a transfer stays valid and untouched (loads)
// or unchanged (stores) until its number is done; a failed transfer's Error
// is rethrown by the next wait on its queue (and by drain), and a queue
// never destroys itself with transfers in flight (the destructor waits).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "generate/engine.h"
#include "offload/disk_io.h"
#include "offload/tier_pool.h"

namespace strata {

class Backend;
class Trace;

// Where bytes are: memory of the gpu or cpu tier, or a range of a disk file.
struct Place {
  Tier tier = Tier::kCpu;
  void* mem = nullptr;             // gpu, cpu
  const DiskFile* file = nullptr;  // disk
  uint64_t offset = 0;             // disk

  static Place memory(Tier t, void* p) { return Place{t, p, nullptr, 0}; }
  static Place disk(const DiskFile& f, uint64_t offset) { return Place{Tier::kDisk, nullptr, &f, offset}; }
};

// What a transfer is, for the trace and the statistics.
struct TransferLabel {
  std::string name;  // "weights blk.3", "kv layer 2 k=1"
  std::string cat;   // "weights", "kv", "activations"
  int32_t step = -1;
};

class TransferQueue {
 public:
  // `name`: "load", "store" or "urgent load", the queue's name in traces
  // and reports. `urgent`: its disk reads go ahead of every other queue's
  // not yet under way (DiskIo::read), for a read compute waits for now.
  TransferQueue(std::string name, Trace* trace, bool urgent = false);
  ~TransferQueue();
  TransferQueue(const TransferQueue&) = delete;
  TransferQueue& operator=(const TransferQueue&) = delete;

  const std::string& name() const { return name_; }
  bool urgent() const { return urgent_; }

  // Queues a started transfer: `finish` (run on the worker, in order) blocks
  // until it is complete and throws Error when it failed. `link` names the
  // link the bytes cross ("a,b" for a relay over two; empty for work that
  // moves nothing, e.g. a check of bytes a transfer before it brought).
  // Returns its number (1, 2, ...).
  uint64_t push(std::function<void()> finish, const std::string& link, uint64_t bytes,
                TransferLabel label);
  // The number of the last transfer queued (0: none yet).
  uint64_t last() const;
  // Blocks until transfers 1..n are done; rethrows the queue's first failure.
  void wait(uint64_t n);
  void drain() { wait(last()); }
  bool done(uint64_t n) const;
  uint64_t n_done() const;  // transfers 1..n_done() are done

  // Per link: bytes and busy seconds, summed over finished transfers.
  std::map<std::string, EngineStats::Link> links() const;
  double busy_s() const;

 private:
  struct Item {
    uint64_t n = 0;
    std::function<void()> finish;
    std::string link;
    uint64_t bytes = 0;
    TransferLabel label;
    std::chrono::steady_clock::time_point queued;
  };
  void run();

  std::string name_;
  Trace* trace_;
  bool urgent_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::deque<Item> items_;
  uint64_t n_queued_ = 0, n_done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point last_end_;
  std::map<std::string, EngineStats::Link> links_;
  double busy_s_ = 0;
  std::thread worker_;
};

// Host<->device copies on queues of their own, for a device whose memory is
// not host memory (the CUDA device plugs in CudaCopyQueues here: each
// direction on its own stream, completion by events; offload/device.h). A
// copy is ordered after the compute queued on the device before the call
// that starts it (so it never overwrites a buffer a queued op still reads,
// nor reads one a queued op still writes), and not after compute queued
// later. to_device and to_host start a copy and return the function that
// blocks until it is done. to_device_later is for a source that is not ready
// yet (a disk read still landing in it): it takes its place in the order now
// and returns the function that starts the copy and waits for it.
class DeviceCopies {
 public:
  virtual ~DeviceCopies() = default;
  virtual std::function<void()> to_device(void* dst, const void* src_host, size_t bytes) = 0;
  virtual std::function<void()> to_device_later(void* dst, const void* src_host,
                                                size_t bytes) = 0;
  virtual std::function<void()> to_host(void* dst_host, const void* src, size_t bytes) = 0;
};

// One copy(dst, src) for every pair of places. Memory of the gpu tier is
// the backend's device memory; when the backend computes on host memory
// (Backend::memory_is_host) it is host RAM like the cpu tier, so a copy
// between them is a plain memcpy and disk reads and writes reach it
// directly. Otherwise disk<->gpu relays through a host staging buffer
// (disk->cpu then cpu->gpu, one leg after the other on the same queue, the
// bytes counted on both links) and cpu<->gpu goes through `device_copies`,
// or the backend's synchronous copies when there are none.
class Mover {
 public:
  // `disk` may be null when nothing touches the disk tier; `device_copies`
  // may be null.
  Mover(Backend& backend, DiskIo* disk, DeviceCopies* device_copies = nullptr);

  // Starts moving `bytes` from `src` to `dst` on `queue`; returns its
  // number there. Disk offsets and lengths need no alignment (the disk
  // engine bounces what O_DIRECT cannot take). `relay`: host memory of at
  // least `bytes` for the host leg of a disk<->device copy (pinned, and
  // registered with the disk I/O layer, where the caller has such a buffer);
  // it must stay untouched until the copy is done. Null: a buffer is
  // allocated for the copy.
  uint64_t copy(const Place& dst, const Place& src, size_t bytes, TransferQueue& queue,
                TransferLabel label, void* relay = nullptr);

  // The link a copy crosses, as reports name it: "disk->cpu", "cpu->disk",
  // "cpu->gpu", "gpu->cpu", "cpu->cpu" (on a device computing on host
  // memory the gpu tier is reported as cpu).
  std::string link_name(Tier src, Tier dst) const;

 private:
  // Starts a host<->device copy; the function waits for it.
  std::function<void()> device_copy(void* dst, const void* src, size_t bytes, bool to_device);
  // A host->device copy whose source is not ready yet; the function starts
  // it and waits for it.
  std::function<void()> device_copy_later(void* dst, const void* src, size_t bytes);
  // The backend's own (synchronous) copy, run when the function is called.
  std::function<void()> device_copy_sync(void* dst, const void* src, size_t bytes, bool to_device);

  Backend& backend_;
  DiskIo* disk_;
  DeviceCopies* device_copies_;
  bool host_;
};

}  // namespace strata
