// The int8 compute type (kernels/cpu/matmul_int8.h): the activation quantizer
// against its reference bit for bit; matmul(kInt8) against matmul_int8_ref
// for every quantized weight format it reads (Strata's and GGUF's) on odd sizes (one and several
// micro-tiles, panels and row chunks, strided rows, bias or none, 1..3 threads), every element; the
// portable loops give the same bits as the AVX512-VNNI kernel; and the whole mode against the f32
// product, within the rounding of x to int8.
//
// Tolerance against the reference. The group sums S_g, T_g are exact
// integers in both; the fast path then evaluates, per group in order,
// f = S dw (+ fma(mw, T, f)), acc = fma(f, dx, acc), and y = acc + bias: at
// most 3 roundings per group term and one per addition, so with
// A = sum_g |dx_g| (|dw_g S_g| + |mw_g T_g|) + |bias|,
//   |y - ref| <= (n_groups + 4) u A + u |ref|     (u = 2^-24).
//
// Against the f32 product: x = dx qx + e with |e| <= dx/2 + 4u|x| (rounding to
// the nearest of the grid, the f32 rounding of x * id and of dx and id), so
//   |y - x.w| <= sum_l |w_l| (dx_g(l)/2 + 4u |x_l|) + f32 rounding of x.w.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_int8.h"
#include "quant/gguf_integers.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"
#include "support/all_close.h"
#include "support/guarded.h"
#include "support/random.h"
#include "support/random_weights.h"

namespace strata::cpu {
namespace {

using test::GuardedRows;
using test::kU32;

// Every quantized format the int8 path reads: Strata's and the GGUF-only ones
// but Q8_K (which multiplies in bf16).
std::vector<DType> quantized_dtypes() {
  std::vector<DType> v;
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    const auto t = static_cast<DType>(i);
    if (is_quantized(t) && t != DType::kQ8_K) v.push_back(t);
  }
  EXPECT_TRUE(matmul_int8_ok(DType::kQ4_K) && matmul_int8_ok(DType::kQ6_K));
  EXPECT_FALSE(matmul_int8_ok(DType::kQ8_K));
  EXPECT_FALSE(matmul_int8_ok(DType::kBF16));
  return v;
}

// The stored integer c (w = dw c + mw), scale and minimum of each element of
// a quantized row, read from the block bytes as quant/blocks.h lays them out.
struct RowInts {
  std::vector<int32_t> c;
  std::vector<double> dw, mw;  // per group
};

RowInts row_ints(DType t, const void* row, int64_t k) {
  const DTypeInfo& info = dtype_info(t);
  const int64_t g = info.block_elems;
  RowInts r;
  r.c.resize(static_cast<size_t>(k));
  if (info.dequant_only) {
    // The GGUF-only formats: their integer form, itself tested against the
    // reference dequantizer (tests/quant/test_gguf_integers.cpp).
    const GgufIntegers f = gguf_integers(t);
    std::vector<uint8_t> u(static_cast<size_t>(g));
    std::vector<float> dw(static_cast<size_t>(g / f.group)), mw(dw.size());
    for (int64_t b = 0; b < k / g; ++b) {
      gguf_unpack_block_ref(t, static_cast<const uint8_t*>(row) + b * info.block_bytes, u.data(),
                            dw.data(), mw.data());
      for (int64_t e = 0; e < g; ++e) {
        r.c[static_cast<size_t>(b * g + e)] = u[static_cast<size_t>(e)] - f.bias;
      }
      r.dw.insert(r.dw.end(), dw.begin(), dw.end());
      r.mw.insert(r.mw.end(), mw.begin(), mw.end());
    }
    return r;
  }
  for (int64_t b = 0; b < k / g; ++b) {
    const auto* blk = static_cast<const uint8_t*>(row) + b * info.block_bytes;
    uint16_t d = 0, m = 0;
    std::memcpy(&d, blk, 2);
    const uint8_t* qs = blk + 2;
    if (!info.symmetric) {
      std::memcpy(&m, blk + 2, 2);
      qs = blk + 4;
    }
    r.dw.push_back(f16_to_f32(d));
    r.mw.push_back(info.symmetric ? 0.0 : f16_to_f32(m));
    for (int64_t e = 0; e < g; ++e) {
      int32_t c;
      if (info.bits == 4) {
        const int32_t q = e < g / 2 ? qs[e] & 15 : qs[e - g / 2] >> 4;
        c = info.symmetric ? q - 8 : q;
      } else {
        c = info.symmetric ? static_cast<int8_t>(qs[e]) : qs[e];
      }
      r.c[static_cast<size_t>(b * g + e)] = c;
    }
  }
  return r;
}

TEST(QuantizeRowInt8, FastEqualsReferenceBitForBit) {
  for (int64_t group : {16, 32, 64, 128}) {
    SCOPED_TRACE(group);
    const int64_t k = group * 7;
    auto x = test::random_floats(static_cast<size_t>(k), -3.0f, 3.0f, 17);
    // Group 1 all zero, group 2 with a NaN, group 3 with an infinity, group 4
    // tiny, group 5 with values on rounding ties, group 6 one large outlier.
    for (int64_t e = 0; e < group; ++e) x[static_cast<size_t>(group + e)] = 0.0f;
    x[static_cast<size_t>(2 * group + 5)] = NAN;
    x[static_cast<size_t>(3 * group + 1)] = -INFINITY;
    for (int64_t e = 0; e < group; ++e) x[static_cast<size_t>(4 * group + e)] *= 1e-30f;
    for (int64_t e = 0; e < group; ++e) {
      x[static_cast<size_t>(5 * group + e)] = static_cast<float>(e % 8) * 0.5f - 2.0f;
    }
    x[static_cast<size_t>(5 * group)] = 127.0f;  // id = 1: q = x, ties at .5 round to even
    x[static_cast<size_t>(6 * group + 3)] = 1e6f;
    std::vector<int8_t> q(static_cast<size_t>(k)), q_ref(q.size());
    std::vector<float> d(static_cast<size_t>(k / group)), d_ref(d.size());
    std::vector<int32_t> s(d.size()), s_ref(d.size());
    quantize_row_int8(x.data(), k, group, q.data(), d.data(), s.data());
    quantize_row_int8_ref(x.data(), k, group, q_ref.data(), d_ref.data(), s_ref.data());
    EXPECT_EQ(q, q_ref);
    EXPECT_EQ(s, s_ref);
    for (size_t g = 0; g < d.size(); ++g) {
      EXPECT_EQ(std::isnan(d[g]), std::isnan(d_ref[g])) << g;
      if (!std::isnan(d_ref[g])) {
        EXPECT_EQ(d[g], d_ref[g]) << g;
      }
    }
    EXPECT_EQ(d[1], 0.0f);
    EXPECT_TRUE(std::isnan(d[2]));
    EXPECT_TRUE(std::isnan(d[3]));
    EXPECT_EQ(d[4], 0.0f);
    // id = 1 in group 5: q = x rounded half to even (-1.5 -> -2, -0.5 -> 0, 1.5 -> 2).
    for (int64_t e = 0; e < group; ++e) {
      const float v = x[static_cast<size_t>(5 * group + e)];
      EXPECT_EQ(q[static_cast<size_t>(5 * group + e)], static_cast<int8_t>(std::nearbyint(v))) << e;
    }
  }
}

struct Case {
  int64_t m, n, k_groups;
  bool bias;
  size_t w_pad;
  int64_t x_pad, y_pad;
};

// matmul(kInt8) against matmul_int8_ref, every element within the bound of
// the file comment; returns the output for cross-checks.
std::vector<float> check_int8(MatmulCache& cache, DType t, const Case& cs, uint32_t seed) {
  const int64_t g = matmul_int8_group(t);
  const int64_t k = cs.k_groups * dtype_info(t).block_elems, m = cs.m, n = cs.n;
  SCOPED_TRACE(::testing::Message() << dtype_name(t) << " m=" << m << " n=" << n << " k=" << k
                                    << " bias=" << cs.bias << " threads=" << omp_get_max_threads());
  const size_t w_stride = row_bytes(t, k) + cs.w_pad;
  const auto w = test::random_weights(t, n, k, w_stride, seed);
  const auto xv = test::random_floats(static_cast<size_t>(m * k), -2.0f, 2.0f, seed + 1);
  const auto bias = test::random_floats(static_cast<size_t>(n), -1.0f, 1.0f, seed + 2);
  const float* b = cs.bias ? bias.data() : nullptr;
  GuardedRows x(m, k, k + cs.x_pad);
  x.fill(xv);
  GuardedRows y(m, n, n + cs.y_pad);
  std::vector<float> y_ref(static_cast<size_t>(m * n));
  EXPECT_EQ(matmul(cache, y.data(), y.stride(), x.data(), x.stride(), w.data(), t, w_stride, b, m,
                   n, k, ComputeType::kInt8),
            Status::kOk);
  EXPECT_EQ(matmul_ref(y_ref.data(), n, x.data(), x.stride(), w.data(), t, w_stride, b, m, n, k,
                       ComputeType::kInt8),
            Status::kOk);
  EXPECT_TRUE(y.canaries_intact());
  // The bound's A per element, from the same integers.
  const int64_t ng = k / g;
  std::vector<RowInts> wi;
  for (int64_t j = 0; j < n; ++j) wi.push_back(row_ints(t, w.data() + j * w_stride, k));
  std::vector<double> a(static_cast<size_t>(m * n));
  std::vector<int8_t> q(static_cast<size_t>(k));
  std::vector<float> dx(static_cast<size_t>(ng));
  std::vector<int32_t> ts(static_cast<size_t>(ng));
  for (int64_t i = 0; i < m; ++i) {
    quantize_row_int8_ref(xv.data() + i * k, k, g, q.data(), dx.data(), ts.data());
    for (int64_t j = 0; j < n; ++j) {
      double sum = b != nullptr ? std::fabs(b[j]) : 0.0;
      const RowInts& r = wi[static_cast<size_t>(j)];
      for (int64_t gi = 0; gi < ng; ++gi) {
        int64_t s = 0;
        for (int64_t e = 0; e < g; ++e) {
          s += static_cast<int64_t>(r.c[static_cast<size_t>(gi * g + e)]) *
               q[static_cast<size_t>(gi * g + e)];
        }
        sum += std::fabs(dx[static_cast<size_t>(gi)]) *
               (std::fabs(r.dw[static_cast<size_t>(gi)] * static_cast<double>(s)) +
                std::fabs(r.mw[static_cast<size_t>(gi)] * ts[static_cast<size_t>(gi)]));
      }
      a[static_cast<size_t>(i * n + j)] = sum;
    }
  }
  const auto ref = test::to_double(y_ref);
  EXPECT_TRUE(test::all_close(
      y.rows(), ref, [&](size_t e) { return (ng + 4) * kU32 * a[e] + kU32 * std::fabs(ref[e]); },
      "int8 matmul"));
  return y.rows();
}

TEST(MatmulInt8, MatchesReferenceEveryFormat) {
  MatmulCache cache;
  const std::vector<Case> cases = {
      {1, 1, 1, false, 0, 0, 0},   {1, 33, 3, true, 2, 1, 2},    {3, 17, 1, false, 0, 0, 0},
      {6, 32, 2, true, 0, 0, 0},   {7, 45, 5, true, 4, 3, 1},    {13, 64, 4, false, 0, 2, 0},
      {32, 100, 3, true, 0, 0, 3}, {130, 37, 2, false, 6, 5, 0}, {250, 70, 1, true, 0, 0, 0},
  };
  uint32_t seed = 100;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (DType t : quantized_dtypes()) {
      for (const Case& cs : cases) check_int8(cache, t, cs, seed += 7);
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

TEST(MatmulInt8, PortableLoopsGiveTheSameBits) {
  if (!matmul_int8_native())
    GTEST_SKIP() << "this CPU has no AVX512-VNNI: only the portable loops run";
  MatmulCache cache;
  const std::vector<Case> cases = {{5, 37, 3, true, 0, 0, 0}, {40, 70, 2, false, 2, 1, 1}};
  uint32_t seed = 900;
  for (DType t : quantized_dtypes()) {
    for (const Case& cs : cases) {
      const auto native = check_int8(cache, t, cs, seed);
      const CpuFeatures saved = restrict_cpu_features({false, false, true});
      ASSERT_FALSE(matmul_int8_native());
      const auto portable = check_int8(cache, t, cs, seed);
      restrict_cpu_features(saved);
      ASSERT_EQ(native.size(), portable.size());
      EXPECT_EQ(std::memcmp(native.data(), portable.data(), native.size() * 4), 0) << dtype_name(t);
      seed += 11;
    }
  }
}

// Without VNNI the AVX2 kernel (matmul_int8_avx2.h) where the CPU has AVX2,
// scalar loops otherwise: the same integers and float steps, so the same
// bits. Shapes: rows of x up to 32 (whole strips of the formats with groups
// of 32 multiplied straight from the blocks) and 40 (through the unpacked
// strip), whole strips of 8 weight rows and a partial one, with and without
// bias.
TEST(MatmulInt8, Avx2KernelGivesThePortableBits) {
  if (!cpu_features().avx2_fma) GTEST_SKIP() << "this CPU has no AVX2";
  MatmulCache cache;
  const std::vector<Case> cases = {{1, 16, 2, false, 0, 0, 0}, {1, 20, 3, true, 2, 1, 0},
                                   {2, 24, 2, true, 0, 0, 2},  {3, 16, 2, false, 0, 0, 0},
                                   {5, 37, 3, true, 0, 0, 0},  {9, 20, 2, false, 2, 1, 1},
                                   {40, 24, 1, true, 0, 3, 0}};
  uint32_t seed = 950;
  for (DType t : quantized_dtypes()) {
    for (const Case& cs : cases) {
      const CpuFeatures saved = restrict_cpu_features({false, false, true});
      const auto avx2 = check_int8(cache, t, cs, seed);
      restrict_cpu_features({false, false, false});
      const auto scalar = check_int8(cache, t, cs, seed);
      restrict_cpu_features(saved);
      ASSERT_EQ(avx2.size(), scalar.size());
      EXPECT_EQ(std::memcmp(avx2.data(), scalar.data(), avx2.size() * 4), 0) << dtype_name(t);
      seed += 11;
    }
  }
}

// The AVX2 kernel's 16-bit pair sums at their largest: every byte value in
// the weights (u = 15 and 255, q = -128 and 127 in Q8S) against x quantized
// to +-127 throughout. Any saturation would change an integer sum, so a bit
// of the output, against the scalar loops. 1 and 3 rows of x (multiplied
// straight from the blocks) and 40 (through the unpacked strip).
TEST(MatmulInt8, Avx2KernelExtremeIntegers) {
  if (!cpu_features().avx2_fma) GTEST_SKIP() << "this CPU has no AVX2";
  MatmulCache cache;
  const int64_t n = 16;
  uint32_t seed = 1234;
  for (const int64_t m : {1, 3, 40})
    for (DType t : quantized_dtypes()) {
      const DTypeInfo& info = dtype_info(t);
      const int64_t k = 2 * info.block_elems;
      const size_t stride = row_bytes(t, k);
      std::vector<char> w(stride * static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        char* row = w.data() + static_cast<size_t>(j) * stride;
        if (info.dequant_only) {
          test::random_gguf_row(t, row, k, seed + static_cast<uint32_t>(j));
          continue;
        }
        // Random bytes, then finite scales (and minimums) in each block's head.
        const auto bytes =
            test::random_floats(stride, 0.0f, 256.0f, seed + static_cast<uint32_t>(j));
        for (size_t b = 0; b < stride; ++b) {
          row[b] = static_cast<char>(static_cast<int>(bytes[b]) & 0xff);
        }
        for (int64_t b = 0; b < k / info.block_elems; ++b) {
          char* blk = row + b * info.block_bytes;
          const uint16_t d = f32_to_f16(0.01f * static_cast<float>(j + 1));
          const uint16_t mn = f32_to_f16(-0.5f);
          std::memcpy(blk, &d, 2);
          if (!info.symmetric) std::memcpy(blk + 2, &mn, 2);
        }
      }
      // x = +-1 everywhere: every group's scale is 1/127 and every qx is +-127.
      std::vector<float> x(static_cast<size_t>(m * k));
      const auto signs = test::random_floats(x.size(), -1.0f, 1.0f, seed + 99);
      for (size_t e = 0; e < x.size(); ++e) x[e] = signs[e] < 0.0f ? -1.0f : 1.0f;
      std::vector<float> y_avx2(static_cast<size_t>(m * n)), y_scalar(y_avx2.size());
      const CpuFeatures saved = restrict_cpu_features({false, false, true});
      ASSERT_EQ(matmul(cache, y_avx2.data(), n, x.data(), k, w.data(), t, stride, nullptr, m, n, k,
                       ComputeType::kInt8),
                Status::kOk);
      restrict_cpu_features({false, false, false});
      ASSERT_EQ(matmul(cache, y_scalar.data(), n, x.data(), k, w.data(), t, stride, nullptr, m, n,
                       k, ComputeType::kInt8),
                Status::kOk);
      restrict_cpu_features(saved);
      EXPECT_EQ(std::memcmp(y_avx2.data(), y_scalar.data(), y_avx2.size() * 4), 0) << dtype_name(t);
      seed += 17;
    }
}

TEST(MatmulInt8, NonFiniteInputsAndFloatWeights) {
  MatmulCache cache;
  const DType t = kQ4_1;
  const int64_t m = 3, n = 5, k = 64;
  const auto w = test::random_weights(t, n, k, row_bytes(t, k), 5);
  auto x = test::random_floats(static_cast<size_t>(m * k), -1, 1, 6);
  x[static_cast<size_t>(k + 40)] = NAN;  // row 1, group 1
  std::vector<float> y(static_cast<size_t>(m * n));
  ASSERT_EQ(matmul(cache, y.data(), n, x.data(), k, w.data(), t, row_bytes(t, k), nullptr, m, n, k,
                   ComputeType::kInt8),
            Status::kOk);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(std::isnan(y[static_cast<size_t>(i * n + j)]), i == 1) << i << " " << j;
    }
  }
  // f32 weights: kInt8 computes as kBF16.
  const auto wf = test::random_floats(static_cast<size_t>(n * k), -1, 1, 7);
  std::vector<float> a(y.size()), b(y.size());
  x[static_cast<size_t>(k + 40)] = 0.25f;
  ASSERT_EQ(matmul(cache, a.data(), n, x.data(), k, wf.data(), DType::kF32, k * 4, nullptr, m, n, k,
                   ComputeType::kInt8),
            Status::kOk);
  ASSERT_EQ(matmul(cache, b.data(), n, x.data(), k, wf.data(), DType::kF32, k * 4, nullptr, m, n, k,
                   ComputeType::kBF16),
            Status::kOk);
  EXPECT_EQ(a, b);
}

// The mode against the f32 product of the same (dequantized) weights: within
// the rounding of x to the int8 grid of its group (file comment).
TEST(MatmulInt8, WithinInt8RoundingOfF32) {
  MatmulCache cache;
  for (DType t : quantized_dtypes()) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t g = matmul_int8_group(t);
    const int64_t m = 9, n = 41, k = 4 * dtype_info(t).block_elems;
    const auto w = test::random_weights(t, n, k, row_bytes(t, k), 21);
    const auto x = test::random_floats(static_cast<size_t>(m * k), -2.0f, 2.0f, 22);
    std::vector<float> y(static_cast<size_t>(m * n)), y32(y.size());
    ASSERT_EQ(matmul(cache, y.data(), n, x.data(), k, w.data(), t, row_bytes(t, k), nullptr, m, n,
                     k, ComputeType::kInt8),
              Status::kOk);
    ASSERT_EQ(matmul_ref(y32.data(), n, x.data(), k, w.data(), t, row_bytes(t, k), nullptr, m, n, k,
                         ComputeType::kF32),
              Status::kOk);
    std::vector<float> wf(static_cast<size_t>(k));
    std::vector<int8_t> q(static_cast<size_t>(k));
    std::vector<float> dx(static_cast<size_t>(k / g));
    std::vector<int32_t> ts(dx.size());
    double worst = 0;
    for (int64_t i = 0; i < m; ++i) {
      quantize_row_int8_ref(x.data() + i * k, k, g, q.data(), dx.data(), ts.data());
      for (int64_t j = 0; j < n; ++j) {
        dequantize_row_ref(t, w.data() + j * row_bytes(t, k), wf.data(), k);
        double bound = 0, abs_sum = 0;
        for (int64_t l = 0; l < k; ++l) {
          const double xl = x[static_cast<size_t>(i * k + l)];
          bound += std::fabs(wf[static_cast<size_t>(l)]) *
                   (0.5 * dx[static_cast<size_t>(l / g)] + 4 * kU32 * std::fabs(xl));
          abs_sum += std::fabs(wf[static_cast<size_t>(l)] * xl);
        }
        bound += 2 * (k + 2) * kU32 * abs_sum;  // f32 rounding of both products
        const double diff = std::fabs(static_cast<double>(y[static_cast<size_t>(i * n + j)]) -
                                      y32[static_cast<size_t>(i * n + j)]);
        EXPECT_LE(diff, bound) << i << " " << j;
        worst = std::max(worst, diff / bound);
      }
    }
    // The bound is a worst case; random rounding errors use a fraction of it.
    EXPECT_LT(worst, 0.5);
  }
}

}  // namespace
}  // namespace strata::cpu
