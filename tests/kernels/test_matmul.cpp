// matmul against matmul_ref for every weight dtype and both compute dtypes,
// on odd sizes that take both paths (m < swap_min_m and m >= swap_min_m, one
// and several token tiles, one and several weight panels), strided x, y and
// W rows, bias or none, 1..3 threads.
//
// The tolerance is derived in matmul_check.h.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_bf16.h"
#include "kernels/cpu/matmul_f32_dot.h"
#include "kernels/matmul_check.h"
#include "quant/convert.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"
#include "support/all_close.h"
#include "support/guarded.h"
#include "support/random.h"

namespace strata::cpu {
namespace {

using test::GuardedRows;
using test::kU32;

struct Case {
  int64_t m, n, k;
  bool bias;
  size_t w_pad;   // extra bytes per W row
  int64_t x_pad;  // extra floats per x row
  int64_t y_pad;  // extra floats per y row
};

void run_case(MatmulCache& cache, DType t, ComputeType c, const Case& cs, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << dtype_name(t) << (c == ComputeType::kBF16 ? " bf16" : " f32")
                                    << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k
                                    << " bias=" << cs.bias << " threads=" << omp_get_max_threads());
  const size_t w_stride = row_bytes(t, cs.k) + cs.w_pad;
  const auto w = test::random_weights(t, cs.n, cs.k, w_stride, seed);
  const auto x = test::random_floats(static_cast<size_t>(cs.m * cs.k), -1.0f, 1.0f, seed + 1);
  const auto bias = test::random_floats(static_cast<size_t>(cs.n), -1.0f, 1.0f, seed + 2);
  test::check_matmul(cache, c, w.data(), t, w_stride, x, cs.bias ? &bias : nullptr, cs.m, cs.n,
                     cs.k, cs.x_pad, cs.y_pad);
}

std::vector<DType> weight_dtypes() {
  std::vector<DType> v = {DType::kF32, DType::kF16, DType::kBF16};
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    if (is_quantized(static_cast<DType>(i))) v.push_back(static_cast<DType>(i));
  }
  return v;
}

class MatmulTest : public ::testing::TestWithParam<ComputeType> {};

TEST_P(MatmulTest, PlainDtypesOddSizes) {
  MatmulCache cache;
  const std::vector<Case> cases = {
      {1, 1, 1, false, 0, 0, 0},      {3, 7, 17, true, 4, 3, 5},     {7, 17, 111, false, 0, 1, 0},
      {17, 3, 7, true, 8, 0, 2},      {1, 111, 989, true, 0, 0, 1},  {33, 111, 96, true, 2, 5, 3},
      {111, 17, 989, false, 4, 1, 1}, {150, 300, 64, true, 0, 2, 0}, {16, 989, 33, false, 0, 0, 7},
      {11, 45, 96, true, 0, 2, 1},    {8, 64, 64, false, 0, 0, 0},
  };
  uint32_t seed = 100;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const Case& cs : cases) run_case(cache, t, GetParam(), cs, seed++);
  }
}

TEST_P(MatmulTest, QuantizedDtypesOddSizes) {
  MatmulCache cache;
  uint32_t seed = 200;
  for (DType t : weight_dtypes()) {
    if (!is_quantized(t)) continue;
    const int64_t g = dtype_info(t).block_elems;
    const std::vector<Case> cases = {
        {1, 3, g, false, 0, 0, 0},
        {7, 17, 3 * g, true, 6, 1, 2},
        {17, 111, 5 * g, true, 0, 0, 3},
        {111, 33, 7 * g, false, 2, 3, 0},
    };
    for (const Case& cs : cases) run_case(cache, t, GetParam(), cs, seed++);
  }
}

// The m of the fused dot kernels (bf16: m <= kBf16DotMaxM; f32 and bf16
// without bf16 products: m <= kF32DotMaxM, in strips of kF32DotRows weight
// rows): 1 to 17 and either side of kF32DotMaxM, for every weight dtype: n a whole number of strips
// and not, rows read in place (k whole vectors) and through the stage (a tail, padded rows).
std::vector<int64_t> small_ms() {
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 17; ++m) ms.push_back(m);
  for (int64_t m : {kF32DotMaxM - 1, kF32DotMaxM, kF32DotMaxM + 1}) {
    if (m > 17) ms.push_back(m);
  }
  return ms;
}

void small_m_every_m(ComputeType c, uint32_t seed) {
  MatmulCache cache;
  for (DType t : weight_dtypes()) {
    const int64_t g = dtype_info(t).block_elems;
    for (int64_t k : is_quantized(t) ? std::vector<int64_t>{3 * g} : std::vector<int64_t>{77, 80}) {
      for (int64_t m : small_ms()) {
        for (int64_t n : {1, 2, 37, 40}) {
          const size_t w_pad = m == 5 ? static_cast<size_t>(dtype_info(t).block_bytes) : 0;
          run_case(cache, t, c, {m, n, k, n == 37, w_pad, m % 3, 1}, seed++);
        }
      }
    }
  }
}

TEST_P(MatmulTest, SmallMEveryM) {
  small_m_every_m(GetParam(), 4000);
}

// The same with AVX2 only: the AVX2 dot kernel on CPUs that have AVX-512,
// and bf16 compute without bf16 products (x and W rounded in the kernel).
TEST_P(MatmulTest, SmallMEveryMAvx2Only) {
  if (!cpu_features().avx2_fma) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  const CpuFeatures saved = restrict_cpu_features({false, false, true});
  small_m_every_m(GetParam(), 6000);
  restrict_cpu_features(saved);
}

// The dot kernels' promise (matmul_bf16.h, matmul_f32_dot.h): a row of y
// has the same bits in any batch they serve, so a sequence decodes the same
// alone or beside others. Each m from 1 to the kernel's largest against the
// first m rows of the largest batch, for the float dtypes and a few formats.
TEST_P(MatmulTest, DotKernelRowsHaveTheSameBitsInEveryBatch) {
  const ComputeType c = GetParam();
  const bool bf16_dot = c == ComputeType::kBF16 && matmul_bf16_dot_ok(DType::kF32, 1);
  const bool f32_dot = !bf16_dot && c != ComputeType::kInt8 && matmul_f32_dot_ok(1) &&
                       (c == ComputeType::kF32 || !native_bf16_products());
  if (!bf16_dot && !f32_dot) GTEST_SKIP() << "no dot kernel for this compute type on this CPU";
  MatmulCache cache;
  uint32_t seed = 7100;
  for (DType t :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4A32, DType::kQ8S32, DType::kQ6_K}) {
    // The bf16 kernel takes fewer rows with K-quant weights.
    const int64_t max_m = !bf16_dot                             ? kF32DotMaxM
                          : matmul_bf16_dot_ok(t, kBf16DotMaxM) ? kBf16DotMaxM
                                                                : kBf16DotWideM;
    ASSERT_TRUE(!bf16_dot || matmul_bf16_dot_ok(t, max_m)) << dtype_name(t);
    const int64_t k = is_quantized(t) ? 2 * dtype_info(t).block_elems : 96, n = 21;
    const size_t w_stride = row_bytes(t, k);
    const auto w = test::random_weights(t, n, k, w_stride, seed);
    const auto x = test::random_floats(static_cast<size_t>(max_m * k), -1.0f, 1.0f, seed + 1);
    const auto bias = test::random_floats(static_cast<size_t>(n), -1.0f, 1.0f, seed + 2);
    std::vector<float> all(static_cast<size_t>(max_m * n));
    ASSERT_EQ(matmul(cache, all.data(), n, x.data(), k, w.data(), t, w_stride, bias.data(), max_m,
                     n, k, c),
              Status::kOk);
    for (int64_t m = 1; m < max_m; ++m) {
      std::vector<float> y(static_cast<size_t>(m * n));
      ASSERT_EQ(
          matmul(cache, y.data(), n, x.data(), k, w.data(), t, w_stride, bias.data(), m, n, k, c),
          Status::kOk);
      EXPECT_EQ(std::memcmp(y.data(), all.data(), y.size() * 4), 0) << dtype_name(t) << " m=" << m;
    }
    seed += 10;
  }
}

// The shapes of SmolLM2-135M's layers at decode and prefill token counts.
TEST_P(MatmulTest, ModelShapes) {
  MatmulCache cache;
  uint32_t seed = 300;
  for (DType t : {kQ4_1, kQ8_0, DType::kBF16}) {
    for (int64_t m : {1, 8, 32, 77}) {
      run_case(cache, t, GetParam(), {m, 576, 576, false, 0, 0, 0}, seed++);
      run_case(cache, t, GetParam(), {m, 192, 576, true, 0, 0, 0}, seed++);
      run_case(cache, t, GetParam(), {m, 576, 1536, false, 0, 0, 0}, seed++);
    }
  }
}

TEST_P(MatmulTest, ThreadCounts) {
  const int saved = omp_get_max_threads();
  uint32_t seed = 400;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    MatmulCache cache;
    for (int64_t m : {5, 40}) {
      run_case(cache, kQ4_1, GetParam(), {m, 1000, 256, true, 0, 0, 1}, seed++);
      run_case(cache, DType::kF32, GetParam(), {m, 190, 300, false, 0, 3, 0}, seed++);
    }
  }
  omp_set_num_threads(saved);
}

// The bf16 panels without AVX512_BF16 (quant's bit-exact bf16 dequantizers).
TEST_P(MatmulTest, PortableBf16Narrowing) {
  const CpuFeatures saved = restrict_cpu_features({true, false, true});
  MatmulCache cache;
  uint32_t seed = 500;
  for (DType t : {kQ4_1, DType::kF16, DType::kF32}) {
    run_case(cache, t, GetParam(), {20, 130, 96, true, 0, 0, 0}, seed++);
    run_case(cache, t, GetParam(), {3, 130, 96, false, 0, 0, 0}, seed++);
  }
  restrict_cpu_features(saved);
}

// bf16 compute against the f32 product: rounding x and W to bf16 (nearest
// even, relative error <= eps_bf16 = 2^-8 per operand: 8 significant bits)
// changes each product by at most (2 eps_bf16 + eps_bf16^2) |x w|, so
// |y_bf16 - y_f32| <= (2^-7 + 2^-16 + 2 (k + 1) u) sum |x w| + u |y|: the
// budget model-level comparisons of bf16 against f32 must allow.
TEST(MatmulBf16, WithinOperandRoundingOfF32) {
  MatmulCache cache;
  for (DType t : {DType::kF32, kQ4_1}) {
    const int64_t m = 19, n = 77, k = 320;
    const auto w = test::random_weights(t, n, k, row_bytes(t, k), 61);
    const auto x = test::random_floats(static_cast<size_t>(m * k), -2, 2, 62);
    std::vector<float> y(static_cast<size_t>(m * n)), y_ref(y.size()),
        wf(static_cast<size_t>(n * k));
    ASSERT_EQ(matmul(cache, y.data(), n, x.data(), k, w.data(), t, row_bytes(t, k), nullptr, m, n,
                     k, ComputeType::kBF16),
              Status::kOk);
    ASSERT_EQ(matmul_ref(y_ref.data(), n, x.data(), k, w.data(), t, row_bytes(t, k), nullptr, m, n,
                         k, ComputeType::kF32),
              Status::kOk);
    for (int64_t j = 0; j < n; ++j) {
      if (t == DType::kF32) {
        std::memcpy(&wf[static_cast<size_t>(j * k)], w.data() + j * row_bytes(t, k),
                    static_cast<size_t>(k) * 4);
      } else {
        dequantize_row_ref(t, w.data() + j * row_bytes(t, k), &wf[static_cast<size_t>(j * k)], k);
      }
    }
    const auto ref = test::to_double(y_ref);
    EXPECT_TRUE(test::all_close(
        y, ref,
        [&](size_t e) {
          const int64_t i = static_cast<int64_t>(e) / n, j = static_cast<int64_t>(e) % n;
          double abs_sum = 0;
          for (int64_t l = 0; l < k; ++l) {
            abs_sum += std::fabs(static_cast<double>(x[static_cast<size_t>(i * k + l)]) *
                                 wf[static_cast<size_t>(j * k + l)]);
          }
          return (0x1p-7 + 0x1p-16 + 2 * (k + 1) * kU32) * abs_sum + kU32 * std::fabs(ref[e]);
        },
        "bf16 vs f32"));
  }
}

// A NaN or an infinity in row i of x reaches row i of y only, as in the
// reference.
TEST_P(MatmulTest, NonFiniteInputStaysInItsRow) {
  MatmulCache cache;
  for (int64_t m : {4, 20}) {
    const int64_t n = 37, k = 64;
    const auto w = test::random_weights(kQ8_0, n, k, row_bytes(kQ8_0, k), 7);
    auto xv = test::random_floats(static_cast<size_t>(m * k), -1.0f, 1.0f, 8);
    xv[static_cast<size_t>(1 * k + 5)] = NAN;
    xv[static_cast<size_t>(3 * k + 9)] = INFINITY;
    std::vector<float> y(static_cast<size_t>(m * n)), y_ref(y.size());
    ASSERT_EQ(matmul(cache, y.data(), n, xv.data(), k, w.data(), kQ8_0, row_bytes(kQ8_0, k),
                     nullptr, m, n, k, GetParam()),
              Status::kOk);
    ASSERT_EQ(matmul_ref(y_ref.data(), n, xv.data(), k, w.data(), kQ8_0, row_bytes(kQ8_0, k),
                         nullptr, m, n, k, GetParam()),
              Status::kOk);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float r = y_ref[static_cast<size_t>(i * n + j)];
        const float o = y[static_cast<size_t>(i * n + j)];
        if (i == 1) {
          EXPECT_TRUE(std::isnan(o)) << i << "," << j;
        } else if (i == 3) {
          EXPECT_TRUE(std::isinf(r));
          EXPECT_EQ(o, r) << i << "," << j;
        } else {
          EXPECT_TRUE(std::isfinite(o)) << i << "," << j;
        }
      }
    }
  }
}

// Called from inside a caller's parallel region (one cache per calling
// thread), matmul runs single-threaded there and still matches the reference.
TEST_P(MatmulTest, CallableFromParallelRegion) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  std::vector<int> ok(2, 0);
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    MatmulCache cache;
    const int64_t m = t == 0 ? 5 : 40, n = 70, k = 64;
    const auto w = test::random_weights(kQ8_0, n, k, row_bytes(kQ8_0, k), 30 + t);
    const auto x = test::random_floats(static_cast<size_t>(m * k), -1, 1, 40 + t);
    std::vector<float> y(static_cast<size_t>(m * n)), y_ref(y.size());
    const Status s1 = matmul(cache, y.data(), n, x.data(), k, w.data(), kQ8_0, row_bytes(kQ8_0, k),
                             nullptr, m, n, k, GetParam());
    const Status s2 = matmul_ref(y_ref.data(), n, x.data(), k, w.data(), kQ8_0, row_bytes(kQ8_0, k),
                                 nullptr, m, n, k, GetParam());
    // Within the derived bound (see matmul_check.h): every |x w| <= 1 here.
    bool all = s1 == Status::kOk && s2 == Status::kOk;
    for (size_t i = 0; i < y.size(); ++i) {
      all = all && std::fabs(y[i] - y_ref[i]) <=
                       (k + 1) * test::kU32 * k + test::kU32 * std::fabs(y_ref[i]);
    }
    ok[static_cast<size_t>(t)] = all ? 1 : 0;
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(ok[0], 1);
  EXPECT_EQ(ok[1], 1);
}

// Repeating a shape creates no primitive and grows no workspace; reserve()
// sizes the workspaces for every m up to its bound.
TEST_P(MatmulTest, SteadyStateAllocatesNothing) {
  MatmulCache cache;
  ASSERT_EQ(cache.reserve(100, 576, 576, GetParam()), Status::kOk);
  const size_t reserved = cache.workspace_bytes();
  EXPECT_GT(reserved, 0u);
  const int64_t n = 576, k = 576;
  const auto w = test::random_weights(kQ4_1, n, k, row_bytes(kQ4_1, k), 1);
  const auto x = test::random_floats(static_cast<size_t>(100 * k), -1, 1, 2);
  std::vector<float> y(static_cast<size_t>(100 * n));
  for (int64_t m : {1, 7, 32, 100}) {
    ASSERT_EQ(matmul(cache, y.data(), n, x.data(), k, w.data(), kQ4_1, row_bytes(kQ4_1, k), nullptr,
                     m, n, k, GetParam()),
              Status::kOk);
    const size_t prims = cache.n_primitives();
    const size_t bytes = cache.workspace_bytes();
    for (int rep = 0; rep < 3; ++rep) {
      ASSERT_EQ(matmul(cache, y.data(), n, x.data(), k, w.data(), kQ4_1, row_bytes(kQ4_1, k),
                       nullptr, m, n, k, GetParam()),
                Status::kOk);
    }
    EXPECT_EQ(cache.n_primitives(), prims) << "m=" << m;
    EXPECT_EQ(cache.workspace_bytes(), bytes) << "m=" << m;
  }
}

TEST_P(MatmulTest, EmptyAndDegenerate) {
  MatmulCache cache;
  float y[6] = {7, 7, 7, 7, 7, 7};
  const float x[1] = {1};
  const float bias[3] = {1, 2, 3};
  // k == 0: y = bias.
  EXPECT_EQ(matmul(cache, y, 3, x, 0, x, DType::kF32, 0, bias, 2, 3, 0, GetParam()), Status::kOk);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], bias[i % 3]);
  // m == 0 and n == 0 touch nothing.
  EXPECT_EQ(
      matmul(cache, nullptr, 0, nullptr, 0, nullptr, DType::kF32, 0, nullptr, 0, 5, 5, GetParam()),
      Status::kOk);
  EXPECT_EQ(
      matmul(cache, nullptr, 0, nullptr, 0, nullptr, DType::kF32, 0, nullptr, 5, 0, 5, GetParam()),
      Status::kOk);
}

TEST_P(MatmulTest, RejectsBadArguments) {
  MatmulCache cache;
  std::vector<float> y(64), x(64), w(64);
  const auto call = [&](int64_t y_stride, int64_t x_stride, DType t, size_t w_row, int64_t k) {
    return matmul(cache, y.data(), y_stride, x.data(), x_stride, w.data(), t, w_row, nullptr, 2, 4,
                  k, GetParam());
  };
  EXPECT_EQ(call(4, 8, DType::kF32, 32, 8), Status::kOk);
  EXPECT_EQ(call(3, 8, DType::kF32, 32, 8), Status::kInvalidArgument);  // y stride < n
  EXPECT_EQ(call(4, 7, DType::kF32, 32, 8), Status::kInvalidArgument);  // x stride < k
  EXPECT_EQ(call(4, 8, DType::kF32, 31, 8), Status::kInvalidArgument);  // W row too short
  EXPECT_EQ(call(4, 8, kQ8_0, 34, 8), Status::kInvalidArgument);        // k not a block multiple
  EXPECT_EQ(call(4, 8, DType::kI32, 32, 8), Status::kUnsupported);
  EXPECT_EQ(matmul(cache, y.data(), 4, x.data(), 8, w.data(), DType::kF32, 32, nullptr, -1, 4, 8,
                   GetParam()),
            Status::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Compute, MatmulTest,
                         ::testing::Values(ComputeType::kF32, ComputeType::kBF16),
                         [](const auto& info) {
                           return info.param == ComputeType::kBF16 ? "bf16" : "f32";
                         });

}  // namespace
}  // namespace strata::cpu
