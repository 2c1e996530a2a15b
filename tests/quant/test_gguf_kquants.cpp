// The GGUF-only formats (quant/gguf_blocks.h): Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K dequantize to exactly (bit for bit) the float32 values gguf-py
// gives for the same random blocks (tests/data/golden/gguf_quants.json,
// scripts/make_gguf_quant_goldens.py), Q8_K to its definition d*q; the fast
// path (this CPU's best variant; each one: test_gguf_integers.cpp) equals the reference at
// odd addresses; the bf16 path rounds the reference; the formats are
// read-only (no quantizer) and keep out of quant_dtype's choices.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/json.h"
#include "quant/gguf_blocks.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"

namespace strata {
namespace {

std::vector<uint8_t> base64(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

struct Golden {
  DType t;
  std::vector<uint8_t> blocks;
  std::vector<float> values;
};

std::vector<Golden> goldens() {
  const Json g = read_json_file(std::string(STRATA_TEST_DATA) + "/golden/gguf_quants.json");
  std::vector<Golden> out;
  for (const auto& [name, f] : g["formats"].items()) {
    const auto t = dtype_from_name(name);
    EXPECT_TRUE(t && dtype_info(*t).dequant_only) << name;
    if (!t) continue;
    Golden gd{*t, base64(f["blocks"].get<std::string>()), {}};
    const std::vector<uint8_t> v = base64(f["values"].get<std::string>());
    gd.values.resize(v.size() / 4);
    std::memcpy(gd.values.data(), v.data(), v.size());
    out.push_back(std::move(gd));
  }
  return out;
}

int64_t n_values(const Golden& g) {
  const auto& info = dtype_info(g.t);
  return static_cast<int64_t>(g.blocks.size() / static_cast<size_t>(info.block_bytes)) *
         info.block_elems;
}

TEST(GgufKQuants, EveryFormatEqualsGgufPyBitForBit) {
  const auto all = goldens();
  ASSERT_EQ(all.size(), 8u);
  for (const Golden& g : all) {
    const int64_t n = n_values(g);
    ASSERT_EQ(static_cast<size_t>(n), g.values.size()) << dtype_name(g.t);
    std::vector<float> ref(static_cast<size_t>(n)), fast(static_cast<size_t>(n));
    dequantize_row_ref(g.t, g.blocks.data(), ref.data(), n);
    dequantize_row(g.t, g.blocks.data(), fast.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(ref[i]), std::bit_cast<uint32_t>(g.values[i]))
          << dtype_name(g.t) << " value " << i << ": " << ref[i] << " vs gguf-py " << g.values[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(fast[i]), std::bit_cast<uint32_t>(ref[i]))
          << dtype_name(g.t) << " fast path, value " << i;
    }
  }
}

TEST(GgufKQuants, OddAddressesRowsAndBf16) {
  for (const Golden& g : goldens()) {
    const int64_t n = n_values(g);
    std::vector<uint8_t> shifted(g.blocks.size() + 1);
    std::memcpy(shifted.data() + 1, g.blocks.data(), g.blocks.size());
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(g.t, shifted.data() + 1, y.data(), n);
    EXPECT_EQ(std::memcmp(y.data(), g.values.data(), y.size() * 4), 0) << dtype_name(g.t);

    // Two rows of half the blocks each, through the multi-row form.
    const int64_t half = n / 2;
    const size_t half_bytes = g.blocks.size() / 2;
    std::vector<float> rows(static_cast<size_t>(n));
    dequantize_rows(g.t, g.blocks.data(), half_bytes, rows.data(), half, 2, half);
    EXPECT_EQ(std::memcmp(rows.data(), g.values.data(), rows.size() * 4), 0) << dtype_name(g.t);

    std::vector<uint16_t> b(static_cast<size_t>(n));
    dequantize_row_bf16(g.t, g.blocks.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(b[i], f32_to_bf16(g.values[i])) << dtype_name(g.t) << " " << i;
    }
  }
}

TEST(GgufKQuants, ReadOnlyFormats) {
  for (DType t : {DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    EXPECT_TRUE(dtype_info(t).dequant_only) << dtype_name(t);
    EXPECT_TRUE(is_quantized(t));
  }
  // quant_dtype never answers with a read-only format.
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (bool sym : {false, true}) {
      for (int group : {32, 256}) {
        const auto t = quant_dtype(bits, sym, group);
        if (t) {
          EXPECT_FALSE(dtype_info(*t).dequant_only) << dtype_name(*t);
        }
      }
    }
  }
  // Bytes per weight, as the cost model reads them: Q4_K 4.5 bits, Q6_K 6.5625.
  EXPECT_EQ(row_bytes(DType::kQ4_K, 4096), 4096u / 256 * 144);
  EXPECT_DOUBLE_EQ(
      8.0 * dtype_info(DType::kQ6_K).block_bytes / dtype_info(DType::kQ6_K).block_elems, 6.5625);
}

}  // namespace
}  // namespace strata
