// Block layouts and the dequantizers on hand-built blocks with known values:
// GGUF Q8_0, Q4_0 and Q4_1 blocks written byte by byte as they sit in a file,
// and one block of each of our own formats. Every dequantizer variant (the
// reference and each supported instruction set) must produce exactly the
// values stated here.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "quant/blocks.h"
#include "quant/isa.h"
#include "quant/quant_ref.h"
#include "quant/quant_test_util.h"

namespace strata {
namespace {

using test::bits_of;
using test::group_of;

TEST(Blocks, LayoutMatchesGguf) {
  // ggml: block_q8_0 {ggml_half d; int8_t qs[32];}, block_q4_0 {ggml_half d;
  // uint8_t qs[16];}, block_q4_1 {ggml_half d, m; uint8_t qs[16];}.
  EXPECT_EQ(sizeof(BlockQ8_0), 34u);
  EXPECT_EQ(offsetof(BlockQ8_0, qs), 2u);
  EXPECT_EQ(sizeof(BlockQ4_0), 18u);
  EXPECT_EQ(offsetof(BlockQ4_0, qs), 2u);
  EXPECT_EQ(sizeof(BlockQ4_1), 20u);
  EXPECT_EQ(offsetof(BlockQ4_1, m), 2u);
  EXPECT_EQ(offsetof(BlockQ4_1, qs), 4u);
  EXPECT_EQ(offsetof(BlockQ8A<128>, qs), 4u);
  EXPECT_EQ(sizeof(BlockQ4A<128>), 68u);
  // Rows are blocks end to end: a row of n values is row_bytes(t, n) bytes.
  for (DType t : test::quant_types()) {
    EXPECT_EQ(row_bytes(t, 3 * dtype_info(t).block_elems), 3u * dtype_info(t).block_bytes);
  }
}

// Every dequantizer of `t` on `bytes` (whole blocks) must give `want` exactly.
void expect_dequant(DType t, const std::vector<uint8_t>& bytes, const std::vector<float>& want) {
  const int64_t n = static_cast<int64_t>(want.size());
  ASSERT_EQ(bytes.size(), row_bytes(t, n));
  std::vector<float> got(want.size());
  dequantize_row_ref(t, bytes.data(), got.data(), n);
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_EQ(bits_of(got[j]), bits_of(want[j]))
        << "ref " << dtype_name(t) << " element " << j << ": " << got[j] << " want " << want[j];
  }
  for (QuantIsa isa : {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512}) {
    if (!quant_isa_supported(isa)) continue;
    const auto& k = quant_kernels(isa);
    std::vector<float> f(want.size());
    std::vector<uint16_t> b(want.size());
    k.dequantize_row(t, bytes.data(), f.data(), n);
    k.dequantize_row_bf16(t, bytes.data(), b.data(), n);
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(bits_of(f[j]), bits_of(want[j]))
          << quant_isa_name(isa) << " " << dtype_name(t) << " element " << j;
      EXPECT_EQ(b[j], f32_to_bf16(want[j]))
          << quant_isa_name(isa) << " bf16 " << dtype_name(t) << " element " << j;
    }
  }
}

void put_f16(std::vector<uint8_t>& b, uint16_t h) {  // little-endian, as in GGUF
  b.push_back(static_cast<uint8_t>(h & 0xff));
  b.push_back(static_cast<uint8_t>(h >> 8));
}

TEST(Blocks, GgufQ8_0ByHand) {
  // Two blocks. Block 0: d = 0.5 (f16 0x3800), qs = -127, -1, 0, 1, 2, ..., 127.
  // Block 1: d = -0.25 (0xb400), qs[j] = j - 16.
  std::vector<uint8_t> bytes;
  std::vector<float> want;
  put_f16(bytes, 0x3800);
  const int8_t q0[32] = {-127, -1, 0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,  12,   13,
                         14,   15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 100, -100, 127};
  for (int8_t q : q0) {
    bytes.push_back(static_cast<uint8_t>(q));
    want.push_back(0.5f * q);
  }
  put_f16(bytes, 0xb400);
  for (int j = 0; j < 32; ++j) {
    bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
    want.push_back(-0.25f * static_cast<float>(j - 16));
  }
  expect_dequant(kQ8_0, bytes, want);
}

TEST(Blocks, GgufQ4_0ByHand) {
  // d = 2.0 (0x4000). Byte j holds element j (low nibble) and j + 16 (high):
  // byte 0 = 0x1f: element 0 = (15-8)*2 = 14, element 16 = (1-8)*2 = -14;
  // byte j (j >= 1) = (j << 4) | (15 - j): element j = (7-j)*2, element
  // 16+j = (j-8)*2.
  std::vector<uint8_t> bytes;
  std::vector<float> want(32);
  put_f16(bytes, 0x4000);
  bytes.push_back(0x1f);
  want[0] = 14.0f;
  want[16] = -14.0f;
  for (int j = 1; j < 16; ++j) {
    bytes.push_back(static_cast<uint8_t>((j << 4) | (15 - j)));
    want[j] = static_cast<float>((7 - j) * 2);
    want[16 + j] = static_cast<float>((j - 8) * 2);
  }
  expect_dequant(kQ4_0, bytes, want);
}

TEST(Blocks, GgufQ4_1ByHand) {
  // d = 1.0 (0x3c00), m = -2.0 (0xc000); byte j = 0xa3 for all j: element j
  // = 3*1 - 2 = 1, element j + 16 = 10*1 - 2 = 8. Second block: d = 0.125
  // (0x3000), m = 100.0 (0x5640), byte j = j | (15-j) << 4.
  std::vector<uint8_t> bytes;
  std::vector<float> want(64);
  put_f16(bytes, 0x3c00);
  put_f16(bytes, 0xc000);
  for (int j = 0; j < 16; ++j) {
    bytes.push_back(0xa3);
    want[j] = 1.0f;
    want[16 + j] = 8.0f;
  }
  put_f16(bytes, 0x3000);
  put_f16(bytes, 0x5640);
  for (int j = 0; j < 16; ++j) {
    bytes.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
    want[32 + j] = 100.0f + 0.125f * static_cast<float>(j);
    want[48 + j] = 100.0f + 0.125f * static_cast<float>(15 - j);
  }
  expect_dequant(kQ4_1, bytes, want);
}

TEST(Blocks, OwnFormatsByHand) {
  for (DType t : test::quant_types()) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const auto& info = dtype_info(t);
    const int g = info.block_elems;
    // d = 0.5 (0x3800); asymmetric m = -1.5 (0xbe00). q of element j:
    //   8-bit symmetric: (j % 255) - 127; 8-bit asymmetric: (7*j) % 256;
    //   4-bit: j % 16 (element j of the first half and j + G/2 of the second
    //   each get their own nibble).
    std::vector<uint8_t> bytes;
    std::vector<float> want(static_cast<size_t>(g));
    put_f16(bytes, 0x3800);
    if (!info.symmetric) put_f16(bytes, 0xbe00);
    const float m = info.symmetric ? 0.0f : -1.5f;
    if (info.bits == 8) {
      for (int j = 0; j < g; ++j) {
        if (info.symmetric) {
          const int q = (j % 255) - 127;
          bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(q)));
          want[j] = 0.5f * static_cast<float>(q);
        } else {
          const int q = (7 * j) % 256;
          bytes.push_back(static_cast<uint8_t>(q));
          want[j] = 0.5f * static_cast<float>(q) + m;
        }
      }
    } else {
      for (int j = 0; j < g / 2; ++j) {
        const int lo = j % 16;
        const int hi = (j * 5 + 3) % 16;
        bytes.push_back(static_cast<uint8_t>(lo | (hi << 4)));
        if (info.symmetric) {
          want[j] = 0.5f * static_cast<float>(lo - 8);
          want[j + g / 2] = 0.5f * static_cast<float>(hi - 8);
        } else {
          want[j] = 0.5f * static_cast<float>(lo) + m;
          want[j + g / 2] = 0.5f * static_cast<float>(hi) + m;
        }
      }
    }
    expect_dequant(t, bytes, want);
  }
}

TEST(Blocks, ZeroBytesAreZeros) {
  for (DType t : test::quant_types()) {
    const int64_t n = 2 * group_of(t);
    std::vector<uint8_t> bytes(row_bytes(t, n), 0);
    // Q4S: q = 0 means (0 - 8) * (+0) = -0.
    const float zero = t == kQ4_0 ? -0.0f : 0.0f;
    expect_dequant(t, bytes, std::vector<float>(static_cast<size_t>(n), zero));
  }
}

TEST(Blocks, LargeScaleAndMinimum) {
  // The largest finite f16 scale and minimum: values stay finite and exact.
  // Q8_0 d = 65504 (0x7bff), q = 127 -> 8319008; Q4_1 d = 65504, m = -65504,
  // q = 15 -> 917056, q = 0 -> -65504.
  std::vector<uint8_t> q8;
  put_f16(q8, 0x7bff);
  std::vector<float> want8;
  for (int j = 0; j < 32; ++j) {
    const int q = (j % 2) ? 127 : -127;
    q8.push_back(static_cast<uint8_t>(static_cast<int8_t>(q)));
    want8.push_back(65504.0f * static_cast<float>(q));
  }
  expect_dequant(kQ8_0, q8, want8);
  std::vector<uint8_t> q41;
  put_f16(q41, 0x7bff);
  put_f16(q41, 0xfbff);
  std::vector<float> want41(32);
  for (int j = 0; j < 16; ++j) {
    q41.push_back(0xf0);
    want41[j] = -65504.0f;
    want41[16 + j] = 15.0f * 65504.0f - 65504.0f;
  }
  expect_dequant(kQ4_1, q41, want41);
}

TEST(Blocks, NanScaleGivesNan) {
  // A block with an f16 NaN scale (how non-finite input is stored) dequantizes
  // to NaN everywhere; an infinite scale times q = 0 is NaN too (IEEE).
  for (DType t : test::quant_types()) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int64_t g = group_of(t);
    std::vector<uint8_t> bytes(row_bytes(t, g), 0);
    bytes[0] = 0x00;
    bytes[1] = 0x7e;
    if (!dtype_info(t).symmetric) {
      bytes[2] = 0x00;
      bytes[3] = 0x7e;
    }
    std::vector<float> y(static_cast<size_t>(g));
    for (QuantIsa isa : {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512}) {
      if (!quant_isa_supported(isa)) continue;
      quant_kernels(isa).dequantize_row(t, bytes.data(), y.data(), g);
      for (float v : y) EXPECT_TRUE(std::isnan(v)) << quant_isa_name(isa);
    }
  }
}

}  // namespace
}  // namespace strata
