// The executor: the queues that overlap a block schedule's transfers
// (offload/schedule.h) with compute. Compute runs on the calling thread;
// loads and stores run on two TransferQueues (offload/transfer.h), each with
// a worker thread of its own (and a third, urgent, for the few loads compute
// waits for as soon as it issues them: sparse attention's pages the
// prefetch missed), the disk requests in flight in the disk I/O
// layer. There is no barrier after a step: a step issues the stores and
// loads attached to it (which start at once), then computes, waiting only
// for the transfers its own compute needs (the owner of the data says which,
// by queue numbers). The engine walks the schedule (offload/offload_engine.h)
// and hands each transfer to the mover and each compute to compute(), which
// times it and keeps the statistics and the trace of all three queues.
//
// On a device whose memory is not host memory loads land in device memory
// through Mover::copy (relays inside), and compute is queued on the device;
// the executor itself touches no data.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "generate/engine.h"
#include "offload/schedule.h"
#include "offload/transfer.h"

namespace strata {

class Backend;
class DiskIo;
class Trace;

class Executor {
 public:
  // `disk` may be null when nothing lives on disk; `trace` and
  // `device_copies` (offload/transfer.h) may be null.
  Executor(Backend& backend, DiskIo* disk, std::shared_ptr<Trace> trace,
           DeviceCopies* device_copies = nullptr);
  ~Executor();

  Mover& mover() { return mover_; }
  TransferQueue& loads() { return loads_; }
  TransferQueue& stores() { return stores_; }
  TransferQueue& urgent_loads() { return urgent_loads_; }
  Trace* trace() const { return trace_.get(); }

  // Runs `f`, the compute of schedule step `s`, as one span of the compute
  // queue: ops queued on the device finish before the span ends.
  template <class F>
  void compute(const ScheduleStep& s, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    end_compute(s, t0);
  }

  // Waits for every transfer issued so far (end of a block; before memory a
  // transfer may still use is released). Rethrows a transfer's failure.
  void drain();

  // Links and queue busy times measured so far ("compute", "load", "store").
  void add_stats(EngineStats& s) const;

 private:
  void end_compute(const ScheduleStep& s, std::chrono::steady_clock::time_point t0);

  Backend& backend_;
  std::shared_ptr<Trace> trace_;
  Mover mover_;
  TransferQueue loads_;
  TransferQueue stores_;
  TransferQueue urgent_loads_;
  double compute_busy_s_ = 0;
};

// "embed k=0", "layer 3 k=1", "head k=0"
std::string step_name(const ScheduleStep& s);

}  // namespace strata
