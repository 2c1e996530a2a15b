// The block budget's part for quantized KV dequantized by the CPU attention
// kernel (offload/block_budget.h, kernels/cpu/attention_quant.h).
#include <gtest/gtest.h>

#include "kernels/cpu/attention_quant.h"
#include "offload/block_budget.h"

namespace strata {
namespace {

KvGeometry geometry(DType dtype) {
  KvGeometry g;
  g.n_layer = 2;
  g.n_kv_head = 2;
  g.head_dim = 64;
  g.dtype = dtype;
  g.page_size = 16;
  return g;
}

// K and V of one 16-token page of 2 x 64 values as f32.
constexpr uint64_t kPagePair = 2 * 16 * 128 * sizeof(float);

TEST(BlockBudget, DequantizedKvIsTheLargestRunOrTheLongestSequence) {
  // Unquantized KV is read in place.
  EXPECT_EQ(kv_dequant_bytes(geometry(DType::kF32), BlockShape::full(4, 2, 20, 8)), 0u);
  EXPECT_EQ(kv_dequant_bytes(geometry(DType::kF16), BlockShape::full(4, 2, 20, 8)), 0u);
  const KvGeometry q8 = geometry(DType::kQ8A32);
  // 4 sequences a micro-batch storing 20 + 8 - 1 tokens, fed 1: 28 at their
  // longest, 2 pages each; the whole micro-batch is one run.
  EXPECT_EQ(kv_dequant_bytes(q8, BlockShape::full(4, 2, 20, 8)), 4 * 2 * kPagePair);
  // Fed 1 + 4 drafts: 32 tokens, still 2 pages; 1 + 5: 33, 3 pages.
  EXPECT_EQ(kv_dequant_bytes(q8, BlockShape::full(4, 2, 20, 8, 5)), 4 * 2 * kPagePair);
  EXPECT_EQ(kv_dequant_bytes(q8, BlockShape::full(4, 2, 20, 8, 6)), 4 * 3 * kPagePair);
  // 4 sequences of 4097 + 1 tokens (257 pages, 4 MiB and a page each): runs of at most
  // the kernel's cap.
  const uint64_t medium = 257 * kPagePair;
  ASSERT_LT(medium, cpu::kKvDequantBytes);
  ASSERT_GT(4 * medium, cpu::kKvDequantBytes);
  EXPECT_EQ(kv_dequant_bytes(q8, BlockShape::full(4, 2, 4096, 2)), cpu::kKvDequantBytes);
  // One sequence past the cap is a run of its own.
  const uint64_t longest = 1251 * kPagePair;  // 20000 + 8 tokens
  ASSERT_GT(longest, cpu::kKvDequantBytes);
  EXPECT_EQ(kv_dequant_bytes(q8, BlockShape::full(4, 2, 20000, 8)), longest);
  // The micro-batch with the most, not the sum over micro-batches.
  BlockShape uneven = BlockShape::full(1, 2, 20, 8);
  uneven.stored = {{27, 27, 27}, {100}};
  EXPECT_EQ(kv_dequant_bytes(q8, uneven), 7 * kPagePair);  // 101 tokens: 7 pages
}

TEST(BlockBudget, DequantizedKvIsRamWhereTheCpuComputesAttention) {
  BlockMemory m;
  m.kv_pages = 1000;
  m.kv_staging = 100;
  m.hidden = 10;
  m.logits = 1;
  BlockMemory q = m;
  q.kv_dequant = 5000;
  for (const MemoryMode mode :
       {MemoryMode::kHostMemory, MemoryMode::kCpuAttention, MemoryMode::kDeviceMemory}) {
    const BlockTiers a = block_tiers(m, mode), b = block_tiers(q, mode);
    const bool cpu_attends = mode != MemoryMode::kDeviceMemory;
    EXPECT_EQ(b.ram - a.ram, cpu_attends ? 5000u : 0u) << static_cast<int>(mode);
    EXPECT_EQ(b.device, a.device);
    EXPECT_EQ(b.kv_ram, a.kv_ram);
  }
}

}  // namespace
}  // namespace strata
