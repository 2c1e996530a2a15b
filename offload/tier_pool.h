// Byte budgets of the three tiers (docs/DESIGN.md §2): gpu (memory of the compute
// device), cpu (host RAM) and disk (files in the offload directory). Every
// byte a run keeps in a tier is taken from that tier's pool, either as memory
// the pool allocates (PoolBlock) or as accounting for memory or file space
// held elsewhere (Reservation); both give their bytes back when destroyed.
//
// Invariant: used() <= budget() at all times. A request that would exceed the
// budget throws Error naming the tier, the bytes asked for, the bytes left and
// the flag that raises the budget; a pool never grows silently. peak() is the
// highest used() seen, for the run report. Thread-safe.
//
// The memory itself comes from a TierAllocator: aligned host memory by
// default; a CUDA device supplies pinned host memory (cpu tier) and device
// memory (gpu tier) through the same interface.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/tier.h"
#include "offload/aligned_buffer.h"

namespace strata {

// Tier and tier_name ("gpu", "cpu", "disk"): core/tier.h.
std::string_view tier_budget_flag(Tier t);  // "--gpu-mem", "--cpu-mem", "--disk-mem"

// Where a pool's memory comes from. allocate returns nullptr when the memory
// is not available (the pool turns that into an Error).
class TierAllocator {
 public:
  virtual ~TierAllocator() = default;
  virtual void* allocate(size_t bytes, size_t alignment) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
  virtual std::string_view name() const = 0;  // "host", "pinned", "device", for logs
};

// Aligned pageable host memory (aligned_alloc).
std::unique_ptr<TierAllocator> make_host_allocator();

class TierPool;

// Bytes of a pool's budget held by the owner of this object; given back on
// destruction or release(). Move-only. The pool must outlive it.
class Reservation {
 public:
  Reservation() = default;
  ~Reservation() { release(); }
  Reservation(Reservation&& o) noexcept;
  Reservation& operator=(Reservation&& o) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

  uint64_t bytes() const { return bytes_; }
  void release();

 private:
  friend class TierPool;
  Reservation(TierPool* pool, uint64_t bytes) : pool_(pool), bytes_(bytes) {}
  TierPool* pool_ = nullptr;
  uint64_t bytes_ = 0;
};

// Memory allocated by a pool (and counted against its budget); freed and
// given back on destruction. Move-only. The pool must outlive it.
class PoolBlock {
 public:
  PoolBlock() = default;
  ~PoolBlock() { reset(); }
  PoolBlock(PoolBlock&& o) noexcept;
  PoolBlock& operator=(PoolBlock&& o) noexcept;
  PoolBlock(const PoolBlock&) = delete;
  PoolBlock& operator=(const PoolBlock&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }  // bytes asked for
  bool empty() const { return data_ == nullptr; }
  void reset();

 private:
  friend class TierPool;
  TierPool* pool_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

class TierPool {
 public:
  // `allocator` may be null for a pool that only accounts (the disk tier);
  // allocate() on such a pool is a broken invariant.
  TierPool(Tier tier, uint64_t budget, std::unique_ptr<TierAllocator> allocator = nullptr);
  ~TierPool();
  TierPool(const TierPool&) = delete;
  TierPool& operator=(const TierPool&) = delete;

  // Takes `bytes` of the budget; throws Error when fewer are left. `what`
  // names the data in the message ("weights of layer 3").
  Reservation reserve(uint64_t bytes, std::string_view what);
  // reserve() plus memory from the allocator, aligned to `alignment`.
  PoolBlock allocate(uint64_t bytes, std::string_view what, size_t alignment = kDiskAlign);

  Tier tier() const { return tier_; }
  uint64_t budget() const { return budget_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  uint64_t available() const;
  bool can_allocate() const { return allocator_ != nullptr; }
  std::string_view allocator_name() const;
  // Starts a new peak measurement at the current use.
  void reset_peak();

 private:
  friend class Reservation;
  friend class PoolBlock;
  void take(uint64_t bytes, std::string_view what);
  void give_back(uint64_t bytes);

  Tier tier_;
  uint64_t budget_;
  std::unique_ptr<TierAllocator> allocator_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> peak_{0};
};

}  // namespace strata
