// The executor's queues and compute spans (executor.h).
#include "offload/executor.h"

#include <chrono>

#include <fmt/format.h>

#include "kernels/backend.h"
#include "offload/trace.h"

namespace strata {

std::string step_name(const ScheduleStep& s) {
  switch (s.kind) {
    case StageKind::kEmbed:
      return fmt::format("embed k={}", s.micro_batch);
    case StageKind::kHead:
      return fmt::format("head k={}", s.micro_batch);
    case StageKind::kLayer:
      break;
  }
  return fmt::format("layer {} k={}", s.layer, s.micro_batch);
}

Executor::Executor(Backend& backend, DiskIo* disk, std::shared_ptr<Trace> trace,
                   DeviceCopies* device_copies)
    : backend_(backend),
      trace_(std::move(trace)),
      mover_(backend, disk, device_copies),
      loads_("load", trace_.get()),
      stores_("store", trace_.get()),
      urgent_loads_("urgent load", trace_.get(), true) {}

Executor::~Executor() = default;  // the queues finish what is in flight

void Executor::end_compute(const ScheduleStep& s, std::chrono::steady_clock::time_point t0) {
  // Ops queued on a device finish here, so the span is the compute's.
  backend_.synchronize();
  const auto t1 = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(t1 - t0).count();
  compute_busy_s_ += dt;
  if (trace_) {
    trace_->add({step_name(s), "compute", "compute", trace_->us_since_origin(t0), dt * 1e6, 0,
                 s.step});
  }
}

void Executor::drain() {
  // Every queue finishes even when one failed; the first failure is rethrown.
  std::exception_ptr failure;
  for (TransferQueue* q : {&loads_, &stores_, &urgent_loads_}) {
    try {
      q->drain();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

void Executor::add_stats(EngineStats& s) const {
  s.queue_busy_s["compute"] += compute_busy_s_;
  // A link's busy time sums its queues' (the urgent loads' may overlap the
  // loads').
  for (const TransferQueue* q : {&loads_, &stores_, &urgent_loads_}) {
    for (const auto& [name, l] : q->links()) {
      EngineStats::Link& d = s.links[name];
      d.bytes += l.bytes;
      d.busy_s += l.busy_s;
      for (const auto& [kind, part] : l.by_kind) {
        d.by_kind[kind].bytes += part.bytes;
        d.by_kind[kind].busy_s += part.busy_s;
      }
    }
    if (q->last() > 0) s.queue_busy_s[q->name()] += q->busy_s();
  }
}

}  // namespace strata
