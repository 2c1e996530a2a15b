// Weight staging: a column's streamed weights (offload/weight_store.h: its
// disk share, and on a device with memory of its own its cpu share too)
// loaded ahead of its compute into one of two buffers used round robin: the
// load of column j+1 overlaps the compute of column j, and column j+2's load
// takes column j's buffer after column j's computes are done (on a device
// that queues compute, the copies into it are ordered after that compute by
// the device copies; offload/transfer.h).
//
// On host memory (MemoryMode::kHostMemory) a buffer is host RAM the disk
// share is read into, and the column's views point there. On a device with
// memory of its own a buffer is device memory laid out as [cpu matrices][disk
// tail]: the cpu matrices are copied from their RAM copies, the disk tail is
// read into the slot's host buffer (pinned on a GPU, registered with the disk
// I/O layer) and copied up.
//
// Which load a compute reads is the schedule's to say (offload/schedule.h:
// with tied embeddings a decode step's embed column reads the head's load of
// the step before); staging loads what it is told, into the buffer the
// schedule's order leaves free.
//
// The first read of each column's disk share in a run is checked against the
// pack's checksums, on the load queue right after the read (off the compute
// path); a mismatch ends the run with the pack set aside (Pack::fail_damaged).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "offload/disk_io.h"
#include "offload/memory_mode.h"
#include "offload/tier_pool.h"

namespace strata {

class Backend;
class Executor;
class Pack;
class WeightStore;

class WeightStaging {
 public:
  // `weights` and `pack` (null when nothing is on disk) outlive it. Host
  // buffers come from `ram`, device buffers from `backend`.
  WeightStaging(const WeightStore& weights, const Pack* pack, MemoryMode mode, Backend& backend,
                TierPool& ram);
  ~WeightStaging();

  // The host buffers disk reads land in (empty when nothing is read from
  // disk), for the disk I/O layer to register.
  std::vector<std::span<std::byte>> host_buffers();
  uint64_t host_bytes() const;    // RAM of both host buffers
  uint64_t device_bytes() const;  // device memory of both device buffers

  // Issues the load of column `column` for generation step `step` on the
  // executor's load queue.
  void load(int64_t column, int32_t step, Executor& exec);
  // Waits for that load; where the column's streamed share is (null when the
  // column streams nothing). The load must have been issued.
  const std::byte* staged(int64_t column, int32_t step, Executor& exec);
  // Forgets which column each buffer holds (a new block).
  void reset();

 private:
  struct Slot {
    PoolBlock host;    // disk reads land here
    DeviceBuffer dev;  // device memory not host memory: what the views read
    int64_t column = -1;
    int32_t step = -1;
    uint64_t load = 0;  // its last number on the load queue
  };

  const WeightStore& weights_;
  const Pack* pack_;
  MemoryMode mode_;
  std::array<Slot, 2> slots_;
  uint64_t n_loads_ = 0;
  DiskFile pack_file_;
  std::vector<uint8_t> verified_;  // [n_columns] disk share checked in this run
};

}  // namespace strata
