// The CUDA row ops against the CPU reference ops (kernels/cpu *_ref), every
// element, with canaries around and between the output rows. Tolerances
// (u = 2^-24; e_exp, e_erfc, e_trig: CUDA's expf, erfcf, sincosf errors
// from cuda_test_util.h):
//   rms_norm    (0.5 (d + 3) + 6) u |ref|: the sum of d squares in any order
//               is within (d + 1) u, mean, + eps, sqrt (halves it),
//               reciprocal and two products add 5 u (as kernels/cpu).
//   layer_norm  layer_norm_bound (the same algorithm as the CPU op: the mean
//               of x - x_0, then the centred sum of squares).
//   rope        (|x0 c| + |x1 s|) (e_trig + 3 u) + u |ref| on rotated dims
//               (c, s within e_trig; two products and a sum), other dims exact.
//   relu, add, add_bias exact; silu (e_exp + 4 u) |ref|; swiglu (e_exp + 6 u)
//               |ref|; gelu_tanh (e_exp + (14 |v| + 4) u) |ref| (v to 7 u
//               relative, the exp argument -2v to 14 u |v|); gelu
//               (e_erfc + (2.5 x^2 + 8) u) |ref| (the erfc argument to 2 u
//               relative moves erfc by 2 z^2 (2 u), z = x / sqrt 2).
//   softmax     softmax_bound: per entry e_exp + |x - max| u, the sum's
//               relative error, and 3 u for the reciprocal, product, rounding.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <iterator>
#include <tuple>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda_test_util.h"
#include "support/op_bounds.h"

namespace strata::cuda {
namespace {

using test::DeviceArray;
using test::DeviceErrorBox;
using test::DeviceRows;
using test::kExpErr;
using test::kTiny;
using test::kU32;

constexpr cudaStream_t kStream = nullptr;  // legacy default stream

using test::kNormCases;
using test::layer_norm_bound;
using test::RowCase;

TEST(CudaRmsNorm, MatchesReference) {
  STRATA_REQUIRE_GPU();
  uint32_t seed = 1;
  for (const auto& c : kNormCases) {
    for (bool with_w : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "rows=" << c.rows << " d=" << c.d << " w=" << with_w);
      const auto xv = test::random_floats(static_cast<size_t>(c.rows * c.d), -3.0f, 3.0f, seed++);
      const auto w = test::random_floats(static_cast<size_t>(c.d), 0.5f, 1.5f, seed++);
      DeviceRows x(c.rows, c.d, c.d + c.x_pad), y(c.rows, c.d, c.d + c.y_pad);
      x.fill(xv);
      DeviceArray<float> w_dev(w);
      const float* wp = with_w ? w_dev.data() : nullptr;
      ASSERT_EQ(
          rms_norm(y.data(), y.stride(), x.data(), x.stride(), wp, 1e-5f, c.rows, c.d, kStream),
          Status::kOk);
      std::vector<float> ref(xv.size());
      ASSERT_EQ(cpu::rms_norm_ref(ref.data(), c.d, xv.data(), c.d, with_w ? w.data() : nullptr,
                                  1e-5f, c.rows, c.d),
                Status::kOk);
      EXPECT_TRUE(y.canaries_intact());
      const auto r = test::to_double(ref);
      const double rel = test::rms_norm_rel_bound(c.d);
      const auto out = y.rows();
      EXPECT_TRUE(test::all_close(
          out, r, [&](size_t i) { return rel * std::fabs(r[i]) + kTiny; }, "rms_norm"));
      // In place gives the same floats.
      ASSERT_EQ(
          rms_norm(x.data(), x.stride(), x.data(), x.stride(), wp, 1e-5f, c.rows, c.d, kStream),
          Status::kOk);
      EXPECT_TRUE(test::same_bits(x.rows(), out, "rms_norm in place"));
      EXPECT_TRUE(x.canaries_intact());
    }
  }
}

TEST(CudaLayerNorm, MatchesReference) {
  STRATA_REQUIRE_GPU();
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
      const auto w = test::random_floats(static_cast<size_t>(c.d), -1.5f, 1.5f, seed++);
      const auto b = test::random_floats(static_cast<size_t>(c.d), -1.0f, 1.0f, seed++);
      DeviceRows x(c.rows, c.d, c.d + c.x_pad), y(c.rows, c.d, c.d + c.y_pad);
      x.fill(xv);
      DeviceArray<float> w_dev(w), b_dev(b);
      const float* wp = variant == 1 ? nullptr : w.data();
      const float* bp = variant == 0 ? b.data() : nullptr;
      ASSERT_EQ(layer_norm(y.data(), y.stride(), x.data(), x.stride(),
                           wp != nullptr ? w_dev.data() : nullptr,
                           bp != nullptr ? b_dev.data() : nullptr, 1e-5f, c.rows, c.d, kStream),
                Status::kOk);
      std::vector<float> ref(xv.size());
      ASSERT_EQ(cpu::layer_norm_ref(ref.data(), c.d, xv.data(), c.d, wp, bp, 1e-5f, c.rows, c.d),
                Status::kOk);
      EXPECT_TRUE(y.canaries_intact());
      const auto r = test::to_double(ref);
      std::vector<double> tol;
      for (int64_t row = 0; row < c.rows; ++row) {
        const std::vector<double> row_ref(r.begin() + row * c.d, r.begin() + (row + 1) * c.d);
        const auto t = layer_norm_bound(xv.data() + row * c.d, wp, row_ref, c.d, 1e-5);
        tol.insert(tol.end(), t.begin(), t.end());
      }
      EXPECT_TRUE(test::all_close(
          y.rows(), r, [&](size_t i) { return tol[i]; }, "layer_norm"));
    }
  }
}

TEST(CudaNorms, NonFiniteInputPoisonsOnlyItsRow) {
  STRATA_REQUIRE_GPU();
  const int64_t d = 33;
  auto xv = test::random_floats(3 * d, -1.0f, 1.0f, 5);
  xv[d + 4] = NAN;
  xv[2 * d + 7] = INFINITY;
  for (bool rms : {true, false}) {
    DeviceRows x(3, d, d), y(3, d, d);
    x.fill(xv);
    ASSERT_EQ(rms ? rms_norm(y.data(), d, x.data(), d, nullptr, 1e-5f, 3, d, kStream)
                  : layer_norm(y.data(), d, x.data(), d, nullptr, nullptr, 1e-5f, 3, d, kStream),
              Status::kOk);
    const auto out = y.rows();
    for (int64_t i = 0; i < d; ++i) EXPECT_TRUE(std::isfinite(out[i])) << i;
    for (int64_t i = d; i < 2 * d; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
  }
}

TEST(CudaNorms, RejectBadArguments) {
  float* p = reinterpret_cast<float*>(uintptr_t{256});  // never dereferenced
  EXPECT_EQ(rms_norm(p, 4, p, 4, nullptr, 1e-5f, 1, 0, kStream), Status::kInvalidArgument);
  EXPECT_EQ(rms_norm(p, 3, p, 4, nullptr, 1e-5f, 1, 4, kStream), Status::kInvalidArgument);
  EXPECT_EQ(rms_norm(p, 4, p, 4, nullptr, -1.0f, 1, 4, kStream), Status::kInvalidArgument);
  EXPECT_EQ(layer_norm(nullptr, 4, p, 4, nullptr, nullptr, 1e-5f, 1, 4, kStream),
            Status::kInvalidArgument);
  EXPECT_EQ(rms_norm(nullptr, 4, nullptr, 4, nullptr, 1e-5f, 0, 4, kStream), Status::kOk);
}

// ---- RoPE ----

struct RopeCase {
  int64_t tokens, n_head, n_kv_head, head_dim, rot_dim, pad;
  RopePairs pairs;
};

TEST(CudaRope, MatchesReference) {
  STRATA_REQUIRE_GPU();
  const RopeCase cases[] = {
      {1, 1, 1, 64, 64, 0, RopePairs::kHalf},        {3, 4, 2, 64, 64, 5, RopePairs::kInterleaved},
      {7, 9, 3, 80, 40, 0, RopePairs::kHalf},        {17, 2, 1, 128, 128, 3, RopePairs::kHalf},
      {5, 3, 0, 96, 32, 1, RopePairs::kInterleaved}, {111, 1, 1, 2, 2, 0, RopePairs::kHalf},
  };
  uint32_t seed = 7;
  for (const RopeCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "tokens=" << c.tokens << " heads=" << c.n_head << "/"
                                      << c.n_kv_head << " hd=" << c.head_dim << " rot=" << c.rot_dim
                                      << " interleaved=" << (c.pairs == RopePairs::kInterleaved));
    const int64_t q_cols = c.n_head * c.head_dim, k_cols = c.n_kv_head * c.head_dim;
    const int64_t q_stride = q_cols + c.pad, k_stride = k_cols + c.pad + 1;
    const auto qv = test::random_floats(static_cast<size_t>(c.tokens * q_cols), -2, 2, seed++);
    const auto kv = test::random_floats(static_cast<size_t>(c.tokens * k_cols), -2, 2, seed++);
    std::vector<int32_t> pos(static_cast<size_t>(c.tokens));
    std::mt19937 rng(seed++);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % 5000);
    if (c.tokens > 2) pos[1] = 131071;  // a large angle
    std::vector<float> inv_freq(static_cast<size_t>(c.rot_dim / 2));
    cpu::RopeConfig cfg;
    cfg.rot_dim = c.rot_dim;
    cfg.theta = 10000.0;
    ASSERT_EQ(cpu::rope_inv_freq(inv_freq.data(), cfg), Status::kOk);

    DeviceRows q(c.tokens, q_cols, q_stride), k(c.tokens, k_cols, k_stride);
    q.fill(qv);
    k.fill(kv);
    DeviceArray<int32_t> pos_dev(pos);
    DeviceArray<float> freq_dev(inv_freq);
    DeviceErrorBox err;
    ASSERT_EQ(rope(q.data(), q.stride(), c.n_head, c.n_kv_head > 0 ? k.data() : nullptr, k.stride(),
                   c.n_kv_head, c.head_dim, pos_dev.data(), c.tokens, freq_dev.data(), c.rot_dim,
                   c.pairs, err.get(), kStream),
              Status::kOk);
    std::vector<float> q_ref = qv, k_ref = kv;
    ASSERT_EQ(cpu::rope_ref(q_ref.data(), q_cols, c.n_head, k_ref.data(), k_cols, c.n_kv_head,
                            c.head_dim, pos.data(), c.tokens, inv_freq.data(), c.rot_dim,
                            c.pairs == RopePairs::kHalf ? cpu::RopeLayout::kHalf
                                                        : cpu::RopeLayout::kInterleaved),
              Status::kOk);
    EXPECT_EQ(err.read().code, 0u);
    EXPECT_TRUE(q.canaries_intact());
    EXPECT_TRUE(k.canaries_intact());
    // Per element: the partner of each rotated dim and the angle's c, s.
    const int64_t half = c.rot_dim / 2;
    auto bound = [&](const std::vector<float>& x, const std::vector<float>& ref, int64_t heads) {
      std::vector<double> tol(x.size(), 0.0);
      for (int64_t t = 0; t < c.tokens; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t base = (t * heads + h) * c.head_dim;
          for (int64_t i = 0; i < half; ++i) {
            const float angle = static_cast<float>(pos[static_cast<size_t>(t)]) * inv_freq[i];
            const double cs = std::fabs(std::cos(static_cast<double>(angle)));
            const double sn = std::fabs(std::sin(static_cast<double>(angle)));
            const int64_t i0 = c.pairs == RopePairs::kHalf ? i : 2 * i;
            const int64_t i1 = c.pairs == RopePairs::kHalf ? i + half : 2 * i + 1;
            const double a = std::fabs(x[base + i0]), b = std::fabs(x[base + i1]);
            const double e = test::kTrigErr + 3 * kU32;
            tol[base + i0] = (a * cs + b * sn) * e + kU32 * std::fabs(ref[base + i0]) + kTiny;
            tol[base + i1] = (a * sn + b * cs) * e + kU32 * std::fabs(ref[base + i1]) + kTiny;
          }
        }
      }
      return tol;
    };
    const auto qt = bound(qv, q_ref, c.n_head);
    EXPECT_TRUE(test::all_close(
        q.rows(), test::to_double(q_ref), [&](size_t i) { return qt[i]; }, "rope q"));
    if (c.n_kv_head > 0) {
      const auto kt = bound(kv, k_ref, c.n_kv_head);
      EXPECT_TRUE(test::all_close(
          k.rows(), test::to_double(k_ref), [&](size_t i) { return kt[i]; }, "rope k"));
    }
  }
}

TEST(CudaRope, NegativePositionIsReportedAndItsTokenUntouched) {
  STRATA_REQUIRE_GPU();
  const int64_t tokens = 3, hd = 64;
  const auto qv = test::random_floats(tokens * hd, -1, 1, 3);
  DeviceRows q(tokens, hd, hd);
  q.fill(qv);
  DeviceArray<int32_t> pos(std::vector<int32_t>{4, -2, 9});
  DeviceArray<float> freq(test::random_floats(hd / 2, 0.001f, 1.0f, 4));
  DeviceErrorBox err;
  ASSERT_EQ(rope(q.data(), hd, 1, nullptr, 0, 0, hd, pos.data(), tokens, freq.data(), hd,
                 RopePairs::kHalf, err.get(), kStream),
            Status::kOk);
  const DeviceError e = err.read();
  EXPECT_EQ(e.code, static_cast<uint32_t>(DeviceErrorCode::kPosition));
  EXPECT_EQ(e.row, 1);
  EXPECT_EQ(e.value, -2);
  EXPECT_EQ(describe(e), "rope: position -2 of token 1 is negative");
  const auto out = q.rows();
  for (int64_t i = hd; i < 2 * hd; ++i) EXPECT_EQ(test::bits_of(out[i]), test::bits_of(qv[i]));
  EXPECT_NE(test::bits_of(out[0]), test::bits_of(qv[0]));
}

TEST(CudaRope, RejectsBadArguments) {
  float* p = reinterpret_cast<float*>(uintptr_t{256});
  const int32_t* pos = reinterpret_cast<const int32_t*>(uintptr_t{256});
  EXPECT_EQ(rope(p, 64, 1, nullptr, 0, 0, 64, pos, 1, p, 63, RopePairs::kHalf, nullptr, kStream),
            Status::kInvalidArgument);
  EXPECT_EQ(rope(p, 64, 1, nullptr, 0, 0, 64, pos, 1, p, 66, RopePairs::kHalf, nullptr, kStream),
            Status::kInvalidArgument);
  EXPECT_EQ(rope(p, 63, 1, nullptr, 0, 0, 64, pos, 1, p, 64, RopePairs::kHalf, nullptr, kStream),
            Status::kInvalidArgument);
  EXPECT_EQ(rope(p, 64, 1, nullptr, 64, 1, 64, pos, 1, p, 64, RopePairs::kHalf, nullptr, kStream),
            Status::kInvalidArgument);
}

// ---- element-wise ----

std::vector<float> activation_inputs(size_t n, uint32_t seed) {
  auto v = test::random_floats(n, -12.0f, 12.0f, seed);
  const float special[] = {0.0f,     -0.0f,     1e-30f, -1e-30f, 1e-3f,   -1e-3f, 20.0f,
                           -20.0f,   88.0f,     -88.0f, 100.0f,  -100.0f, 1e30f,  -1e30f,
                           INFINITY, -INFINITY, NAN,    3.0f,    -3.0f};
  for (size_t i = 0; i < std::size(special) && i < n; ++i) v[i * 7 % n] = special[i];
  return v;
}

class CudaActivation : public ::testing::TestWithParam<ActFn> {};

TEST_P(CudaActivation, MatchesReference) {
  STRATA_REQUIRE_GPU();
  uint32_t seed = 10;
  for (auto [rows, d, xp, yp] : std::vector<std::array<int64_t, 4>>{
           {1, 1, 0, 0}, {3, 7, 2, 1}, {17, 111, 0, 3}, {4, 1536, 1, 0}, {2, 989, 0, 0}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " d=" << d);
    const auto xv = activation_inputs(static_cast<size_t>(rows * d), seed++);
    DeviceRows x(rows, d, d + xp), y(rows, d, d + yp);
    x.fill(xv);
    ASSERT_EQ(activation(GetParam(), y.data(), y.stride(), x.data(), x.stride(), rows, d, kStream),
              Status::kOk);
    std::vector<float> ref(xv.size());
    ASSERT_EQ(
        cpu::activation_ref(cpu::activation_of(GetParam()), ref.data(), d, xv.data(), d, rows, d),
        Status::kOk);
    EXPECT_TRUE(y.canaries_intact());
    const auto r = test::to_double(ref);
    const auto out = y.rows();
    EXPECT_TRUE(test::all_close(
        out, r,
        [&](size_t i) {
          return test::activation_rel_bound(GetParam(), xv[i], kExpErr, test::kErfcErr) *
                     std::fabs(r[i]) +
                 kU32 * std::fabs(r[i]) + kTiny;
        },
        "activation"));
    ASSERT_EQ(activation(GetParam(), x.data(), x.stride(), x.data(), x.stride(), rows, d, kStream),
              Status::kOk);
    EXPECT_TRUE(test::same_bits(x.rows(), out, "activation in place"));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, CudaActivation,
                         ::testing::Values(ActFn::kRelu, ActFn::kGelu, ActFn::kGeluTanh,
                                           ActFn::kSilu),
                         [](const auto& info) {
                           switch (info.param) {
                             case ActFn::kRelu:
                               return "relu";
                             case ActFn::kGelu:
                               return "gelu";
                             case ActFn::kGeluTanh:
                               return "gelu_tanh";
                             default:
                               return "silu";
                           }
                         });

TEST(CudaSwiglu, MatchesReference) {
  STRATA_REQUIRE_GPU();
  for (auto [rows, d] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {9, 1536}, {17, 111}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " d=" << d);
    // gate and up as the two halves of one fused [rows, 2d] projection.
    const auto gu = activation_inputs(static_cast<size_t>(rows * 2 * d), 3);
    DeviceRows in(rows, 2 * d, 2 * d), y(rows, d, d + 5);
    in.fill(gu);
    ASSERT_EQ(
        swiglu(y.data(), y.stride(), in.data(), 2 * d, in.data() + d, 2 * d, rows, d, kStream),
        Status::kOk);
    std::vector<float> ref(static_cast<size_t>(rows * d));
    ASSERT_EQ(cpu::swiglu_ref(ref.data(), d, gu.data(), 2 * d, gu.data() + d, 2 * d, rows, d),
              Status::kOk);
    EXPECT_TRUE(y.canaries_intact());
    const auto r = test::to_double(ref);
    EXPECT_TRUE(test::all_close(
        y.rows(), r, [&](size_t i) { return (kExpErr + 6 * kU32) * std::fabs(r[i]) + kTiny; },
        "swiglu"));
  }
}

TEST(CudaAdd, ExactAndInPlace) {
  STRATA_REQUIRE_GPU();
  const int64_t rows = 7, d = 111;
  const auto av = test::random_floats(rows * d, -5, 5, 1);
  const auto bv = test::random_floats(rows * d, -5, 5, 2);
  DeviceRows a(rows, d, d + 3), b(rows, d, d + 1), y(rows, d, d + 2);
  a.fill(av);
  b.fill(bv);
  ASSERT_EQ(add(y.data(), y.stride(), a.data(), a.stride(), b.data(), b.stride(), rows, d, kStream),
            Status::kOk);
  std::vector<float> ref(av.size());
  ASSERT_EQ(cpu::add_ref(ref.data(), d, av.data(), d, bv.data(), d, rows, d), Status::kOk);
  EXPECT_TRUE(test::same_bits(y.rows(), ref, "add"));
  EXPECT_TRUE(y.canaries_intact());
  ASSERT_EQ(add(a.data(), a.stride(), a.data(), a.stride(), b.data(), b.stride(), rows, d, kStream),
            Status::kOk);
  EXPECT_TRUE(test::same_bits(a.rows(), ref, "add in place"));
  EXPECT_TRUE(a.canaries_intact());
}

TEST(CudaAddBias, Exact) {
  STRATA_REQUIRE_GPU();
  const int64_t rows = 17, d = 989;
  const auto yv = test::random_floats(rows * d, -5, 5, 3);
  const auto bias = test::random_floats(d, -1, 1, 4);
  DeviceRows y(rows, d, d + 7);
  y.fill(yv);
  DeviceArray<float> b(bias);
  ASSERT_EQ(add_bias(y.data(), y.stride(), b.data(), rows, d, kStream), Status::kOk);
  std::vector<float> ref = yv;
  ASSERT_EQ(cpu::add_bias_ref(ref.data(), d, bias.data(), rows, d), Status::kOk);
  EXPECT_TRUE(test::same_bits(y.rows(), ref, "add_bias"));
  EXPECT_TRUE(y.canaries_intact());
}

// Softmax bound per element (first order), as the CPU test's with CUDA's expf.
TEST(CudaSoftmax, MatchesReference) {
  STRATA_REQUIRE_GPU();
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
      xv[2] = -INFINITY;
      xv[static_cast<size_t>(d + 3) % xv.size()] = -1e30f;
    }
    DeviceRows x(rows, d, d + 2), y(rows, d, d + 1);
    x.fill(xv);
    ASSERT_EQ(softmax(y.data(), y.stride(), x.data(), x.stride(), rows, d, kStream), Status::kOk);
    std::vector<float> ref(xv.size());
    ASSERT_EQ(cpu::softmax_ref(ref.data(), d, xv.data(), d, rows, d), Status::kOk);
    EXPECT_TRUE(y.canaries_intact());
    const auto r = test::to_double(ref);
    const auto tol = test::softmax_bound(xv, r, rows, d, kExpErr);
    EXPECT_TRUE(test::all_close(
        y.rows(), r, [&](size_t i) { return tol[i]; }, "softmax"));
  }
}

TEST(CudaSoftmax, SpecialRows) {
  STRATA_REQUIRE_GPU();
  const int64_t d = 5;
  const float inf = INFINITY;
  const std::vector<float> xv = {-inf, -inf, -inf, -inf, -inf,   // all masked: NaN
                                 -inf, 2.0f, -inf, -inf, -inf,   // one visible: exactly 1
                                 1.0f, NAN,  2.0f, 3.0f, 4.0f,   // NaN poisons the row
                                 7.0f, 7.0f, 7.0f, 7.0f, 7.0f};  // uniform
  DeviceRows x(4, d, d), y(4, d, d);
  x.fill(xv);
  ASSERT_EQ(softmax(y.data(), d, x.data(), d, 4, d, kStream), Status::kOk);
  const auto out = y.rows();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(out[i]));
  for (int i = 5; i < 10; ++i) EXPECT_EQ(out[i], i == 6 ? 1.0f : 0.0f);
  for (int i = 10; i < 15; ++i) EXPECT_TRUE(std::isnan(out[i]));
  for (int i = 15; i < 20; ++i) EXPECT_EQ(out[i], 0.2f);
}

TEST(CudaElementwise, RejectBadArguments) {
  float* p = reinterpret_cast<float*>(uintptr_t{256});
  EXPECT_EQ(add(p, 3, p, 4, p, 4, 2, 4, kStream), Status::kInvalidArgument);
  EXPECT_EQ(add(p, 4, nullptr, 4, p, 4, 2, 4, kStream), Status::kInvalidArgument);
  EXPECT_EQ(swiglu(p, 4, p, 4, p, 2, 2, 4, kStream), Status::kInvalidArgument);
  EXPECT_EQ(activation(ActFn::kSilu, p, 4, p, 4, -1, 4, kStream), Status::kInvalidArgument);
  EXPECT_EQ(add_bias(p, 4, nullptr, 2, 4, kStream), Status::kInvalidArgument);
  EXPECT_EQ(softmax(p, 4, p, 3, 2, 4, kStream), Status::kInvalidArgument);
  EXPECT_EQ(add(nullptr, 0, nullptr, 0, nullptr, 0, 0, 4, kStream), Status::kOk);
}

}  // namespace
}  // namespace strata::cuda
