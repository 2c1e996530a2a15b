// The pinned host allocator where pinning may be impossible: on a machine
// without a GPU or driver it hands out pageable memory (and says so once in
// the log); with a GPU the memory is pinned. Either way blocks are aligned as
// asked, writable, and given back. Label cpu: runs anywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>

#include "offload/cuda_memory.h"

namespace strata {
namespace {

TEST(PinnedHostAllocator, AlignedWritableMemoryWithOrWithoutADriver) {
  int n_dev = 0;
  const bool gpu = cudaGetDeviceCount(&n_dev) == cudaSuccess && n_dev > 0;
  cudaGetLastError();
  auto pool = make_pinned_cpu_pool(64 << 20);
  for (size_t align : {size_t{64}, size_t{4096}, size_t{1} << 16}) {
    PoolBlock b = pool->allocate((3 << 20) + 5, "block", align);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % align, 0u);
    std::memset(b.data(), 0x5a, (3 << 20) + 5);
    cudaPointerAttributes attr{};
    const bool known = cudaPointerGetAttributes(&attr, b.data()) == cudaSuccess;
    cudaGetLastError();
    if (gpu) {
      ASSERT_TRUE(known);
      EXPECT_EQ(attr.type, cudaMemoryTypeHost);
    }
  }
  EXPECT_EQ(pool->used(), 0u);
  PoolBlock z = pool->allocate(0, "empty");
  EXPECT_FALSE(z.empty());
}

}  // namespace
}  // namespace strata
