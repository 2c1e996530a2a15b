// The GGUF-only formats as integers and scales (quant/gguf_integers.h): the
// fast unpacking gives the reference's bytes and floats; the integers and
// scales give back dequantize_gguf_row_ref's values bit for bit, on random
// blocks and on the gguf-py goldens' blocks; and every vector variant of
// dequantize_row / dequantize_row_bf16 (AVX-512, AVX2), which is built on
// them, equals the reference at odd addresses.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "quant/gguf_integers.h"
#include "quant/isa.h"
#include "quant/quant_ref.h"
#include "support/random.h"

namespace strata {
namespace {

const DType kGguf[] = {DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                       DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K};

// A row of `blocks` blocks with random bytes and finite scales.
std::vector<uint8_t> random_row(DType t, int64_t blocks, uint32_t seed) {
  const int64_t n = blocks * dtype_info(t).block_elems;
  std::vector<uint8_t> row(row_bytes(t, n));
  test::random_gguf_row(t, row.data(), n, seed);
  return row;
}

TEST(GgufIntegers, ValuesAreTheReferenceBitForBit) {
  for (DType t : kGguf) {
    SCOPED_TRACE(dtype_name(t));
    const DTypeInfo& info = dtype_info(t);
    const GgufIntegers f = gguf_integers(t);
    ASSERT_EQ(info.block_elems % f.group, 0);
    const int64_t blocks = 9;
    const auto row = random_row(t, blocks, 31);
    std::vector<float> ref(static_cast<size_t>(blocks * info.block_elems));
    dequantize_row_ref(t, row.data(), ref.data(), static_cast<int64_t>(ref.size()));
    std::vector<uint8_t> u(static_cast<size_t>(info.block_elems)), u_fast(u.size());
    std::vector<float> dw(static_cast<size_t>(info.block_elems / f.group)), mw(dw.size());
    std::vector<float> dw_fast(dw.size()), mw_fast(dw.size());
    int max_u = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row.data() + b * info.block_bytes;
      gguf_unpack_block_ref(t, block, u.data(), dw.data(), mw.data());
      gguf_unpack_block(t, block, u_fast.data(), dw_fast.data(), mw_fast.data());
      EXPECT_EQ(u, u_fast) << "block " << b;
      EXPECT_EQ(std::memcmp(dw.data(), dw_fast.data(), dw.size() * 4), 0) << "block " << b;
      EXPECT_EQ(std::memcmp(mw.data(), mw_fast.data(), mw.size() * 4), 0) << "block " << b;
      for (int64_t e = 0; e < info.block_elems; ++e) {
        const size_t g = static_cast<size_t>(e / f.group);
        const int q = u[static_cast<size_t>(e)];
        max_u = std::max(max_u, q);
        const float x = f.has_min ? dw[g] * static_cast<float>(q) + mw[g]
                                  : dw[g] * static_cast<float>(q - f.bias);
        ASSERT_EQ(std::bit_cast<uint32_t>(x),
                  std::bit_cast<uint32_t>(ref[static_cast<size_t>(b * info.block_elems + e)]))
            << "block " << b << " value " << e << ": " << x << " vs "
            << ref[static_cast<size_t>(b * info.block_elems + e)];
        if (!f.has_min) {
          EXPECT_EQ(mw[g], 0.0f);
        }
      }
    }
    // The integers span the format's whole range on random bytes (the table
    // in gguf_integers.h): 2^bits - 1 at most.
    const int bits = t == DType::kQ2_K   ? 2
                     : t == DType::kQ3_K ? 3
                     : t == DType::kQ4_K ? 4
                     : t == DType::kQ6_K ? 6
                     : t == DType::kQ8_K ? 8
                                         : 5;
    EXPECT_EQ(max_u, (1 << bits) - 1);
  }
}

TEST(GgufIntegers, EveryVectorVariantDequantizesAsTheReference) {
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512}) {
    if (!quant_isa_supported(isa)) {
      std::printf("[ info ] this CPU has no %s: its GGUF dequantizers are not tested here\n",
                  std::string(quant_isa_name(isa)).c_str());
      continue;
    }
    const QuantKernels& k = quant_kernels(isa);
    for (DType t : kGguf) {
      SCOPED_TRACE(::testing::Message() << quant_isa_name(isa) << " " << dtype_name(t));
      const int64_t n = 5 * dtype_info(t).block_elems;
      const auto row = random_row(t, 5, 77);
      std::vector<uint8_t> shifted(row.size() + 3);
      std::memcpy(shifted.data() + 3, row.data(), row.size());  // an odd address
      std::vector<float> ref(static_cast<size_t>(n)), fast(ref.size() + 1);
      std::vector<uint16_t> ref16(ref.size()), fast16(ref.size() + 1);
      dequantize_row_ref(t, row.data(), ref.data(), n);
      dequantize_row_bf16_ref(t, row.data(), ref16.data(), n);
      k.dequantize_row(t, shifted.data() + 3, fast.data() + 1, n);
      k.dequantize_row_bf16(t, shifted.data() + 3, fast16.data() + 1, n);
      EXPECT_EQ(std::memcmp(ref.data(), fast.data() + 1, ref.size() * 4), 0);
      EXPECT_EQ(std::memcmp(ref16.data(), fast16.data() + 1, ref16.size() * 2), 0);
    }
  }
}

}  // namespace
}  // namespace strata
