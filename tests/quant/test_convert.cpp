// Row converters f16/bf16 <-> f32: every variant equals core's scalar
// conversions bit for bit. f16 -> f32 and bf16 -> f32 on all 65536 inputs;
// f32 -> f16 and f32 -> bf16 on every upper half-word combined with the lower
// half-words that decide rounding (ties, just below, just above), NaNs with
// payloads and both signs; tails of every length with guard bytes. The full
// 2^32 sweep runs when STRATA_QUANT_EXHAUSTIVE=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "quant/convert.h"
#include "quant/isa.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"
#include "quant/quant_test_util.h"

namespace strata {
namespace {

using test::bits_of;
using test::float_of;
using test::Guarded;

class Convert : public testing::TestWithParam<QuantIsa> {
 protected:
  void SetUp() override {
    if (!quant_isa_supported(GetParam())) {
      GTEST_SKIP() << "this CPU does not support the " << quant_isa_name(GetParam())
                   << " kernels; they are not tested here";
    }
  }
  const QuantKernels& k() const { return quant_kernels(GetParam()); }
};

TEST_P(Convert, F16ToF32AllValues) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> y(65536);
  k().f16_to_f32_row(h.data(), y.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    ASSERT_EQ(bits_of(y[i]), bits_of(f16_to_f32(h[i]))) << "f16 0x" << std::hex << i;
  }
}

TEST_P(Convert, Bf16ToF32AllValues) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> y(65536);
  k().bf16_to_f32_row(h.data(), y.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    ASSERT_EQ(bits_of(y[i]), bits_of(bf16_to_f32(h[i]))) << "bf16 0x" << std::hex << i;
  }
}

// Every upper half-word with lower half-words at the rounding decisions of
// both targets: f16 keeps 10 of 23 mantissa bits (tie at 0x1000 of the low 13
// bits; subnormal f16 outputs tie higher up, inside the upper half-word),
// bf16 keeps 7 (tie at 0x8000).
std::vector<float> f32_sweep() {
  const uint16_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2001,
                           0x3000, 0x5000, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xf000, 0xffff};
  std::vector<float> x;
  x.reserve(65536 * 20);
  std::mt19937 rng(17);
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint16_t lo : lows) x.push_back(float_of(hi << 16 | lo));
    for (int r = 0; r < 4; ++r) x.push_back(float_of(hi << 16 | (rng() & 0xffff)));
  }
  return x;
}

TEST_P(Convert, F32ToF16Sweep) {
  const auto x = f32_sweep();
  std::vector<uint16_t> y(x.size());
  k().f32_to_f16_row(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], f32_to_f16(x[i])) << "f32 0x" << std::hex << bits_of(x[i]);
  }
}

TEST_P(Convert, F32ToBf16Sweep) {
  const auto x = f32_sweep();
  std::vector<uint16_t> y(x.size());
  k().f32_to_bf16_row(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], f32_to_bf16(x[i])) << "f32 0x" << std::hex << bits_of(x[i]);
  }
}

TEST_P(Convert, TailsAndGuards) {
  std::mt19937 rng(3);
  for (int64_t n = 0; n <= 70; ++n) {
    std::vector<float> x(static_cast<size_t>(n));
    std::vector<uint16_t> h(static_cast<size_t>(n));
    for (auto& v : x) v = float_of(static_cast<uint32_t>(rng()));
    for (auto& v : h) v = static_cast<uint16_t>(rng());
    for (size_t off : {0, 1, 3}) {
      Guarded f16(static_cast<size_t>(n) * 2, 2 * off), bf16(static_cast<size_t>(n) * 2, 2 * off);
      Guarded f32a(static_cast<size_t>(n) * 4, 4 * off), f32b(static_cast<size_t>(n) * 4, 4 * off);
      k().f32_to_f16_row(x.data(), f16.as<uint16_t>(), n);
      k().f32_to_bf16_row(x.data(), bf16.as<uint16_t>(), n);
      k().f16_to_f32_row(h.data(), f32a.as<float>(), n);
      k().bf16_to_f32_row(h.data(), f32b.as<float>(), n);
      ASSERT_TRUE(f16.guards_intact() && bf16.guards_intact() && f32a.guards_intact() &&
                  f32b.guards_intact())
          << "n = " << n;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(f16.as<uint16_t>()[i], f32_to_f16(x[i])) << n;
        ASSERT_EQ(bf16.as<uint16_t>()[i], f32_to_bf16(x[i])) << n;
        ASSERT_EQ(bits_of(f32a.as<float>()[i]), bits_of(f16_to_f32(h[i]))) << n;
        ASSERT_EQ(bits_of(f32b.as<float>()[i]), bits_of(bf16_to_f32(h[i]))) << n;
      }
    }
  }
}

TEST_P(Convert, ExhaustiveF32WhenAsked) {
  const char* env = std::getenv("STRATA_QUANT_EXHAUSTIVE");
  if (env == nullptr || std::string(env) != "1") {
    GTEST_SKIP() << "the 2^32 f32 -> f16/bf16 sweep runs with STRATA_QUANT_EXHAUSTIVE=1";
  }
  constexpr int64_t kChunk = 1 << 20;
  std::vector<float> x(kChunk);
  std::vector<uint16_t> a(kChunk), b(kChunk);
  for (uint64_t base = 0; base < (1ull << 32); base += kChunk) {
    for (int64_t i = 0; i < kChunk; ++i) x[i] = float_of(static_cast<uint32_t>(base + i));
    k().f32_to_f16_row(x.data(), a.data(), kChunk);
    k().f32_to_bf16_row(x.data(), b.data(), kChunk);
    for (int64_t i = 0; i < kChunk; ++i) {
      ASSERT_EQ(a[i], f32_to_f16(x[i])) << std::hex << base + i;
      ASSERT_EQ(b[i], f32_to_bf16(x[i])) << std::hex << base + i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, Convert,
                         testing::Values(QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512),
                         test::isa_param_name);

TEST(ConvertRows, RowToF32AndBf16EveryType) {
  const int64_t n = 128;
  const auto x = test::make_row(test::RowKind::kNormal, n, 32, 21);
  // f32
  std::vector<float> y(n);
  std::vector<uint16_t> yb(n);
  row_to_f32(DType::kF32, x.data(), y.data(), n);
  EXPECT_EQ(std::memcmp(y.data(), x.data(), n * 4), 0);
  row_to_bf16(DType::kF32, x.data(), yb.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(yb[i], f32_to_bf16(x[i]));
  // f16: widening is exact; to bf16 rounds once.
  std::vector<uint16_t> h(n);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(x[i]);
  row_to_f32(DType::kF16, h.data(), y.data(), n);
  row_to_bf16(DType::kF16, h.data(), yb.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(bits_of(y[i]), bits_of(f16_to_f32(h[i])));
    EXPECT_EQ(yb[i], f32_to_bf16(f16_to_f32(h[i])));
  }
  // bf16
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
  row_to_f32(DType::kBF16, h.data(), y.data(), n);
  row_to_bf16(DType::kBF16, h.data(), yb.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(bits_of(y[i]), bits_of(bf16_to_f32(h[i])));
    EXPECT_EQ(yb[i], h[i]);
  }
  // quantized
  for (DType t : test::quant_types()) {
    std::vector<uint8_t> q(row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    std::vector<float> ref(n);
    dequantize_row_ref(t, q.data(), ref.data(), n);
    row_to_f32(t, q.data(), y.data(), n);
    row_to_bf16(t, q.data(), yb.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(bits_of(y[i]), bits_of(ref[i])) << dtype_name(t);
      EXPECT_EQ(yb[i], f32_to_bf16(ref[i])) << dtype_name(t);
    }
  }
}

TEST(ConvertRows, F16ToBf16LongRowCrossesChunks) {
  const int64_t n = 3000;
  std::mt19937 rng(8);
  std::vector<uint16_t> h(n), yb(n);
  for (auto& v : h) v = static_cast<uint16_t>(rng());
  row_to_bf16(DType::kF16, h.data(), yb.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(yb[i], f32_to_bf16(f16_to_f32(h[i]))) << i;
}

}  // namespace
}  // namespace strata
