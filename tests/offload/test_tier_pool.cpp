// Tier pools: budgets enforced with an actionable Error, use and peak
// measured, memory aligned and given back, the allocator hook, and the
// budget holding under concurrent use.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/error.h"
#include "offload/tier_pool.h"

namespace strata {
namespace {

TEST(TierPool, TracksUseAndPeak) {
  TierPool pool(Tier::kCpu, 1000, make_host_allocator());
  EXPECT_EQ(pool.budget(), 1000u);
  {
    Reservation a = pool.reserve(300, "a");
    EXPECT_EQ(pool.used(), 300u);
    {
      Reservation b = pool.reserve(700, "b");  // exactly the budget
      EXPECT_EQ(pool.used(), 1000u);
      EXPECT_EQ(pool.available(), 0u);
    }
    EXPECT_EQ(pool.used(), 300u);
    Reservation c = std::move(a);
    EXPECT_EQ(a.bytes(), 0u);
    EXPECT_EQ(c.bytes(), 300u);
    EXPECT_EQ(pool.used(), 300u);
    c.release();
    EXPECT_EQ(pool.used(), 0u);
  }
  EXPECT_EQ(pool.peak(), 1000u);
  pool.reset_peak();
  EXPECT_EQ(pool.peak(), 0u);
  Reservation d = pool.reserve(10, "d");
  EXPECT_EQ(pool.peak(), 10u);
}

TEST(TierPool, ExceedingTheBudgetNamesTierBytesAndFlag) {
  const struct {
    Tier tier;
    const char* name;
    const char* flag;
  } cases[] = {{Tier::kGpu, "gpu tier", "--gpu-mem"},
               {Tier::kCpu, "cpu tier", "--cpu-mem"},
               {Tier::kDisk, "disk tier", "--disk-mem"}};
  for (const auto& c : cases) {
    TierPool pool(c.tier, uint64_t{16} << 30);
    Reservation r = pool.reserve(uint64_t{15} << 30, "the KV cache");
    try {
      pool.reserve(uint64_t{2} << 30, "weights of layer 3");
      ADD_FAILURE() << "no Error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(c.name), std::string::npos) << m;
      EXPECT_NE(m.find("weights of layer 3"), std::string::npos) << m;
      EXPECT_NE(m.find("needs 2.00G"), std::string::npos) << m;
      EXPECT_NE(m.find("only 1.00G of the 16.0G budget"), std::string::npos) << m;
      EXPECT_NE(m.find(c.flag), std::string::npos) << m;
    }
    EXPECT_EQ(pool.used(), uint64_t{15} << 30);  // a refused request takes nothing
    EXPECT_EQ(pool.peak(), uint64_t{15} << 30);
  }
}

TEST(TierPool, AllocatesAlignedMemoryAndGivesItBack) {
  TierPool pool(Tier::kCpu, 1 << 20, make_host_allocator());
  EXPECT_TRUE(pool.can_allocate());
  EXPECT_EQ(pool.allocator_name(), "host");
  {
    PoolBlock a = pool.allocate(5000, "a");
    PoolBlock b = pool.allocate(3, "b", 64);
    EXPECT_TRUE(is_aligned(a.data(), kDiskAlign));
    EXPECT_TRUE(is_aligned(b.data(), 64));
    std::memset(a.data(), 1, a.size());
    std::memset(b.data(), 2, b.size());
    EXPECT_EQ(pool.used(), 5003u);
    PoolBlock c = std::move(a);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(c.size(), 5000u);
    EXPECT_THROW(pool.allocate(1 << 20, "too much"), Error);
    EXPECT_EQ(pool.used(), 5003u);
  }
  EXPECT_EQ(pool.used(), 0u);
  EXPECT_EQ(pool.peak(), 5003u);
}

// An allocator that counts, and fails on request: the hook a CUDA device uses.
class CountingAllocator final : public TierAllocator {
 public:
  std::atomic<int> live{0};
  bool fail_next = false;
  void* allocate(size_t bytes, size_t alignment) override {
    if (fail_next) return nullptr;
    ++live;
    return make_host_allocator()->allocate(bytes, alignment);
  }
  void deallocate(void* p, size_t bytes) override {
    --live;
    make_host_allocator()->deallocate(p, bytes);
  }
  std::string_view name() const override { return "counting"; }
};

TEST(TierPool, UsesItsAllocatorAndReportsWhenItFails) {
  auto alloc = std::make_unique<CountingAllocator>();
  CountingAllocator* a = alloc.get();
  TierPool pool(Tier::kGpu, 1 << 20, std::move(alloc));
  {
    PoolBlock b = pool.allocate(100, "x");
    EXPECT_EQ(a->live.load(), 1);
  }
  EXPECT_EQ(a->live.load(), 0);
  a->fail_next = true;
  try {
    pool.allocate(4096, "pinned staging");
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gpu tier"), std::string::npos) << m;
    EXPECT_NE(m.find("counting"), std::string::npos) << m;
    EXPECT_NE(m.find("--gpu-mem"), std::string::npos) << m;
  }
  EXPECT_EQ(pool.used(), 0u);
}

TEST(TierPool, TheBudgetHoldsUnderConcurrentUse) {
  constexpr uint64_t kBudget = 1000;
  TierPool pool(Tier::kCpu, kBudget);
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Reservation> held;
      for (int i = 0; i < 20000; ++i) {
        const uint64_t n = 1 + (i * 7 + t * 13) % 97;
        try {
          held.push_back(pool.reserve(n, "x"));
        } catch (const Error&) {
          ++refused;
        }
        if (held.size() > 3) held.erase(held.begin());
        EXPECT_LE(pool.used(), kBudget);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(pool.used(), 0u);
  EXPECT_LE(pool.peak(), kBudget);
  EXPECT_GT(pool.peak(), 0u);
}

TEST(TierPool, Names) {
  EXPECT_EQ(tier_name(Tier::kGpu), "gpu");
  EXPECT_EQ(tier_name(Tier::kCpu), "cpu");
  EXPECT_EQ(tier_name(Tier::kDisk), "disk");
  EXPECT_EQ(tier_budget_flag(Tier::kDisk), "--disk-mem");
}

}  // namespace
}  // namespace strata
