// matmul_parts (kernels/cpu/weight_parts.h): several weights against one x
// in one call give, bit for bit, what one matmul per weight gives, in the
// columns after each other, on every kernel that serves the call: the bf16
// and f32 dot kernels, the int8 kernels (VNNI, AVX2, portable), the GEMM
// paths past the dot kernels' rows, and parts of different dtypes (taken
// one at a time). Nothing outside a part's columns is written.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"
#include "support/random.h"
#include "support/random_weights.h"

namespace strata::cpu {
namespace {

// q, k and v of a small grouped-query layer (k and v a third of q), each
// with or without a bias; part shapes that split strips and pairs unevenly.
struct PartsCase {
  std::vector<DType> dtypes;  // one per part
  std::vector<int64_t> rows;
  int64_t k;
};

void check_parts(MatmulCache& cache, ComputeType c, const PartsCase& pc, int64_t m, uint32_t seed) {
  const size_t n_parts = pc.dtypes.size();
  int64_t n_total = 0;
  for (int64_t r : pc.rows) n_total += r;
  const int64_t y_stride = n_total + 5;  // columns past the parts stay as they were
  std::vector<std::vector<char>> ws;
  std::vector<std::vector<float>> biases;
  std::vector<WeightPart> parts;
  for (size_t i = 0; i < n_parts; ++i) {
    const DType t = pc.dtypes[i];
    const size_t stride = row_bytes(t, pc.k) + 64 * (i % 2);  // padded rows in one part
    ws.push_back(test::random_weights(t, pc.rows[i], pc.k, stride, seed + 10 * i));
    biases.push_back(
        test::random_floats(static_cast<size_t>(pc.rows[i]), -1.0f, 1.0f, seed + 10 * i + 1));
    parts.push_back(
        {ws.back().data(), t, stride, i == 1 ? nullptr : biases.back().data(), pc.rows[i]});
  }
  const auto x = test::random_floats(static_cast<size_t>(m * (pc.k + 3)), -1.0f, 1.0f, seed + 99);
  const int64_t x_stride = pc.k + 3;
  std::vector<float> fused(static_cast<size_t>(m * y_stride), -7.0f);
  std::vector<float> single(fused.size(), -7.0f);
  ASSERT_EQ(matmul_parts(cache, fused.data(), y_stride, x.data(), x_stride, parts, m, pc.k, c),
            Status::kOk);
  int64_t col = 0;
  for (const WeightPart& p : parts) {
    ASSERT_EQ(matmul(cache, single.data() + col, y_stride, x.data(), x_stride, p.w, p.dtype,
                     p.row_bytes, p.bias, m, p.n, pc.k, c),
              Status::kOk);
    col += p.n;
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < y_stride; ++j) {
      const size_t e = static_cast<size_t>(i * y_stride + j);
      ASSERT_EQ(std::memcmp(&fused[e], &single[e], 4), 0)
          << "row " << i << " column " << j << ": " << fused[e] << " fused, " << single[e]
          << " one call per part";
    }
  }
}

std::string name(ComputeType c) {
  return c == ComputeType::kBF16 ? "bf16" : c == ComputeType::kInt8 ? "int8" : "f32";
}

void check_every_path(const char* isa) {
  const std::vector<PartsCase> cases = {
      {{DType::kF32, DType::kF32, DType::kF32}, {37, 13, 13}, 96},
      {{DType::kF16, DType::kF16, DType::kF16}, {48, 16, 16}, 64},
      {{DType::kBF16, DType::kBF16}, {25, 25}, 64},
      {{DType::kQ4A32, DType::kQ4A32, DType::kQ4A32}, {37, 13, 13}, 64},
      {{DType::kQ8S32, DType::kQ8S32}, {33, 31}, 96},
      {{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K}, {19, 7, 7}, 256},  // two dtypes
      {{DType::kQ6_K}, {41}, 256},
  };
  MatmulCache cache;
  uint32_t seed = 8200;
  for (ComputeType c : {ComputeType::kF32, ComputeType::kBF16, ComputeType::kInt8}) {
    for (int threads : {1, 2, 3}) {
      ScopedOmpThreads t(threads);
      for (const PartsCase& pc : cases) {
        for (int64_t m : {1, 2, 3, 7, 8, 9, 13, 16, 17, 40}) {
          SCOPED_TRACE(::testing::Message()
                       << isa << " " << name(c) << " " << dtype_name(pc.dtypes[0]) << " m=" << m
                       << " threads=" << threads);
          check_parts(cache, c, pc, m, seed++);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(MatmulParts, OneCallGivesTheBitsOfOneCallPerPart) {
  check_every_path("native");
}

TEST(MatmulParts, OneCallGivesTheBitsOfOneCallPerPartAvx2Only) {
  if (!cpu_features().avx2_fma) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  const CpuFeatures saved = restrict_cpu_features({false, false, true});
  check_every_path("avx2");
  restrict_cpu_features(saved);
}

TEST(MatmulParts, OneCallGivesTheBitsOfOneCallPerPartPortable) {
  const CpuFeatures saved = restrict_cpu_features({false, false, false});
  check_every_path("portable");
  restrict_cpu_features(saved);
}

TEST(MatmulParts, RejectsBadParts) {
  MatmulCache cache;
  const std::vector<float> x(64, 1.0f);
  std::vector<float> w(64 * 4, 1.0f), y(64, 0.0f);
  const WeightPart p{w.data(), DType::kF32, 64 * 4, nullptr, 4};
  const WeightPart four[] = {p, p, p, p};
  EXPECT_EQ(matmul_parts(cache, y.data(), 12, x.data(), 64, WeightParts(four, 3), 1, 64,
                         ComputeType::kF32),
            Status::kOk);
  EXPECT_EQ(matmul_parts(cache, y.data(), 16, x.data(), 64, WeightParts(four, 4), 1, 64,
                         ComputeType::kF32),
            Status::kInvalidArgument);  // more than kMaxWeightParts
  EXPECT_EQ(matmul_parts(cache, y.data(), 11, x.data(), 64, WeightParts(four, 3), 1, 64,
                         ComputeType::kF32),
            Status::kInvalidArgument);  // y's rows too short for the last part
  EXPECT_EQ(
      matmul_parts(cache, y.data(), 12, x.data(), 64, WeightParts(), 1, 64, ComputeType::kF32),
      Status::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cpu
