// The CUDA gathers and conversions against the CPU references, bit for bit:
// embedding (every table dtype; quantized rows as quant's
// dequantize_row_ref), gather_rows, and convert_rows from every weight dtype
// to f32, f16 and bf16 (the dequantization op). Bad indices found on the
// device are reported in the DeviceError and leave their rows unwritten.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cuda/ops.h"
#include "quant/quant_ref.h"

namespace strata::cuda {
namespace {

using test::DeviceArray;
using test::DeviceBytes;
using test::DeviceErrorBox;
using test::DeviceRows;

constexpr cudaStream_t kStream = nullptr;

TEST(CudaEmbedding, EveryDtypeBitForBit) {
  STRATA_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType t : test::weight_types()) {
    const int64_t g = dtype_info(t).block_elems;
    for (int64_t d : {g, 3 * g, 576 / g * g + (g == 1 ? 1 : 0)}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " d=" << d);
      const int64_t n_vocab = 111;
      // Padded rows that keep the dtype's alignment.
      const size_t rb = row_bytes(t, d) + (t == DType::kF32 ? 12 : 6);
      const auto table = test::weight_rows(t, n_vocab, d, rb, seed++);
      std::vector<int32_t> ids = {0, 110, 5, 5, 17, 64, 1, 109, 33};
      DeviceBytes table_dev(table.size());
      table_dev.upload(table.data(), table.size());
      DeviceArray<int32_t> ids_dev(ids);
      DeviceRows y(static_cast<int64_t>(ids.size()), d, d + 3);
      DeviceErrorBox err;
      ASSERT_EQ(embedding(y.data(), y.stride(), table_dev.data(), t, rb, n_vocab, d, ids_dev.data(),
                          static_cast<int64_t>(ids.size()), err.get(), kStream),
                Status::kOk);
      std::vector<float> ref(ids.size() * static_cast<size_t>(d));
      ASSERT_EQ(cpu::embedding_ref(ref.data(), d, table.data(), t, rb, n_vocab, d, ids.data(),
                                   static_cast<int64_t>(ids.size())),
                Status::kOk);
      EXPECT_EQ(err.read().code, 0u);
      EXPECT_TRUE(y.canaries_intact());
      EXPECT_TRUE(test::same_bits(y.rows(), ref, "embedding"));
    }
  }
}

TEST(CudaEmbedding, BadIdIsReportedAndItsRowUnwritten) {
  STRATA_REQUIRE_GPU();
  const int64_t n_vocab = 10, d = 32;
  const auto table = test::weight_rows(DType::kF32, n_vocab, d, d * 4, 9);
  DeviceBytes table_dev(table.size());
  table_dev.upload(table.data(), table.size());
  DeviceArray<int32_t> ids(std::vector<int32_t>{3, 10, 2});
  DeviceRows y(3, d, d);
  DeviceErrorBox err;
  ASSERT_EQ(embedding(y.data(), d, table_dev.data(), DType::kF32, d * 4, n_vocab, d, ids.data(), 3,
                      err.get(), kStream),
            Status::kOk);
  const DeviceError e = err.read();
  EXPECT_EQ(e.code, static_cast<uint32_t>(DeviceErrorCode::kTokenId));
  EXPECT_EQ(e.row, 1);
  EXPECT_EQ(e.value, 10);
  EXPECT_EQ(e.limit, 10);
  EXPECT_EQ(describe(e), "embedding: token id 10 at row 1 is outside [0, 10)");
  const auto out = y.rows();
  for (int64_t j = 0; j < d; ++j) {
    EXPECT_EQ(test::bits_of(out[d + j]), DeviceRows::kCanary) << j;  // row 1 unwritten
    EXPECT_EQ(test::bits_of(out[j]), test::bits_of(test::bytes_to_floats(table)[3 * d + j]));
  }
}

TEST(CudaEmbedding, RejectsBadArguments) {
  void* p = reinterpret_cast<void*>(uintptr_t{256});
  const int32_t* ids = reinterpret_cast<const int32_t*>(uintptr_t{256});
  float* y = reinterpret_cast<float*>(uintptr_t{256});
  EXPECT_EQ(embedding(y, 48, p, DType::kQ4A32, 20, 4, 48, ids, 1, nullptr, kStream),
            Status::kInvalidArgument);  // 48 is not a whole number of groups
  EXPECT_EQ(embedding(y, 32, p, DType::kQ4A32, 19, 4, 32, ids, 1, nullptr, kStream),
            Status::kInvalidArgument);  // row bytes below one row
  EXPECT_EQ(embedding(y, 32, p, DType::kF32, 130, 4, 32, ids, 1, nullptr, kStream),
            Status::kInvalidArgument);  // f32 rows not 4-byte aligned
  EXPECT_EQ(embedding(y, 32, p, DType::kI32, 128, 4, 32, ids, 1, nullptr, kStream),
            Status::kUnsupported);
}

TEST(CudaGatherRows, ExactWithNegativeRowReported) {
  STRATA_REQUIRE_GPU();
  const int64_t n_x = 50, d = 111;
  const auto xv = test::random_floats(n_x * d, -3, 3, 2);
  DeviceRows x(n_x, d, d + 4);
  x.fill(xv);
  const std::vector<int32_t> rows = {49, 0, 7, 7, 23};
  DeviceArray<int32_t> rows_dev(rows);
  DeviceRows y(5, d, d + 1);
  DeviceErrorBox err;
  ASSERT_EQ(gather_rows(y.data(), y.stride(), x.data(), x.stride(), rows_dev.data(), 5, d,
                        err.get(), kStream),
            Status::kOk);
  std::vector<float> ref;
  for (int32_t r : rows) ref.insert(ref.end(), xv.begin() + r * d, xv.begin() + (r + 1) * d);
  EXPECT_TRUE(test::same_bits(y.rows(), ref, "gather_rows"));
  EXPECT_TRUE(y.canaries_intact());
  EXPECT_EQ(err.read().code, 0u);

  DeviceArray<int32_t> bad(std::vector<int32_t>{1, -4});
  DeviceRows z(2, d, d);
  ASSERT_EQ(gather_rows(z.data(), d, x.data(), x.stride(), bad.data(), 2, d, err.get(), kStream),
            Status::kOk);
  const DeviceError e = err.read();
  EXPECT_EQ(e.code, static_cast<uint32_t>(DeviceErrorCode::kGatherRow));
  EXPECT_EQ(e.row, 1);
  EXPECT_EQ(e.value, -4);
  const auto out = z.rows();
  EXPECT_EQ(test::bits_of(out[d]), DeviceRows::kCanary);
}

// convert_rows from every weight dtype to f32 / f16 / bf16 equals the exact
// value (embedding_ref's widening, quant's dequantize_row_ref) rounded to
// nearest even by core's conversions; dequantize_row_bf16_ref for bf16.
TEST(CudaConvertRows, EveryPairBitForBit) {
  STRATA_REQUIRE_GPU();
  uint32_t seed = 40;
  for (DType in : test::weight_types()) {
    for (DType out : {DType::kF32, DType::kF16, DType::kBF16}) {
      const int64_t g = dtype_info(in).block_elems;
      const int64_t n = g == 1 ? 77 : 5 * g;
      const int64_t n_rows = 7;
      SCOPED_TRACE(::testing::Message() << dtype_name(in) << " -> " << dtype_name(out));
      const size_t in_rb = row_bytes(in, n) + 4;
      const auto rows = test::weight_rows(in, n_rows, n, in_rb, seed++);
      DeviceBytes in_dev(rows.size());
      in_dev.upload(rows.data(), rows.size());
      const int64_t y_stride = n + 3;
      const size_t esz = out == DType::kF32 ? 4 : 2;
      DeviceBytes y_dev(static_cast<size_t>(n_rows * y_stride) * esz);
      ASSERT_EQ(
          convert_rows(y_dev.data(), out, y_stride, in_dev.data(), in, in_rb, n_rows, n, kStream),
          Status::kOk);
      EXPECT_TRUE(y_dev.guards_intact());
      const auto got = y_dev.download();
      // The exact values, through the CPU embedding reference (row ids 0..).
      std::vector<int32_t> ids(static_cast<size_t>(n_rows));
      for (int32_t i = 0; i < n_rows; ++i) ids[static_cast<size_t>(i)] = i;
      std::vector<float> exact(static_cast<size_t>(n_rows * n));
      ASSERT_EQ(cpu::embedding_ref(exact.data(), n, rows.data(), in, in_rb, n_rows, n, ids.data(),
                                   n_rows),
                Status::kOk);
      for (int64_t r = 0; r < n_rows; ++r) {
        std::vector<uint16_t> bf16_ref(static_cast<size_t>(n));
        if (is_quantized(in)) {
          dequantize_row_bf16_ref(in, rows.data() + static_cast<size_t>(r) * in_rb, bf16_ref.data(),
                                  n);
        }
        for (int64_t j = 0; j < n; ++j) {
          const float v = exact[static_cast<size_t>(r * n + j)];
          const size_t at = static_cast<size_t>(r * y_stride + j) * esz;
          if (out == DType::kF32) {
            float g32;
            std::memcpy(&g32, got.data() + at, 4);
            ASSERT_TRUE((std::isnan(g32) && std::isnan(v)) ||
                        test::bits_of(g32) == test::bits_of(v))
                << "row " << r << " col " << j << ": " << g32 << " vs " << v;
          } else {
            uint16_t h;
            std::memcpy(&h, got.data() + at, 2);
            const uint16_t want = out == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
            if (std::isnan(v)) {
              // A NaN stays a NaN (its payload may differ).
              const float back = out == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
              ASSERT_TRUE(std::isnan(back)) << "row " << r << " col " << j;
            } else {
              ASSERT_EQ(h, want) << "row " << r << " col " << j << " value " << v;
              if (out == DType::kBF16 && is_quantized(in)) {
                ASSERT_EQ(h, bf16_ref[static_cast<size_t>(j)]);
              }
            }
          }
        }
      }
      // The gaps between output rows are untouched.
      for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t j = n; j < y_stride; ++j) {
          for (size_t b = 0; b < esz; ++b) {
            ASSERT_EQ(got[static_cast<size_t>(r * y_stride + j) * esz + b], DeviceBytes::kFill);
          }
        }
      }
    }
  }
}

TEST(CudaConvertRows, RejectsBadArguments) {
  void* p = reinterpret_cast<void*>(uintptr_t{256});
  EXPECT_EQ(convert_rows(p, DType::kQ4A32, 64, p, DType::kF32, 256, 1, 64, kStream),
            Status::kUnsupported);
  EXPECT_EQ(convert_rows(p, DType::kF16, 64, p, DType::kI8, 64, 1, 64, kStream),
            Status::kUnsupported);
  EXPECT_EQ(convert_rows(p, DType::kF16, 64, p, DType::kQ8S32, 69, 1, 64, kStream),
            Status::kInvalidArgument);  // odd row bytes
  EXPECT_EQ(convert_rows(p, DType::kF16, 63, p, DType::kF32, 256, 1, 64, kStream),
            Status::kInvalidArgument);
  EXPECT_EQ(convert_rows(p, DType::kF16, 64, p, DType::kQ8S32, 68, 0, 64, kStream), Status::kOk);
}

}  // namespace
}  // namespace strata::cuda
