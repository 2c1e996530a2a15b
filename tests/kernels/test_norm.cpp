// rms_norm and layer_norm against their double-precision references, every
// element within a bound derived from f32 rounding (u = 2^-24):
//   rms_norm: the sum of d squares (any order) is within (d + 1) u, the mean,
//     + eps, sqrt, reciprocal and two products add 5 u, sqrt halves the
//     first: |y - ref| <= (0.5 (d + 3) + 6) u |ref|.
//   layer_norm: see layer_norm_bound (the mean's error enters every centred
//     value, so the bound has an absolute part from mean|x|).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/norm.h"
#include "support/all_close.h"
#include "support/op_bounds.h"
#include "support/guarded.h"
#include "support/random.h"

namespace strata::cpu {
namespace {

using test::GuardedRows;
using test::kTiny;
using test::kU32;

using test::kNormCases;
using test::layer_norm_bound;

TEST(RmsNorm, MatchesReference) {
  uint32_t seed = 1;
  for (const auto& c : kNormCases) {
    for (bool with_w : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "rows=" << c.rows << " d=" << c.d << " w=" << with_w);
      GuardedRows x(c.rows, c.d, c.d + c.x_pad);
      x.fill(test::random_floats(static_cast<size_t>(c.rows * c.d), -3.0f, 3.0f, seed++));
      const auto w = test::random_floats(static_cast<size_t>(c.d), 0.5f, 1.5f, seed++);
      GuardedRows y(c.rows, c.d, c.d + c.y_pad), y_ref(c.rows, c.d, c.d);
      const float* wp = with_w ? w.data() : nullptr;
      ASSERT_EQ(rms_norm(y.data(), y.stride(), x.data(), x.stride(), wp, 1e-5f, c.rows, c.d),
                Status::kOk);
      ASSERT_EQ(rms_norm_ref(y_ref.data(), c.d, x.data(), x.stride(), wp, 1e-5f, c.rows, c.d),
                Status::kOk);
      EXPECT_TRUE(y.canaries_intact());
      const auto ref = test::to_double(y_ref.rows());
      const double rel = test::rms_norm_rel_bound(c.d);
      EXPECT_TRUE(test::all_close(
          y.rows(), ref, [&](size_t i) { return rel * std::fabs(ref[i]) + kTiny; }, "rms_norm"));
      // In place gives the same floats as out of place.
      GuardedRows z = x;
      ASSERT_EQ(rms_norm(z.data(), z.stride(), z.data(), z.stride(), wp, 1e-5f, c.rows, c.d),
                Status::kOk);
      EXPECT_EQ(z.rows(), y.rows());
      EXPECT_TRUE(z.canaries_intact());
    }
  }
}

TEST(LayerNorm, MatchesReference) {
  uint32_t seed = 100;
  for (const auto& c : kNormCases) {
    for (int variant = 0; variant < 3; ++variant) {
      // 0: w and b; 1: neither; 2: w only, rows with a large mean (cancellation).
      SCOPED_TRACE(::testing::Message()
                   << "rows=" << c.rows << " d=" << c.d << " variant=" << variant);
      auto xv = test::random_floats(static_cast<size_t>(c.rows * c.d), -3.0f, 3.0f, seed++);
      if (variant == 2) {
        for (auto& v : xv) v = 1000.0f + v * 0.01f;
      }
      GuardedRows x(c.rows, c.d, c.d + c.x_pad);
      x.fill(xv);
      const auto w = test::random_floats(static_cast<size_t>(c.d), -1.5f, 1.5f, seed++);
      const auto b = test::random_floats(static_cast<size_t>(c.d), -1.0f, 1.0f, seed++);
      const float* wp = variant == 1 ? nullptr : w.data();
      const float* bp = variant == 0 ? b.data() : nullptr;
      GuardedRows y(c.rows, c.d, c.d + c.y_pad), y_ref(c.rows, c.d, c.d);
      ASSERT_EQ(layer_norm(y.data(), y.stride(), x.data(), x.stride(), wp, bp, 1e-5f, c.rows, c.d),
                Status::kOk);
      ASSERT_EQ(layer_norm_ref(y_ref.data(), c.d, x.data(), x.stride(), wp, bp, 1e-5f, c.rows, c.d),
                Status::kOk);
      EXPECT_TRUE(y.canaries_intact());
      const auto ref = test::to_double(y_ref.rows());
      std::vector<double> tol;
      for (int64_t r = 0; r < c.rows; ++r) {
        const std::vector<double> row_ref(ref.begin() + r * c.d, ref.begin() + (r + 1) * c.d);
        const auto t = layer_norm_bound(&x.at(r, 0), wp, row_ref, c.d, 1e-5);
        tol.insert(tol.end(), t.begin(), t.end());
      }
      EXPECT_TRUE(test::all_close(
          y.rows(), ref, [&](size_t i) { return tol[i]; }, "layer_norm"));
      GuardedRows z = x;
      ASSERT_EQ(layer_norm(z.data(), z.stride(), z.data(), z.stride(), wp, bp, 1e-5f, c.rows, c.d),
                Status::kOk);
      EXPECT_EQ(z.rows(), y.rows());
    }
  }
}

TEST(Norms, NonFiniteInputPoisonsOnlyItsRow) {
  const int64_t d = 33;
  auto xv = test::random_floats(3 * d, -1.0f, 1.0f, 5);
  xv[d + 4] = NAN;
  xv[2 * d + 7] = INFINITY;
  std::vector<float> y(xv.size()), y_ref(xv.size());
  for (int op = 0; op < 2; ++op) {
    if (op == 0) {
      ASSERT_EQ(rms_norm(y.data(), d, xv.data(), d, nullptr, 1e-6f, 3, d), Status::kOk);
      ASSERT_EQ(rms_norm_ref(y_ref.data(), d, xv.data(), d, nullptr, 1e-6f, 3, d), Status::kOk);
    } else {
      ASSERT_EQ(layer_norm(y.data(), d, xv.data(), d, nullptr, nullptr, 1e-6f, 3, d), Status::kOk);
      ASSERT_EQ(layer_norm_ref(y_ref.data(), d, xv.data(), d, nullptr, nullptr, 1e-6f, 3, d),
                Status::kOk);
    }
    for (int64_t i = 0; i < d; ++i) EXPECT_TRUE(std::isfinite(y[i])) << op << " " << i;
    for (int64_t i = d; i < 3 * d; ++i) {
      EXPECT_EQ(std::isnan(y[i]), std::isnan(y_ref[i])) << op << " " << i;
      if (!std::isnan(y_ref[i])) {
        EXPECT_EQ(y[i], y_ref[i]) << op << " " << i;
      }
    }
  }
}

TEST(Norms, RejectsBadArguments) {
  std::vector<float> x(16, 1.0f), y(16, 7.0f);
  EXPECT_EQ(rms_norm(y.data(), 4, x.data(), 3, nullptr, 1e-5f, 2, 4), Status::kInvalidArgument);
  EXPECT_EQ(rms_norm(y.data(), 4, x.data(), 4, nullptr, -1.0f, 2, 4), Status::kInvalidArgument);
  EXPECT_EQ(rms_norm(y.data(), 4, x.data(), 4, nullptr, NAN, 2, 4), Status::kInvalidArgument);
  EXPECT_EQ(layer_norm(y.data(), 4, nullptr, 4, nullptr, nullptr, 1e-5f, 2, 4),
            Status::kInvalidArgument);
  EXPECT_EQ(layer_norm(y.data(), 4, x.data(), 4, nullptr, nullptr, 1e-5f, 2, 0),
            Status::kInvalidArgument);
  for (float v : y) EXPECT_EQ(v, 7.0f);
  EXPECT_EQ(rms_norm(nullptr, 4, nullptr, 4, nullptr, 1e-5f, 0, 4), Status::kOk);
}

}  // namespace
}  // namespace strata::cpu
