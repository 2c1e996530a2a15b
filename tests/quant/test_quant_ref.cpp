// The reference quantizers: ggml's arithmetic on hand-computed groups,
// round-trip error bounds per element (every element, every format), RMSE
// relative to the group range, and the special groups of quant_ref.h
// (constant, zero, non-finite, large magnitudes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/blocks.h"
#include "quant/quant_ref.h"
#include "quant/quant_test_util.h"

namespace strata {
namespace {

using test::bits_of;
using test::f16_round;
using test::group_of;
using test::levels_of;

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> y(row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row_ref(t, x.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

std::vector<float> dequantize(DType t, const std::vector<uint8_t>& y, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  dequantize_row_ref(t, y.data(), x.data(), n);
  return x;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  return dequantize(t, quantize(t, x), static_cast<int64_t>(x.size()));
}

uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// The stored integer of element j of a block, as the formula uses it
// (Q4S: q - 8).
int stored_q(DType t, const uint8_t* block, int j) {
  const auto& info = dtype_info(t);
  const int g = info.block_elems;
  const uint8_t* qs = block + (info.symmetric ? 2 : 4);
  if (info.bits == 8) return info.symmetric ? static_cast<int8_t>(qs[j]) : qs[j];
  const int q = j < g / 2 ? (qs[j] & 0x0f) : (qs[j - g / 2] >> 4);
  return info.symmetric ? q - 8 : q;
}

double dist_to_interval(double x, double a, double b) {
  const double lo = std::min(a, b), hi = std::max(a, b);
  return x < lo ? lo - x : (x > hi ? x - hi : 0.0);
}

// Checks one group x[0..G) against its block and its dequantized values y,
// by the rules of quant_ref.h:
//  - non-finite input: every y is NaN;
//  - constant input v (symmetric: v != 0, f16(v) finite): y == f16(v);
//  - otherwise, per element, |x - y| <= the bound derived from the format:
//      rounding to the grid               d/2
//      f16 rounding of the scale          |q| * |f16(d) - d|
//      f16 rounding of the minimum        |f16(min) - min|      (asymmetric)
//      clipping (Q4S's 8th positive step; saturated groups) the distance
//                                         from x to the reachable interval
//      f32 arithmetic (a few roundings)   FLT_EPSILON * (the magnitudes involved)
//    with d the f32 scale the rule computes. Saturated groups (f16(d) or
//    f16(min) overflows) are quantized against the stored scale and minimum.
// Returns the largest |x - y| / bound seen (<= 1 when all pass).
double check_group(DType t, const float* x, const uint8_t* block, const float* y) {
  const auto& info = dtype_info(t);
  const int g = info.block_elems;
  const double eps = FLT_EPSILON;
  const float d16 = f16_to_f32(load_u16(block));
  const float m16 = info.symmetric ? 0.0f : f16_to_f32(load_u16(block + 2));

  bool finite = true, constant = true;
  float amax = 0.0f, max_first = 0.0f, mn = x[0], mx = x[0];
  for (int j = 0; j < g; ++j) {
    finite = finite && std::isfinite(x[j]);
    constant = constant && x[j] == x[0];
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max_first = x[j];
    }
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
  if (!finite) {
    for (int j = 0; j < g; ++j)
      EXPECT_TRUE(std::isnan(y[j])) << "element " << j << " of a non-finite group";
    return 0.0;
  }
  for (int j = 0; j < g; ++j) {
    if (!std::isfinite(y[j])) {
      ADD_FAILURE() << dtype_name(t) << ": finite input " << x[j] << " gave " << y[j];
      return 1e9;
    }
  }
  const bool f16_ok = std::isfinite(f16_round(x[0]));
  if (constant && f16_ok && (!info.symmetric || x[0] != 0.0f)) {
    for (int j = 0; j < g; ++j) {
      EXPECT_EQ(y[j], f16_round(x[0])) << dtype_name(t) << " constant group " << x[0];
    }
    return 0.0;
  }

  double worst = 0.0;
  auto check = [&](int j, double bound) {
    const double err = std::fabs(static_cast<double>(x[j]) - y[j]);
    if (!(err <= bound)) {
      ADD_FAILURE() << dtype_name(t) << " element " << j << ": x " << x[j] << " y " << y[j]
                    << " err " << err << " > bound " << bound << " (d16 " << d16 << " m16 " << m16
                    << " q " << stored_q(t, block, j) << ")";
    }
    worst = std::max(worst, bound > 0 ? err / bound : (err > 0 ? 1e9 : 0.0));
  };

  if (info.symmetric && info.bits == 8) {
    const float d = amax / 127.0f;
    const bool saturated = std::isinf(f16_round(d));
    const bool id_zero = d != 0.0f && std::isinf(1.0f / d);  // rule: id = 0, all q = 0
    EXPECT_EQ(load_u16(block), saturated ? 0x7bff : f32_to_f16(d)) << dtype_name(t) << " scale";
    for (int j = 0; j < g; ++j) {
      const int q = stored_q(t, block, j);
      const double slop = eps * (std::fabs(x[j]) + std::fabs(y[j]));
      double bound;
      if (saturated) {
        bound = d16 / 2.0 + dist_to_interval(x[j], -127.0 * d16, 127.0 * d16) + slop;
      } else {
        bound = d / 2.0 + std::abs(q) * std::fabs(static_cast<double>(d16) - d) + slop;
        if (id_zero) bound += 128.0 * d;
      }
      check(j, bound);
    }
  } else if (info.symmetric) {  // Q4S
    const float d = max_first / -8.0f;
    const bool saturated = std::isinf(f16_round(d));
    const bool id_zero = d != 0.0f && std::isinf(1.0f / d);
    EXPECT_EQ(load_u16(block), saturated ? (f32_to_f16(d) & 0x8000) | 0x7bff : f32_to_f16(d))
        << dtype_name(t) << " scale";
    for (int j = 0; j < g; ++j) {
      const int q = stored_q(t, block, j);  // q - 8
      const double slop = eps * (std::fabs(x[j]) + std::fabs(y[j]) + 16.0 * std::fabs(d));
      double bound;
      if (saturated) {
        bound = std::fabs(d16) / 2.0 + dist_to_interval(x[j], -8.0 * d16, 7.0 * d16) + slop;
      } else {
        const double r = d != 0.0f ? x[j] / static_cast<double>(d) : 0.0;  // in [-8, 8]
        bound = std::fabs(d) * (0.5 + std::max(0.0, r - 7.5)) +
                std::abs(q) * std::fabs(static_cast<double>(d16) - d) + slop;
        if (id_zero) bound += 9.0 * std::fabs(d);
      }
      check(j, bound);
    }
  } else {  // asymmetric
    const int levels = levels_of(t);
    const float lo = mn + 0.0f, hi = mx + 0.0f;
    const float d = (hi - lo) / static_cast<float>(levels);
    const bool saturated = std::isinf(f16_round(d)) || std::isinf(f16_round(lo));
    const bool id_zero = d != 0.0f && std::isinf(1.0f / d);
    if (!saturated) {
      EXPECT_EQ(load_u16(block), f32_to_f16(d)) << dtype_name(t) << " scale";
      EXPECT_EQ(load_u16(block + 2), f32_to_f16(lo)) << dtype_name(t) << " minimum";
    } else if (std::isinf(f16_round(lo))) {
      EXPECT_EQ(load_u16(block + 2), (f32_to_f16(lo) & 0x8000) | 0x7bff) << dtype_name(t);
    }
    for (int j = 0; j < g; ++j) {
      const int q = stored_q(t, block, j);
      double bound;
      if (saturated) {
        const double top = m16 + static_cast<double>(levels) * d16;
        bound = d16 / 2.0 + dist_to_interval(x[j], m16, top) +
                eps * (std::fabs(x[j]) + std::fabs(m16) + std::fabs(y[j]) + levels * d16);
      } else {
        bound = d / 2.0 + q * std::fabs(static_cast<double>(d16) - d) +
                std::fabs(static_cast<double>(m16) - lo) +
                eps * (2.0 * (static_cast<double>(hi) - lo) + std::fabs(q * d16) + std::fabs(y[j]));
        if (id_zero) bound += static_cast<double>(levels) * d;
      }
      check(j, bound);
    }
  }
  return worst;
}

// Quantizes x with the reference, checks every group; returns the worst ratio.
double check_row(DType t, const std::vector<float>& x) {
  const int g = group_of(t);
  const auto q = quantize(t, x);
  const auto y = dequantize(t, q, static_cast<int64_t>(x.size()));
  const size_t bb = static_cast<size_t>(dtype_info(t).block_bytes);
  double worst = 0.0;
  for (size_t i = 0; i < x.size() / g; ++i) {
    worst = std::max(worst, check_group(t, x.data() + i * g, q.data() + i * bb, y.data() + i * g));
  }
  return worst;
}

TEST(QuantRef, RoundTripWithinBoundEveryElement) {
  for (DType t : test::quant_types()) {
    for (auto kind : {test::RowKind::kUniform, test::RowKind::kNormal, test::RowKind::kWideRange,
                      test::RowKind::kSpecial}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + test::row_kind_name(kind));
      const int64_t n = 512 * group_of(t);
      const double worst =
          check_row(t, test::make_row(kind, n, group_of(t), 1234 + static_cast<int>(t)));
      EXPECT_LE(worst, 1.0);
    }
  }
}

// RMSE of the round-trip error relative to each group's range (max - min),
// on data uniform in [-r, r], against the value derived for each format.
// Uniform rounding to a grid of step d has mean square error d^2/12, and an
// element that sits on the grid (the group's extremes) has none:
//   asymmetric: d = range/L; min and max exact       -> 1/(L*sqrt(12)) * sqrt((G-2)/G)
//   Q8S: d = amax/127; for G uniform samples E[amax] = r*G/(G+1) and
//        E[range] = 2r*(G-1)/(G+1), so d/range = G/(254*(G-1)); the largest
//        |x| is exact                                 -> G/(254*(G-1)*sqrt(12)) * sqrt((G-1)/G)
//   Q4S: d = amax/8, as Q8S with 8 steps a side; plus the clipped eighth
//        positive step: a fraction p = 1/32 of elements (those within amax/16
//        of the opposite extreme) have errors uniform in [d/2, d], mean
//        square 7d^2/12, so the mean square grows by (1 + 6p)
//                                                     -> G/(16*(G-1)*sqrt(12)) *
//                                                     sqrt((G-1)/G*(1+6p))
// The f16 scale and minimum add about 1% (in quadrature) and sampling error
// is below 0.5% at this size: limit = 1.03 x derived.
TEST(QuantRef, RmseRelativeToGroupRange) {
  for (DType t : test::quant_types()) {
    const auto& info = dtype_info(t);
    const int g = info.block_elems;
    const int64_t n = (1 << 18);
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i += g) {
      const float r = std::ldexp(1.0f, static_cast<int>(rng() % 12) - 6);
      for (int j = 0; j < g; ++j) x[i + j] = r * u(rng);
    }
    const auto y = round_trip(t, x);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i += g) {
      const auto [mn, mx] = std::minmax_element(x.begin() + i, x.begin() + i + g);
      const double range = static_cast<double>(*mx) - *mn;
      for (int j = 0; j < g; ++j) {
        const double e = (static_cast<double>(x[i + j]) - y[i + j]) / range;
        sum += e * e;
      }
    }
    const double rmse = std::sqrt(sum / static_cast<double>(n));
    const double gd = g;
    double theory;
    if (!info.symmetric) {
      theory = 1.0 / (levels_of(t) * std::sqrt(12.0)) * std::sqrt((gd - 2) / gd);
    } else if (info.bits == 8) {
      theory = gd / (254.0 * (gd - 1) * std::sqrt(12.0)) * std::sqrt((gd - 1) / gd);
    } else {
      const double p = 1.0 / 32.0;
      theory = gd / (16.0 * (gd - 1) * std::sqrt(12.0)) * std::sqrt((gd - 1) / gd * (1 + 6 * p));
    }
    const double factor = 1.03;
    RecordProperty(std::string(dtype_name(t)) + "_rmse_rel", std::to_string(rmse));
    std::printf("  %-7s RMSE/range %.3e  (derived %.3e, limit %.3e)\n",
                std::string(dtype_name(t)).c_str(), rmse, theory, factor * theory);
    EXPECT_LE(rmse, factor * theory) << dtype_name(t);
  }
}

// ---- ggml's arithmetic on groups computed by hand ----

TEST(QuantRef, Q8_0MatchesGgmlByHand) {
  // amax = 127 -> d = 1 (f16 0x3c00), id = 1, q = roundf(x): halves go away
  // from zero; 0.49999997 rounds to 0.
  std::vector<float> x(32, 0.0f);
  const float in[] = {127.0f, -127.0f, 2.5f, -2.5f, 0.49999997f, 1.5f, -0.5f, 0.5f, 3.2f, -3.7f};
  const int8_t want_q[] = {127, -127, 3, -3, 0, 2, -1, 1, 3, -4};
  std::copy(std::begin(in), std::end(in), x.begin());
  const auto q = quantize(kQ8_0, x);
  EXPECT_EQ(load_u16(q.data()), 0x3c00);
  for (int j = 0; j < 32; ++j) {
    const int want = j < 10 ? want_q[j] : 0;
    EXPECT_EQ(static_cast<int8_t>(q[2 + j]), want) << "element " << j;
  }
}

TEST(QuantRef, Q4_0MatchesGgmlByHand) {
  // First largest |x| is -8 -> d = -8/-8 = 1 (0x3c00), q = trunc(x + 8.5)
  // clamped: -8 -> 0, 7 -> 15, 8 -> 16 -> 15 (clipped, dequantizes to 7),
  // 0.5 -> 9 (halves round up), -0.5 -> 8, 2.4 -> 10, -2.6 -> 5.
  std::vector<float> x(32, 0.0f);
  const float in[] = {-8.0f, 7.0f, 8.0f, 0.5f, -0.5f, 2.4f, -2.6f};
  const int want_q[] = {0, 15, 15, 9, 8, 10, 5};
  std::copy(std::begin(in), std::end(in), x.begin());
  auto q = quantize(kQ4_0, x);
  EXPECT_EQ(load_u16(q.data()), 0x3c00);
  for (int j = 0; j < 32; ++j) {
    const int want = j < 7 ? want_q[j] : 8;  // zeros -> 8
    EXPECT_EQ(stored_q(kQ4_0, q.data(), j) + 8, want) << "element " << j;
  }
  // When +8 comes first the scale is negative: d = 8/-8 = -1 (0xbc00); then
  // -8 is the clipped side: trunc(-8 * -1 + 8.5) = 16 -> 15 -> 7 * -1 = -7.
  x[0] = 8.0f;
  x[2] = -8.0f;
  q = quantize(kQ4_0, x);
  EXPECT_EQ(load_u16(q.data()), 0xbc00);
  EXPECT_EQ(stored_q(kQ4_0, q.data(), 0) + 8, 0);
  EXPECT_EQ(stored_q(kQ4_0, q.data(), 2) + 8, 15);
  const auto y = dequantize(kQ4_0, q, 32);
  EXPECT_EQ(y[0], 8.0f);
  EXPECT_EQ(y[2], -7.0f);
}

TEST(QuantRef, Q4_1MatchesGgmlByHand) {
  // min = -1, max = 14 -> d = 15/15 = 1 (0x3c00), m = -1 (0xbc00); q =
  // trunc(x + 1 + 0.5): 3.5 -> 5, -1 -> 0, 14 -> 15, 2.49 -> 3, 0 -> 1.
  std::vector<float> x(32, 0.0f);
  const float in[] = {-1.0f, 14.0f, 3.5f, 2.49f};
  const int want_q[] = {0, 15, 5, 3};
  std::copy(std::begin(in), std::end(in), x.begin());
  const auto q = quantize(kQ4_1, x);
  EXPECT_EQ(load_u16(q.data()), 0x3c00);
  EXPECT_EQ(load_u16(q.data() + 2), 0xbc00);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(stored_q(kQ4_1, q.data(), j), j < 4 ? want_q[j] : 1) << "element " << j;
  }
  // Byte 0 holds element 0 (low) and element 16 (high).
  EXPECT_EQ(q[4], 0x10);
}

// ---- special groups ----

TEST(QuantRef, ConstantGroupsRoundTripToF16) {
  // "Exactly" = the value rounded to f16, the precision of the stored scale
  // and minimum: v itself whenever v is an f16 value.
  const float values[] = {1.0f,     -3.25f,   0.1f,       1e-3f,  65504.0f,   -65504.0f,
                          6e-5f,    -2e-7f,   1e-8f,      3e4f,   1.0000001f, 0.3333333f,
                          65519.0f, 5.96e-8f, -1.17e-38f, 1024.5f};
  for (DType t : test::quant_types()) {
    for (float v : values) {
      const std::vector<float> x(static_cast<size_t>(3 * group_of(t)), v);
      const auto y = round_trip(t, x);
      for (size_t j = 0; j < y.size(); ++j) {
        ASSERT_EQ(y[j], f16_round(v)) << dtype_name(t) << " constant " << v << " element " << j;
      }
      EXPECT_LE(std::fabs(y[0] - v), std::ldexp(std::fabs(v), -11) + std::ldexp(1.0f, -25));
    }
  }
}

TEST(QuantRef, ConstantGroupEncodings) {
  const float v = 0.1f;  // not an f16 value
  const uint16_t h = f32_to_f16(v);
  auto q = quantize(kQ8_0, std::vector<float>(32, v));
  EXPECT_EQ(load_u16(q.data()), h);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(q[2 + j], 1);
  q = quantize(kQ4_0, std::vector<float>(32, v));
  EXPECT_EQ(load_u16(q.data()), h);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q[2 + j], 0x99);
  q = quantize(DType::kQ8A64, std::vector<float>(64, v));
  EXPECT_EQ(load_u16(q.data()), 0);
  EXPECT_EQ(load_u16(q.data() + 2), h);
  for (int j = 0; j < 64; ++j) EXPECT_EQ(q[4 + j], 0);
}

TEST(QuantRef, ConstantBeyondF16) {
  // f16(v) would be Inf. Symmetric formats fall back to the general rule (the
  // scale v/127 or v/-8 fits f16): within f16 precision of v. Asymmetric ones
  // saturate the minimum at +-65504: above it the scale reaches v, below it
  // the value clips to -65504.
  for (DType t : test::quant_types()) {
    for (float v : {1e5f, -2.5e5f}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(v));
      const std::vector<float> x(static_cast<size_t>(group_of(t)), v);
      EXPECT_LE(check_row(t, x), 1.0);
      for (float e : round_trip(t, x)) {
        if (dtype_info(t).symmetric || v > 0) {
          EXPECT_LE(std::fabs(e - v), std::ldexp(std::fabs(v), -11) * 1.01f);
        } else {
          EXPECT_EQ(e, -65504.0f);
        }
      }
    }
  }
}

TEST(QuantRef, ZeroGroups) {
  for (DType t : test::quant_types()) {
    const int g = group_of(t);
    std::vector<float> x(static_cast<size_t>(2 * g), 0.0f);
    for (int j = 0; j < g; ++j) x[g + j] = (j % 3) ? -0.0f : 0.0f;  // mixed signs
    const auto q = quantize(t, x);
    const auto y = dequantize(t, q, 2 * g);
    for (float e : y) EXPECT_EQ(e, 0.0f) << dtype_name(t);
    const size_t bb = static_cast<size_t>(dtype_info(t).block_bytes);
    for (size_t i = 0; i < 2; ++i) {
      const uint8_t* b = q.data() + i * bb;
      if (t == kQ4_0) {
        // ggml: max = +0, d = 0 / -8 = -0 (0x8000), q = trunc(0 + 8.5) = 8.
        EXPECT_EQ(load_u16(b), 0x8000);
        for (size_t j = 2; j < bb; ++j) EXPECT_EQ(b[j], 0x88);
      } else {
        for (size_t j = 0; j < bb; ++j) EXPECT_EQ(b[j], 0) << dtype_name(t) << " byte " << j;
      }
    }
  }
}

TEST(QuantRef, NonFiniteValuesPoisonTheirGroupOnly) {
  const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};
  for (DType t : test::quant_types()) {
    const int g = group_of(t);
    const size_t bb = static_cast<size_t>(dtype_info(t).block_bytes);
    std::vector<float> clean = test::make_row(test::RowKind::kNormal, 3 * g, g, 7);
    const auto q_clean = quantize(t, clean);
    for (float b : bad) {
      for (int pos : {0, g / 2 + 1, g - 1}) {
        std::vector<float> x = clean;
        x[g + pos] = b;
        const auto q = quantize(t, x);
        const auto y = dequantize(t, q, 3 * g);
        // The middle group: d (and m) an f16 NaN, q = 0; every value NaN.
        EXPECT_EQ(load_u16(q.data() + bb), 0x7e00) << dtype_name(t);
        if (!dtype_info(t).symmetric) {
          EXPECT_EQ(load_u16(q.data() + bb + 2), 0x7e00);
        }
        for (int j = 0; j < g; ++j) EXPECT_TRUE(std::isnan(y[g + j])) << dtype_name(t) << " " << b;
        // The neighbours are untouched.
        EXPECT_EQ(std::memcmp(q.data(), q_clean.data(), bb), 0);
        EXPECT_EQ(std::memcmp(q.data() + 2 * bb, q_clean.data() + 2 * bb, bb), 0);
        for (int j = 0; j < g; ++j) {
          EXPECT_TRUE(std::isfinite(y[j]));
          EXPECT_TRUE(std::isfinite(y[2 * g + j]));
        }
      }
    }
  }
}

TEST(QuantRef, LargeMagnitudesSaturate) {
  // Q8S: d would be 1e7/127 > 65504: saturates to 65504; q = roundf(x/65504).
  {
    std::vector<float> x(32, 0.0f);
    x[0] = 1e7f;
    x[1] = -1e7f;
    x[2] = 5e6f;
    const auto q = quantize(kQ8_0, x);
    EXPECT_EQ(load_u16(q.data()), 0x7bff);
    const auto y = dequantize(kQ8_0, q, 32);
    EXPECT_EQ(y[0], 127.0f * 65504.0f);
    EXPECT_EQ(y[1], -127.0f * 65504.0f);
    EXPECT_EQ(y[2], 76.0f * 65504.0f);  // 5e6/65504 = 76.33
    EXPECT_EQ(y[3], 0.0f);
  }
  // Q4S: d = -1e6/-8 saturates to +65504 (sign kept); reach is [-8, 7]*65504.
  {
    std::vector<float> x(32, 0.0f);
    x[0] = -1e6f;
    x[1] = 1e6f;
    x[2] = 2e5f;
    const auto q = quantize(kQ4_0, x);
    EXPECT_EQ(load_u16(q.data()), 0x7bff);
    const auto y = dequantize(kQ4_0, q, 32);
    EXPECT_EQ(y[0], -8.0f * 65504.0f);
    EXPECT_EQ(y[1], 7.0f * 65504.0f);
    EXPECT_EQ(y[2], 3.0f * 65504.0f);  // 2e5/65504 = 3.05
  }
  // Asymmetric, minimum beyond f16: m saturates to 65504 and the scale is
  // taken from there, d = (max - 65504)/L; every element within the
  // saturated bound of check_group.
  for (DType t : {kQ4_1, DType::kQ8A32}) {
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j)
      x[j] = 70000.0f + 15625.0f * static_cast<float>(j) + (j == 31 ? 11250.0f : 0.0f);
    const auto q = quantize(t, x);
    EXPECT_EQ(load_u16(q.data() + 2), 0x7bff) << dtype_name(t);
    EXPECT_EQ(check_row(t, x) <= 1.0, true) << dtype_name(t);
  }
  // Everything below -65504: clips to the saturated minimum.
  for (DType t : {kQ4_1, DType::kQ8A128}) {
    const std::vector<float> x(static_cast<size_t>(group_of(t)), -1e6f);
    for (float e : round_trip(t, x)) EXPECT_EQ(e, -65504.0f) << dtype_name(t);
  }
}

TEST(QuantRef, FiniteInputNeverGivesNonFinite) {
  // The extremes of f32 in one group, plus random finite bit patterns.
  for (DType t : test::quant_types()) {
    const int g = group_of(t);
    std::vector<float> x(static_cast<size_t>(g), 0.0f);
    x[0] = FLT_MAX;
    x[1] = -FLT_MAX;
    x[2] = FLT_MIN;
    x[3] = -std::numeric_limits<float>::denorm_min();
    for (float e : round_trip(t, x)) ASSERT_TRUE(std::isfinite(e)) << dtype_name(t);
    const auto w = test::make_row(test::RowKind::kWideRange, 64 * g, g, 5);
    for (float e : round_trip(t, w)) ASSERT_TRUE(std::isfinite(e)) << dtype_name(t);
  }
}

}  // namespace
}  // namespace strata
