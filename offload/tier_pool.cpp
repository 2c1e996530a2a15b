// TierPool: lock-free budget accounting (compare-and-swap on the use, a
// running maximum for the peak) and the default host allocator.
#include "offload/tier_pool.h"

#include <cstdlib>
#include <utility>

#include "core/error.h"
#include "core/units.h"

namespace strata {

std::string_view tier_budget_flag(Tier t) {
  switch (t) {
    case Tier::kGpu:
      return "--gpu-mem";
    case Tier::kCpu:
      return "--cpu-mem";
    case Tier::kDisk:
      return "--disk-mem";
  }
  STRATA_ASSERT_MSG(false, "bad tier {}", static_cast<int>(t));
  return {};
}

namespace {

class HostAllocator final : public TierAllocator {
 public:
  void* allocate(size_t bytes, size_t alignment) override {
    return std::aligned_alloc(alignment, align_up(bytes == 0 ? 1 : bytes, alignment));
  }
  void deallocate(void* p, size_t) override { std::free(p); }
  std::string_view name() const override { return "host"; }
};

}  // namespace

std::unique_ptr<TierAllocator> make_host_allocator() {
  return std::make_unique<HostAllocator>();
}

// ---- Reservation / PoolBlock ----

Reservation::Reservation(Reservation&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

Reservation& Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::exchange(o.pool_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void Reservation::release() {
  if (pool_) pool_->give_back(bytes_);
  pool_ = nullptr;
  bytes_ = 0;
}

PoolBlock::PoolBlock(PoolBlock&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

PoolBlock& PoolBlock::operator=(PoolBlock&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = std::exchange(o.pool_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void PoolBlock::reset() {
  if (pool_) {
    pool_->allocator_->deallocate(data_, size_);
    pool_->give_back(size_);
  }
  pool_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

// ---- TierPool ----

TierPool::TierPool(Tier tier, uint64_t budget, std::unique_ptr<TierAllocator> allocator)
    : tier_(tier), budget_(budget), allocator_(std::move(allocator)) {}

TierPool::~TierPool() {
  STRATA_ASSERT_MSG(used() == 0, "{} tier pool destroyed with {} bytes still taken",
                    tier_name(tier_), used());
}

uint64_t TierPool::available() const {
  const uint64_t u = used();
  return u >= budget_ ? 0 : budget_ - u;
}

std::string_view TierPool::allocator_name() const {
  return allocator_ ? allocator_->name() : "none";
}

void TierPool::reset_peak() {
  peak_.store(used(), std::memory_order_relaxed);
}

void TierPool::take(uint64_t bytes, std::string_view what) {
  uint64_t cur = used_.load(std::memory_order_relaxed);
  for (;;) {
    if (bytes > budget_ || cur > budget_ - bytes) {
      const uint64_t left = cur >= budget_ ? 0 : budget_ - cur;
      fail(
          "{} tier: {} needs {} but only {} of the {} budget is left ({} in use); raise {} or "
          "lower the batch size",
          tier_name(tier_), what, format_bytes(static_cast<double>(bytes)),
          format_bytes(static_cast<double>(left)), format_bytes(static_cast<double>(budget_)),
          format_bytes(static_cast<double>(cur)), tier_budget_flag(tier_));
    }
    if (used_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed)) break;
  }
  const uint64_t now = cur + bytes;
  uint64_t p = peak_.load(std::memory_order_relaxed);
  while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

void TierPool::give_back(uint64_t bytes) {
  const uint64_t before = used_.fetch_sub(bytes, std::memory_order_relaxed);
  STRATA_ASSERT(before >= bytes);
}

Reservation TierPool::reserve(uint64_t bytes, std::string_view what) {
  take(bytes, what);
  return Reservation(this, bytes);
}

PoolBlock TierPool::allocate(uint64_t bytes, std::string_view what, size_t alignment) {
  STRATA_ASSERT_MSG(allocator_ != nullptr, "the {} tier pool has no allocator", tier_name(tier_));
  take(bytes, what);
  void* p = allocator_->allocate(bytes, alignment);
  if (!p) {
    give_back(bytes);
    fail(
        "{} tier: {} needs {} of {} memory, which the system could not provide (the {} budget "
        "allows it); lower {} to what the machine has",
        tier_name(tier_), what, format_bytes(static_cast<double>(bytes)), allocator_->name(),
        format_bytes(static_cast<double>(budget_)), tier_budget_flag(tier_));
  }
  PoolBlock b;
  b.pool_ = this;
  b.data_ = static_cast<std::byte*>(p);
  b.size_ = bytes;
  return b;
}

}  // namespace strata
