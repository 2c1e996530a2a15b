#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"

namespace strata {
namespace {

// Reference: f16 -> f32 by exact arithmetic on the fields.
double f16_value(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(DType, F16ToF32AllValuesExact) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const double ref = f16_value(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), ref) << h;
    }
  }
}

TEST(DType, F16RoundTripAllFinite) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(DType, F32ToF16RoundsToNearestEven) {
  // Between 1.0 (0x3c00) and the next f16 (1 + 2^-10): the midpoint ties to even.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);     // tie to even (zero)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 ulp ties to even 2
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(DType, BF16RoundTripAndRounding) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), h) << h;
  }
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(DType, BlockSizes) {
  EXPECT_EQ(row_bytes(DType::kF32, 7), 28u);
  EXPECT_EQ(row_bytes(kQ8_0, 64), 68u);
  EXPECT_EQ(row_bytes(kQ4_0, 64), 36u);
  EXPECT_EQ(row_bytes(kQ4_1, 64), 40u);
  EXPECT_EQ(row_bytes(DType::kQ4A128, 256), 136u);
  EXPECT_FALSE(row_elems_ok(kQ4_1, 33));
  EXPECT_EQ(quant_dtype(4, false, 64), DType::kQ4A64);
  EXPECT_EQ(quant_dtype(8, true, 32), kQ8_0);
  EXPECT_FALSE(quant_dtype(4, true, 128).has_value());
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    auto t = static_cast<DType>(i);
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  }
  EXPECT_FALSE(dtype_from_name("q3").has_value());
}

}  // namespace
}  // namespace strata
