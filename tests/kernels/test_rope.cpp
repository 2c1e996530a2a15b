// rope_inv_freq against values worked out by hand, and rope against rope_ref
// on both layouts, partial rotary dims, strided rows and large positions.
// Bound: both compute the angle identically in f32; cos/sin are within 1 ulp
// (glibc) and the rotation x0*c - x1*s adds 2 roundings, the reference's
// rounding one more: |y - ref| <= 6 u (|x0| + |x1|), u = 2^-24.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/rope.h"
#include "support/all_close.h"
#include "support/guarded.h"
#include "support/random.h"

namespace strata::cpu {
namespace {

using test::GuardedRows;
using test::kTiny;
using test::kU32;

TEST(RopeInvFreq, PlainAndLinear) {
  float f[2];
  RopeConfig cfg;
  cfg.rot_dim = 4;
  cfg.theta = 10000.0;
  ASSERT_EQ(rope_inv_freq(f, cfg), Status::kOk);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 0.01f);  // 10000^(-2/4)
  cfg.scaling = RopeScaling::kLinear;
  cfg.factor = 4.0;
  ASSERT_EQ(rope_inv_freq(f, cfg), Status::kOk);
  EXPECT_EQ(f[0], 0.25f);
  EXPECT_EQ(f[1], 0.0025f);
}

// Llama 3.1: theta 500000, factor 8, low 1, high 4, original 8192, dim 128.
// Wavelengths below 8192/4 = 2048 keep their frequency, above 8192/1 are
// divided by 8, in between blend with s = (8192/wavelen - 1) / 3.
TEST(RopeInvFreq, Llama3) {
  RopeConfig cfg;
  cfg.rot_dim = 128;
  cfg.theta = 500000.0;
  cfg.scaling = RopeScaling::kLlama3;
  cfg.factor = 8.0;
  cfg.low_freq_factor = 1.0;
  cfg.high_freq_factor = 4.0;
  cfg.original_max_position = 8192;
  std::vector<float> f(64);
  ASSERT_EQ(rope_inv_freq(f.data(), cfg), Status::kOk);
  int n_high = 0, n_mid = 0, n_low = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128.0);
    const double wavelen = 2 * M_PI / base;
    double want;
    if (wavelen < 2048) {
      want = base;
      ++n_high;
    } else if (wavelen > 8192) {
      want = base / 8;
      ++n_low;
    } else {
      const double s = (8192 / wavelen - 1) / 3;
      want = (1 - s) * base / 8 + s * base;
      ++n_mid;
    }
    EXPECT_NEAR(f[i], want, want * kU32) << i;
  }
  // All three regions: 500000^(i/64) < 2048/(2 pi) for i <= 28, > 8192/(2 pi) for i >= 35.
  EXPECT_EQ(n_high, 29);
  EXPECT_EQ(n_mid, 6);
  EXPECT_EQ(n_low, 29);
  EXPECT_EQ(f[0], 1.0f);
}

TEST(RopeInvFreq, RejectsBadConfig) {
  float f[4];
  RopeConfig cfg;
  cfg.rot_dim = 3;
  EXPECT_EQ(rope_inv_freq(f, cfg), Status::kInvalidArgument);
  cfg.rot_dim = 8;
  cfg.theta = 0.5;
  EXPECT_EQ(rope_inv_freq(f, cfg), Status::kInvalidArgument);
  cfg.theta = 10000;
  cfg.scaling = RopeScaling::kLlama3;
  cfg.low_freq_factor = 4;
  cfg.high_freq_factor = 1;
  EXPECT_EQ(rope_inv_freq(f, cfg), Status::kInvalidArgument);
}

struct RopeCase {
  int64_t n_tokens, n_head, n_kv_head, head_dim, rot_dim, pad;
  RopeLayout layout;
};

TEST(Rope, MatchesReference) {
  const std::vector<RopeCase> cases = {
      {1, 1, 1, 2, 2, 0, RopeLayout::kHalf},           {7, 9, 3, 64, 64, 5, RopeLayout::kHalf},
      {33, 9, 3, 64, 64, 0, RopeLayout::kInterleaved}, {5, 4, 2, 80, 32, 3, RopeLayout::kHalf},
      {17, 3, 1, 18, 10, 1, RopeLayout::kInterleaved}, {3, 32, 8, 128, 128, 0, RopeLayout::kHalf},
      {4, 2, 0, 16, 16, 0, RopeLayout::kHalf},
  };
  uint32_t seed = 7;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "tokens=" << c.n_tokens << " heads=" << c.n_head << "/"
                                      << c.n_kv_head << " hd=" << c.head_dim << " rot=" << c.rot_dim
                                      << " layout=" << static_cast<int>(c.layout));
    RopeConfig cfg;
    cfg.rot_dim = c.rot_dim;
    cfg.theta = 100000.0;
    std::vector<float> inv(static_cast<size_t>(c.rot_dim / 2));
    ASSERT_EQ(rope_inv_freq(inv.data(), cfg), Status::kOk);
    std::vector<int32_t> pos(static_cast<size_t>(c.n_tokens));
    for (int64_t t = 0; t < c.n_tokens; ++t)
      pos[t] = static_cast<int32_t>((t * 2654435761u) % 8192);
    pos[0] = 0;
    const int64_t q_row = c.n_head * c.head_dim, k_row = c.n_kv_head * c.head_dim;
    GuardedRows q(c.n_tokens, q_row, q_row + c.pad), k(c.n_tokens, k_row, k_row + c.pad);
    q.fill(test::random_floats(static_cast<size_t>(c.n_tokens * q_row), -2, 2, seed++));
    k.fill(test::random_floats(static_cast<size_t>(c.n_tokens * k_row), -2, 2, seed++));
    GuardedRows q_ref = q, k_ref = k;
    const auto q_in = q.rows(), k_in = k.rows();
    float* kp = c.n_kv_head > 0 ? k.data() : nullptr;
    float* kp_ref = c.n_kv_head > 0 ? k_ref.data() : nullptr;
    ASSERT_EQ(rope(q.data(), q.stride(), c.n_head, kp, k.stride(), c.n_kv_head, c.head_dim,
                   pos.data(), c.n_tokens, inv.data(), c.rot_dim, c.layout),
              Status::kOk);
    ASSERT_EQ(rope_ref(q_ref.data(), q_ref.stride(), c.n_head, kp_ref, k_ref.stride(), c.n_kv_head,
                       c.head_dim, pos.data(), c.n_tokens, inv.data(), c.rot_dim, c.layout),
              Status::kOk);
    EXPECT_TRUE(q.canaries_intact());
    EXPECT_TRUE(k.canaries_intact());
    // The partner of element e within its head, for the bound.
    auto bound = [&](const std::vector<float>& in, size_t e) {
      const int64_t hd = c.head_dim;
      const int64_t d = static_cast<int64_t>(e) % hd;
      if (d >= c.rot_dim) return 0.0;  // untouched: exact
      const int64_t half = c.rot_dim / 2;
      int64_t partner;
      if (c.layout == RopeLayout::kHalf) {
        partner = d < half ? d + half : d - half;
      } else {
        partner = d % 2 == 0 ? d + 1 : d - 1;
      }
      const size_t pe = e - static_cast<size_t>(d) + static_cast<size_t>(partner);
      return 6 * kU32 * (std::fabs(in[e]) + std::fabs(in[pe])) + kTiny;
    };
    EXPECT_TRUE(test::all_close(
        q.rows(), test::to_double(q_ref.rows()), [&](size_t e) { return bound(q_in, e); },
        "rope q"));
    EXPECT_TRUE(test::all_close(
        k.rows(), test::to_double(k_ref.rows()), [&](size_t e) { return bound(k_in, e); },
        "rope k"));
    // Position 0 is the identity.
    for (int64_t e = 0; e < q_row; ++e) EXPECT_EQ(q.at(0, e), q_in[static_cast<size_t>(e)]);
  }
}

TEST(Rope, RejectsBadArguments) {
  std::vector<float> q(64, 1.0f), inv(8, 1.0f);
  std::vector<int32_t> pos = {0, -1};
  EXPECT_EQ(
      rope(q.data(), 32, 2, nullptr, 0, 0, 16, pos.data(), 2, inv.data(), 16, RopeLayout::kHalf),
      Status::kInvalidArgument);  // negative position
  pos[1] = 3;
  EXPECT_EQ(
      rope(q.data(), 32, 2, nullptr, 0, 0, 16, pos.data(), 2, inv.data(), 17, RopeLayout::kHalf),
      Status::kInvalidArgument);  // odd rotary dim
  EXPECT_EQ(
      rope(q.data(), 32, 2, nullptr, 0, 0, 16, pos.data(), 2, inv.data(), 18, RopeLayout::kHalf),
      Status::kInvalidArgument);  // rotary dim > head dim
  EXPECT_EQ(
      rope(q.data(), 31, 2, nullptr, 0, 0, 16, pos.data(), 2, inv.data(), 16, RopeLayout::kHalf),
      Status::kInvalidArgument);  // stride too small
  EXPECT_EQ(
      rope(q.data(), 32, 2, nullptr, 0, 1, 16, pos.data(), 2, inv.data(), 16, RopeLayout::kHalf),
      Status::kInvalidArgument);  // kv heads without k
  for (float v : q) EXPECT_EQ(v, 1.0f);
}

}  // namespace
}  // namespace strata::cpu
