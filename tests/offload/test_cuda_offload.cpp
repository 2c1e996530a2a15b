// The CUDA pieces of offload (offload/cuda_memory.h): device and pinned
// memory behind TierPool with its byte budget, streams and events, and the
// copy queues (loads and stores ordered by events). Label cuda: skips
// without a GPU. The pinned allocator's fallback to pageable memory is in
// test_cuda_offload_host.cpp (label cpu).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cuda_test_util.h"
#include "offload/cuda_memory.h"

namespace strata {
namespace {

TEST(CudaPools, DeviceBlocksAlignedAndBudgetEnforced) {
  STRATA_REQUIRE_GPU();
  auto pool = make_cuda_gpu_pool(0, 8 << 20);
  EXPECT_EQ(pool->tier(), Tier::kGpu);
  EXPECT_EQ(pool->allocator_name(), "device");
  PoolBlock a = pool->allocate(3 << 20, "test block");  // default alignment: kDiskAlign
  PoolBlock b = pool->allocate(1000, "small block", 64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kDiskAlign, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, a.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(pool->used(), (3u << 20) + 1000u);
  EXPECT_THROW(pool->allocate(6 << 20, "too much"), Error);
  a.reset();
  PoolBlock c = pool->allocate(6 << 20, "fits now", 1 << 16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data()) % (1 << 16), 0u);
  EXPECT_GE(pool->peak(), (6u << 20) + 1000u);
}

TEST(CudaPools, PinnedHostBlocksArePinned) {
  STRATA_REQUIRE_GPU();
  auto pool = make_pinned_cpu_pool(16 << 20);
  EXPECT_EQ(pool->allocator_name(), "pinned");
  PoolBlock a = pool->allocate(5 << 20, "pinned block");
  PoolBlock b = pool->allocate(100, "odd alignment", 1 << 14);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kDiskAlign, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (1 << 14), 0u);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, a.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  std::memset(a.data(), 7, 5 << 20);  // host-writable
}

TEST(CudaCopyQueues, LoadsAndStoresOrderedByEvents) {
  STRATA_REQUIRE_GPU();
  const size_t n = (4 << 20) + 12;
  auto gpu = make_cuda_gpu_pool(0, 64 << 20);
  auto cpu = make_pinned_cpu_pool(64 << 20);
  PoolBlock src = cpu->allocate(n, "src");
  PoolBlock dst = cpu->allocate(n, "dst");
  PoolBlock dev = gpu->allocate(n, "dev");
  auto* s = reinterpret_cast<uint8_t*>(src.data());
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<uint8_t>(i * 131 + 7);
  std::memset(dst.data(), 0, n);
  CudaCopyQueues q(0);
  CudaEvent never_recorded;
  EXPECT_TRUE(never_recorded.done());
  // The store runs on the other stream; only the event orders it after the load.
  CudaEvent loaded = q.load(dev.data(), src.data(), n);
  CudaEvent stored = q.store(dst.data(), dev.data(), n, &loaded);
  stored.synchronize();
  EXPECT_TRUE(loaded.done());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0);
  EXPECT_EQ(q.bytes_loaded(), n);
  EXPECT_EQ(q.bytes_stored(), n);
  // A chain: load, then a second load into the same buffer after a store of
  // the first; the final store sees the second.
  std::vector<uint8_t> second(n, 0x3c);
  std::memcpy(src.data(), second.data(), n);  // the first load has finished (synchronized)
  CudaEvent l2 = q.load(dev.data(), src.data(), n, &stored);
  CudaEvent s2 = q.store(dst.data(), dev.data(), n, &l2);
  q.synchronize();
  EXPECT_TRUE(s2.done());
  EXPECT_EQ(std::memcmp(dst.data(), second.data(), n), 0);
  // Another stream can wait on a queue's event.
  CudaStream other(0);
  other.wait(s2);
  other.synchronize();
  CudaEvent e;
  e.record(other);
  e.synchronize();
}

}  // namespace
}  // namespace strata
