// Element-wise ops against their double-precision references. The bounds are
// the accuracy statements of activation.h / vec_math.h (u = 2^-24, e =
// kExpRelErr), checked on every element, special values included; the
// approximations themselves are checked against <cmath> on dense sweeps.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/vec_math.h"
#include "support/all_close.h"
#include "support/op_bounds.h"
#include "support/guarded.h"
#include "support/random.h"

namespace strata::cpu {
namespace {

using test::GuardedRows;
using test::kTiny;
using test::kU32;

TEST(VecMath, ExpWithinStatedError) {
  double worst = 0;
  for (double xd = -87.3; xd <= 88.7; xd += 1.3e-4) {
    const float x = static_cast<float>(xd);
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(exp_fast(x) - ref) / ref);
  }
  EXPECT_LE(worst, kExpRelErr) << "worst relative error " << worst;
  EXPECT_EQ(exp_fast(0.0f), 1.0f);
  EXPECT_EQ(exp_fast(-INFINITY), 0.0f);
  EXPECT_EQ(exp_fast(-1000.0f), 0.0f);
  EXPECT_EQ(exp_fast(INFINITY), INFINITY);
  EXPECT_EQ(exp_fast(89.0f), INFINITY);
  EXPECT_TRUE(std::isnan(exp_fast(NAN)));
  EXPECT_TRUE(std::isfinite(exp_fast(88.72f)));
}

#if defined(__x86_64__)
// GCC 12 warns about the undefined pass-through operand of its own AVX-512
// intrinsics once they are inlined here; nothing reads it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512dq,fma"))) void exp16(const float* x, float* y) {
  _mm512_storeu_ps(y, exp_fast_avx512(_mm512_loadu_ps(x)));
}
#pragma GCC diagnostic pop

TEST(VecMath, ExpAvx512WithinStatedError) {
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  double worst = 0;
  float x[16], y[16];
  for (double xd = -87.3; xd <= 88.7; xd += 16 * 1.3e-4) {
    for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(xd + i * 1.3e-4);
    exp16(x, y);
    for (int i = 0; i < 16; ++i) {
      const double ref = std::exp(static_cast<double>(x[i]));
      worst = std::max(worst, std::fabs(y[i] - ref) / ref);
    }
  }
  EXPECT_LE(worst, kExpRelErr) << "worst relative error " << worst;
  const float special[16] = {0.0f,   -INFINITY, -1000.0f, INFINITY, 89.0f, NAN,    88.72f, -87.0f,
                             -88.0f, 1.0f,      -1.0f,    0.5f,     20.0f, -20.0f, 1e-30f, -0.0f};
  exp16(special, y);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], INFINITY);
  EXPECT_EQ(y[4], INFINITY);
  EXPECT_TRUE(std::isnan(y[5]));
  EXPECT_TRUE(std::isfinite(y[6]));
  EXPECT_EQ(y[8], 0.0f);  // below the normal range: flushed
  EXPECT_EQ(y[15], 1.0f);
}
#endif

TEST(VecMath, ErfcWithinStatedError) {
  double worst = 0;
  for (double xd = -9.0; xd <= 9.0; xd += 3.1e-6) {
    const float x = static_cast<float>(xd);
    const double ref = std::erfc(static_cast<double>(x));
    const double rel = kErfcRelErr + (2.5 * x * static_cast<double>(x) + 2) * kU32;
    const double err = std::fabs(erfc_fast(x) - ref);
    ASSERT_LE(err, ref * rel + 0x1p-126) << "x=" << x;
    worst = std::max(worst, err / (ref * rel + 0x1p-126));
  }
  EXPECT_LE(worst, 1.0);  // already asserted pointwise; the largest share of the bound used
  EXPECT_EQ(erfc_fast(INFINITY), 0.0f);
  EXPECT_EQ(erfc_fast(-INFINITY), 2.0f);
  EXPECT_TRUE(std::isnan(erfc_fast(NAN)));
}

// Random values in [-12, 12] plus the special ones.
std::vector<float> activation_inputs(size_t n, uint32_t seed) {
  auto v = test::random_floats(n, -12.0f, 12.0f, seed);
  const float special[] = {0.0f,     -0.0f,     1e-30f, -1e-30f, 1e-3f,   -1e-3f, 20.0f,
                           -20.0f,   88.0f,     -88.0f, 100.0f,  -100.0f, 1e30f,  -1e30f,
                           INFINITY, -INFINITY, NAN,    3.0f,    -3.0f};
  for (size_t i = 0; i < std::size(special) && i < n; ++i) v[i * 7 % n] = special[i];
  return v;
}

// The accuracy of each activation relative to |ref| (activation.h).
double activation_rel_bound(Activation a, double x) {
  const double e = kExpRelErr;
  switch (a) {
    case Activation::kRelu:
      return 0;
    case Activation::kSilu:
      return e + 4 * kU32;
    case Activation::kGeluTanh: {
      const double v = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
      return e + (10 * std::fabs(v) + 4) * kU32;
    }
    case Activation::kGelu:
      return kErfcRelErr + (2.5 * x * x + 8) * kU32;
  }
  return 0;
}

class ActivationTest : public ::testing::TestWithParam<Activation> {};

TEST_P(ActivationTest, MatchesReference) {
  uint32_t seed = 10;
  for (auto [rows, d, xp, yp] : std::vector<std::array<int64_t, 4>>{
           {1, 1, 0, 0}, {3, 7, 2, 1}, {17, 111, 0, 3}, {4, 1536, 1, 0}, {2, 989, 0, 0}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " d=" << d);
    GuardedRows x(rows, d, d + xp);
    x.fill(activation_inputs(static_cast<size_t>(rows * d), seed++));
    GuardedRows y(rows, d, d + yp), y_ref(rows, d, d);
    ASSERT_EQ(activation(GetParam(), y.data(), y.stride(), x.data(), x.stride(), rows, d),
              Status::kOk);
    ASSERT_EQ(activation_ref(GetParam(), y_ref.data(), d, x.data(), x.stride(), rows, d),
              Status::kOk);
    EXPECT_TRUE(y.canaries_intact());
    const auto xs = x.rows();
    const auto ref = test::to_double(y_ref.rows());
    EXPECT_TRUE(test::all_close(
        y.rows(), ref,
        [&](size_t i) {
          return activation_rel_bound(GetParam(), xs[i]) * std::fabs(ref[i]) +
                 kU32 * std::fabs(ref[i]) + kTiny;
        },
        "activation"));
    GuardedRows z = x;  // in place
    ASSERT_EQ(activation(GetParam(), z.data(), z.stride(), z.data(), z.stride(), rows, d),
              Status::kOk);
    const auto zr = z.rows(), yr = y.rows();
    for (size_t i = 0; i < zr.size(); ++i) {
      EXPECT_TRUE(zr[i] == yr[i] || (std::isnan(zr[i]) && std::isnan(yr[i]))) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, ActivationTest,
                         ::testing::Values(Activation::kRelu, Activation::kGelu,
                                           Activation::kGeluTanh, Activation::kSilu),
                         [](const auto& info) {
                           switch (info.param) {
                             case Activation::kRelu:
                               return "relu";
                             case Activation::kGelu:
                               return "gelu";
                             case Activation::kGeluTanh:
                               return "gelu_tanh";
                             default:
                               return "silu";
                           }
                         });

TEST(Swiglu, MatchesReference) {
  const int64_t rows = 9, d = 1536;
  // gate and up as the two halves of one fused [rows, 2d] projection.
  auto gu = activation_inputs(static_cast<size_t>(rows * 2 * d), 3);
  GuardedRows y(rows, d, d + 5);
  std::vector<float> y_ref(static_cast<size_t>(rows * d));
  ASSERT_EQ(swiglu(y.data(), y.stride(), gu.data(), 2 * d, gu.data() + d, 2 * d, rows, d),
            Status::kOk);
  ASSERT_EQ(swiglu_ref(y_ref.data(), d, gu.data(), 2 * d, gu.data() + d, 2 * d, rows, d),
            Status::kOk);
  EXPECT_TRUE(y.canaries_intact());
  const auto ref = test::to_double(y_ref);
  EXPECT_TRUE(test::all_close(
      y.rows(), ref, [&](size_t i) { return (kExpRelErr + 6 * kU32) * std::fabs(ref[i]) + kTiny; },
      "swiglu"));
}

// Softmax bound per element (first order): e_j = exp(x_j - m) has relative
// error d_j = e + |x_j - m| u (exp and the rounding of its argument); the f32
// sum of d terms (any order) adds (d + 1) u; the sum's error relative to
// itself is at most sum_j y_j d_j + (d + 1) u; y_i then has d_i + that + 2 u.
TEST(Softmax, MatchesReference) {
  uint32_t seed = 50;
  for (auto [rows, d, lo, hi] :
       std::vector<std::tuple<int64_t, int64_t, float, float>>{{1, 1, -1, 1},
                                                               {3, 7, -5, 5},
                                                               {17, 111, -30, 30},
                                                               {5, 989, -80, 80},
                                                               {2, 49152, -20, 20}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " d=" << d);
    auto xv = test::random_floats(static_cast<size_t>(rows * d), lo, hi, seed++);
    if (d >= 7) {
      xv[2] = -INFINITY;  // a masked entry
      xv[static_cast<size_t>(d + 3) % xv.size()] = -1e30f;
    }
    GuardedRows x(rows, d, d + 2);
    x.fill(xv);
    GuardedRows y(rows, d, d + 1);
    std::vector<float> y_ref(xv.size());
    ASSERT_EQ(softmax(y.data(), y.stride(), x.data(), x.stride(), rows, d), Status::kOk);
    ASSERT_EQ(softmax_ref(y_ref.data(), d, x.data(), x.stride(), rows, d), Status::kOk);
    EXPECT_TRUE(y.canaries_intact());
    const auto ref = test::to_double(y_ref);
    const auto tol = test::softmax_bound(xv, ref, rows, d, kExpRelErr);
    EXPECT_TRUE(test::all_close(
        y.rows(), ref, [&](size_t i) { return tol[i]; }, "softmax"));
  }
}

TEST(Softmax, SpecialRows) {
  const int64_t d = 5;
  const float inf = INFINITY;
  std::vector<float> x = {-inf, -inf, -inf, -inf, -inf,   // all masked: NaN, as PyTorch
                          -inf, 2.0f, -inf, -inf, -inf,   // one visible: exactly 1
                          1.0f, NAN,  2.0f, 3.0f, 4.0f,   // NaN poisons the row
                          7.0f, 7.0f, 7.0f, 7.0f, 7.0f};  // uniform
  std::vector<float> y(x.size()), y_ref(x.size());
  ASSERT_EQ(softmax(y.data(), d, x.data(), d, 4, d), Status::kOk);
  ASSERT_EQ(softmax_ref(y_ref.data(), d, x.data(), d, 4, d), Status::kOk);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(y[i]) && std::isnan(y_ref[i]));
  for (int i = 5; i < 10; ++i) EXPECT_EQ(y[i], i == 6 ? 1.0f : 0.0f);
  for (int i = 10; i < 15; ++i) EXPECT_TRUE(std::isnan(y[i]) && std::isnan(y_ref[i]));
  for (int i = 15; i < 20; ++i) EXPECT_EQ(y[i], 0.2f);
}

TEST(Add, ExactAndInPlace) {
  const int64_t rows = 7, d = 111;
  const auto a = activation_inputs(rows * d, 1);
  const auto b = test::random_floats(rows * d, -5, 5, 2);
  GuardedRows y(rows, d, d + 3);
  std::vector<float> y_ref(a.size());
  ASSERT_EQ(add(y.data(), y.stride(), a.data(), d, b.data(), d, rows, d), Status::kOk);
  ASSERT_EQ(add_ref(y_ref.data(), d, a.data(), d, b.data(), d, rows, d), Status::kOk);
  EXPECT_TRUE(y.canaries_intact());
  EXPECT_TRUE(test::all_close(
      y.rows(), test::to_double(y_ref), [](size_t) { return 0.0; }, "add"));
  auto r = a;  // residual += b, in place
  ASSERT_EQ(add(r.data(), d, r.data(), d, b.data(), d, rows, d), Status::kOk);
  EXPECT_TRUE(test::all_close(
      r, test::to_double(y_ref), [](size_t) { return 0.0; }, "add in place"));

  const auto bias = test::random_floats(d, -1, 1, 3);
  auto yb = b, yb_ref = b;
  ASSERT_EQ(add_bias(yb.data(), d, bias.data(), rows, d), Status::kOk);
  ASSERT_EQ(add_bias_ref(yb_ref.data(), d, bias.data(), rows, d), Status::kOk);
  EXPECT_TRUE(test::all_close(
      yb, test::to_double(yb_ref), [](size_t) { return 0.0; }, "add_bias"));
}

TEST(Elementwise, RejectsBadArguments) {
  std::vector<float> x(8), y(8);
  EXPECT_EQ(activation(Activation::kSilu, y.data(), 3, x.data(), 4, 2, 4),
            Status::kInvalidArgument);
  EXPECT_EQ(activation(static_cast<Activation>(9), y.data(), 4, x.data(), 4, 2, 4),
            Status::kInvalidArgument);
  EXPECT_EQ(softmax(y.data(), 4, nullptr, 4, 2, 4), Status::kInvalidArgument);
  EXPECT_EQ(add_bias(y.data(), 4, nullptr, 2, 4), Status::kInvalidArgument);
  EXPECT_EQ(swiglu(y.data(), 4, x.data(), 4, x.data(), 4, -1, 4), Status::kInvalidArgument);
  EXPECT_EQ(softmax(nullptr, 0, nullptr, 0, 0, 4), Status::kOk);
}

}  // namespace
}  // namespace strata::cpu
