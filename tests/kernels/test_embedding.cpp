// embedding against embedding_ref for every table dtype: the rows must be
// equal bit for bit (both widen f16/bf16 exactly, and quant's fast
// dequantizer equals its reference by contract). Bad ids write nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/embedding.h"
#include "quant/convert.h"
#include "quant/quant_ref.h"
#include "support/all_close.h"
#include "support/guarded.h"
#include "support/random.h"
#include "support/random_weights.h"

namespace strata::cpu {
namespace {

using test::GuardedRows;

std::vector<char> make_table(DType t, int64_t n_vocab, int64_t d, size_t row_stride,
                             uint32_t seed) {
  return test::random_weights(t, n_vocab, d, row_stride, seed, -2.0f, 2.0f, 0x33);
}

TEST(Embedding, EveryDtypeMatchesReferenceExactly) {
  uint32_t seed = 1;
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    const DType t = static_cast<DType>(i);
    if (t == DType::kI32 || t == DType::kI8) continue;
    const int64_t d = dtype_info(t).block_elems * 3 + (is_quantized(t) ? 0 : 7);
    const int64_t n_vocab = 101;
    const size_t row_stride = row_bytes(t, d) + 6;
    SCOPED_TRACE(::testing::Message() << dtype_name(t) << " d=" << d);
    const auto table = make_table(t, n_vocab, d, row_stride, seed++);
    const std::vector<int32_t> ids = {0, 100, 5, 5, 37, 99, 1, 64, 0};
    const int64_t n = static_cast<int64_t>(ids.size());
    GuardedRows y(n, d, d + 3);
    std::vector<float> y_ref(static_cast<size_t>(n * d));
    ASSERT_EQ(
        embedding(y.data(), y.stride(), table.data(), t, row_stride, n_vocab, d, ids.data(), n),
        Status::kOk);
    ASSERT_EQ(
        embedding_ref(y_ref.data(), d, table.data(), t, row_stride, n_vocab, d, ids.data(), n),
        Status::kOk);
    EXPECT_TRUE(y.canaries_intact());
    const auto out = y.rows();
    ASSERT_EQ(out.size(), y_ref.size());
    EXPECT_EQ(std::memcmp(out.data(), y_ref.data(), out.size() * 4), 0);
    // Repeated ids give repeated rows.
    EXPECT_EQ(std::memcmp(&out[2 * d], &out[3 * d], static_cast<size_t>(d) * 4), 0);
  }
}

TEST(Embedding, BadIdWritesNothing) {
  const int64_t d = 32, n_vocab = 10;
  const auto table = make_table(kQ8_0, n_vocab, d, row_bytes(kQ8_0, d), 9);
  for (int32_t bad : {-1, 10, 1 << 30}) {
    const std::vector<int32_t> ids = {1, 2, bad, 3};
    GuardedRows y(4, d, d);
    EXPECT_EQ(
        embedding(y.data(), d, table.data(), kQ8_0, row_bytes(kQ8_0, d), n_vocab, d, ids.data(), 4),
        Status::kInvalidArgument);
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        uint32_t bits;
        const float v = y.at(r, c);
        std::memcpy(&bits, &v, 4);
        ASSERT_EQ(bits, GuardedRows::kCanary) << "row " << r << " written for bad id " << bad;
      }
    }
  }
  std::vector<float> y(64);
  const int32_t id = 0;
  EXPECT_EQ(
      embedding(y.data(), d, table.data(), kQ8_0, row_bytes(kQ8_0, d) - 1, n_vocab, d, &id, 1),
      Status::kInvalidArgument);  // row stride shorter than a row
  EXPECT_EQ(embedding(y.data(), d, table.data(), kQ8_0, row_bytes(kQ8_0, d), n_vocab, 33, &id, 1),
            Status::kInvalidArgument);  // d not a block multiple
  EXPECT_EQ(embedding(y.data(), d, table.data(), DType::kI32, 128, n_vocab, d, &id, 1),
            Status::kUnsupported);
}

}  // namespace
}  // namespace strata::cpu
