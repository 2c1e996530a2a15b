// The executor: consumes the steps of a block schedule (offload/schedule.h)
// in order and overlaps their transfers with compute. Compute runs on the
// calling thread; loads and stores run on two TransferQueues
// (offload/transfer.h), each with a worker thread of its own, the disk
// requests in flight in the disk I/O layer. There is no barrier after a step:
// a step issues the stores and loads attached to it (which start at once),
// then computes, waiting only for the transfers its own compute needs (the
// owner of the data says which, by queue numbers).
//
// What a transfer moves and what a compute does is the owner's business
// (ExecutorHooks): the executor walks the list, times each compute span,
// and keeps the statistics and the trace of all three queues.
//
// On a device whose memory is not host memory the hooks' loads land in
// device memory through Mover::copy (relays inside), and compute is queued
// on the device; the executor itself touches no data.
#pragma once

#include <cstdint>
#include <functional>
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

struct ExecutorHooks {
  // Called before the first step of generation step i; false ends the block
  // (every sequence has finished).
  std::function<bool(int32_t step)> begin_step;
  // Issue the transfers attached to a step (before its compute).
  std::function<void(const ScheduleStep& at, const Transfer& t)> store;
  std::function<void(const ScheduleStep& at, const Transfer& t)> load;
  // Wait for what the step's compute needs (its loads, the buffers it
  // writes being free) and point its views there; not timed as compute.
  std::function<void(const ScheduleStep& s)> prepare;
  // Compute the step.
  std::function<void(const ScheduleStep& s)> compute;
  // After the last compute of generation step i (outside its compute span):
  // hand the results over.
  std::function<void(int32_t step)> end_step;
};

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
  Trace* trace() const { return trace_.get(); }

  // Walks `steps`: for each, begin_step at a new generation step, then the
  // stores and loads attached to it, then prepare and its compute (one span
  // on the compute queue), then end_step after the last step of a
  // generation step.
  void run(const std::vector<ScheduleStep>& steps, const ExecutorHooks& hooks);

  // Waits for every transfer issued so far (end of a block; before memory a
  // transfer may still use is released). Rethrows a transfer's failure.
  void drain();

  // Links and queue busy times measured so far ("compute", "load", "store").
  void add_stats(EngineStats& s) const;

 private:
  Backend& backend_;
  std::shared_ptr<Trace> trace_;
  Mover mover_;
  TransferQueue loads_;
  TransferQueue stores_;
  double compute_busy_s_ = 0;
};

// "embed k=0", "layer 3 k=1", "head k=0"
std::string step_name(const ScheduleStep& s);

}  // namespace strata
