// The byte budgets of one engine's tiers and the checks against them. RAM
// is --cpu-mem (default: the RAM available now; on the CPU device --gpu-mem
// is added, both tiers being RAM), device memory --gpu-mem (default: the
// device's free memory less a margin, offload/device.h), disk --disk-mem
// (default: the free space of the offload directory). The checks run before
// any work and each failure is one Error naming the tier, its flag, the
// bytes needed and what they are for: the weights and their staging when
// the engine is made, and a block (offload/block_budget.h) before its first
// compute, or a planned full block when the engine is made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "offload/block_budget.h"
#include "offload/memory_mode.h"
#include "offload/tier_pool.h"

namespace strata {

struct WeightPlacement;

// RAM available now (MemAvailable of /proc/meminfo), 0 when unknown: the
// default budget of the cpu tier.
uint64_t available_ram_bytes();

// Bytes of each tier (device memory, RAM, disk).
struct TierBytes {
  uint64_t device = 0, ram = 0, disk = 0;
};

// What the weights as placed hold for the whole run in a memory mode: the
// matrices and vectors where they are used (in place on host memory), and
// the staging of their streamed share (two host buffers for the largest disk
// read; on a device with memory of its own two device buffers for the
// largest streamed column, its matrices 256-byte aligned). `staging` gets
// the staging part of each tier, for messages.
TierBytes weight_tier_bytes(const WeightPlacement& wp, MemoryMode mode,
                            TierBytes* staging = nullptr);

// The budgets of a run (the defaults as TierBudgets applies them). Error for
// an offload directory that cannot be made.
struct BudgetRequest {
  uint64_t gpu_mem = 0, cpu_mem = 0, disk_mem = 0;  // 0: the default
  uint64_t default_device_bytes = 0;                // the device's default budget
  std::string offload_dir;                          // needed when `need_dir`
  bool need_dir = false;                            // something lives on disk
};
TierBytes tier_budgets_for(const BudgetRequest& r, MemoryMode mode);

class TierBudgets {
 public:
  struct Options : BudgetRequest {
    std::string device_name;  // for messages
  };
  // `host_allocator`: the cpu tier's memory (pinned on a GPU). Error for a
  // device memory budget of 0 and an offload directory that cannot be made.
  TierBudgets(const Options& o, MemoryMode mode, std::unique_ptr<TierAllocator> host_allocator);

  TierPool& ram() { return *ram_; }
  TierPool& disk() { return *disk_; }
  TierPool* gpu() { return gpu_.get(); }  // null on host memory
  const TierPool& ram() const { return *ram_; }
  const TierPool& disk() const { return *disk_; }
  const TierPool* gpu() const { return gpu_.get(); }
  // "--cpu-mem", or "--cpu-mem + --gpu-mem: ..." where both are RAM.
  std::string ram_flags() const;

  // The weights as placed with their staging (weight_tier_bytes), and in RAM
  // `draft_fixed` bytes of a draft model's (DraftMemory::fixed): Error when a
  // tier cannot hold them. Records them as the engine's fixed memory.
  void check_weights(const WeightPlacement& wp, uint64_t draft_fixed = 0);
  // The fixed memory as the weights actually hold it.
  void set_fixed(uint64_t ram, uint64_t device) {
    fixed_ram_ = ram;
    fixed_device_ = device;
  }
  uint64_t fixed_ram() const { return fixed_ram_; }
  uint64_t fixed_device() const { return fixed_device_; }

  // A block of `n_seqs` sequences of up to `longest` tokens: its KV pages
  // against the KV budget `kv_cap_bytes` (pages of `bytes_per_page`,
  // `page_size` tokens), and every tier against its budget with the
  // weights (`weights_disk` bytes of them on disk).
  void check_block(const BlockMemory& m, int64_t n_seqs, int64_t longest, uint64_t kv_cap_bytes,
                   uint64_t bytes_per_page, int64_t page_size, uint64_t weights_disk) const;

 private:
  MemoryMode mode_;
  Options o_;
  std::unique_ptr<TierPool> ram_, disk_, gpu_;
  uint64_t fixed_ram_ = 0, fixed_device_ = 0;
};

}  // namespace strata
