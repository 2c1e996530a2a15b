// Every instruction-set variant of the (de)quantizers equals the reference bit
// for bit: the same block bytes from quantize_row, the same floats from
// dequantize_row, the same bf16 from dequantize_row_bf16, on random rows of
// several kinds and lengths (odd multiples of the group included), at
// unaligned addresses, with guard bytes around every output. Also the
// public entry points, the multi-row helpers and KV rows of head_dim 64/128.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/isa.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"
#include "quant/quant_test_util.h"

namespace strata {
namespace {

using test::bits_of;
using test::group_of;
using test::Guarded;

class QuantFast : public testing::TestWithParam<QuantIsa> {
 protected:
  void SetUp() override {
    if (!quant_isa_supported(GetParam())) {
      GTEST_SKIP() << "this CPU does not support the " << quant_isa_name(GetParam())
                   << " kernels; they are not tested here";
    }
  }
  const QuantKernels& k() const { return quant_kernels(GetParam()); }
};

// Quantizes x with the reference and with the variant, compares bytes; then
// dequantizes the bytes both ways (f32 and bf16) and compares bits.
void expect_same(const QuantKernels& k, DType t, const std::vector<float>& x_in, size_t x_offset,
                 size_t y_offset, const std::string& what) {
  const int64_t n = static_cast<int64_t>(x_in.size());
  const size_t nbytes = row_bytes(t, n);
  Guarded xbuf(x_in.size() * sizeof(float), x_offset * sizeof(float));
  std::memcpy(xbuf.data(), x_in.data(), x_in.size() * sizeof(float));
  const float* x = xbuf.as<float>();

  std::vector<uint8_t> want(nbytes);
  quantize_row_ref(t, x, want.data(), n);
  Guarded got(nbytes, y_offset);
  k.quantize_row(t, x, got.data(), n);
  ASSERT_TRUE(got.guards_intact()) << what << ": quantize_row wrote outside its row";
  const size_t bb = static_cast<size_t>(dtype_info(t).block_bytes);
  for (size_t i = 0; i < nbytes; ++i) {
    ASSERT_EQ(got.data()[i], want[i])
        << what << ": byte " << i << " (block " << i / bb << ", offset " << i % bb << ")";
  }

  std::vector<float> yf_want(static_cast<size_t>(n));
  dequantize_row_ref(t, want.data(), yf_want.data(), n);
  Guarded yf(static_cast<size_t>(n) * sizeof(float), 4);
  k.dequantize_row(t, got.data(), yf.as<float>(), n);
  ASSERT_TRUE(yf.guards_intact()) << what << ": dequantize_row wrote outside its row";
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_EQ(bits_of(yf.as<float>()[j]), bits_of(yf_want[j]))
        << what << ": dequantized element " << j << " " << yf.as<float>()[j] << " vs "
        << yf_want[j];
  }

  std::vector<uint16_t> yb_want(static_cast<size_t>(n));
  dequantize_row_bf16_ref(t, want.data(), yb_want.data(), n);
  Guarded yb(static_cast<size_t>(n) * sizeof(uint16_t), 2);
  k.dequantize_row_bf16(t, got.data(), yb.as<uint16_t>(), n);
  ASSERT_TRUE(yb.guards_intact()) << what << ": dequantize_row_bf16 wrote outside its row";
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_EQ(yb.as<uint16_t>()[j], yb_want[j]) << what << ": bf16 element " << j;
  }
}

TEST_P(QuantFast, EqualsReferenceOnRandomRows) {
  uint32_t seed = 1;
  for (DType t : test::quant_types()) {
    const int g = group_of(t);
    for (auto kind : {test::RowKind::kUniform, test::RowKind::kNormal, test::RowKind::kWideRange,
                      test::RowKind::kSpecial}) {
      for (int groups : {1, 3, 7, 17, 111}) {
        const auto x = test::make_row(kind, static_cast<int64_t>(groups) * g, g, seed++);
        const std::string what = std::string(dtype_name(t)) + " " + test::row_kind_name(kind) +
                                 " n=" + std::to_string(groups * g);
        expect_same(k(), t, x, seed % 3, 2 * (seed % 5), what);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(QuantFast, EqualsReferenceOnManySpecialGroups) {
  // A long row of special groups: every menu entry many times over.
  for (DType t : test::quant_types()) {
    const int g = group_of(t);
    const auto x = test::make_row(test::RowKind::kSpecial, 2000LL * g, g, 77 + static_cast<int>(t));
    expect_same(k(), t, x, 1, 0, std::string(dtype_name(t)) + " special x2000");
    if (HasFatalFailure()) return;
  }
}

TEST_P(QuantFast, EqualsReferenceOnHandPickedGroups) {
  // Ties of each rounding rule, first-max sign choices, zeros of both signs,
  // constants, non-finite values at each position.
  std::vector<std::vector<float>> groups32;
  std::vector<float> g(32);
  for (int j = 0; j < 32; ++j) g[j] = static_cast<float>(j - 16) + 0.5f;  // halves
  groups32.push_back(g);
  for (int j = 0; j < 32; ++j)
    g[j] = (j % 2 ? 1.0f : -1.0f) * (127.0f - static_cast<float>(j)) * 0.5f;
  groups32.push_back(g);
  for (int j = 0; j < 32; ++j) g[j] = 0.49999997f * static_cast<float>(j % 3);
  g[5] = 127.0f;
  groups32.push_back(g);
  for (int j = 0; j < 32; ++j) g[j] = (j == 9 ? -8.0f : (j == 20 ? 8.0f : 1.0f));
  groups32.push_back(g);
  for (int j = 0; j < 32; ++j) g[j] = (j % 2) ? -0.0f : 0.0f;
  groups32.push_back(g);
  for (int j = 0; j < 32; ++j) g[j] = -0.0f;
  groups32.push_back(g);
  for (int j = 0; j < 32; ++j) g[j] = 0.1f;
  groups32.push_back(g);
  for (int pos : {0, 15, 16, 31}) {
    for (float b : {NAN, INFINITY, -INFINITY}) {
      for (int j = 0; j < 32; ++j) g[j] = static_cast<float>(j);
      g[pos] = b;
      groups32.push_back(g);
    }
  }
  for (DType t : test::quant_types()) {
    const int gs = group_of(t);
    std::vector<float> row;
    for (const auto& h : groups32) {
      for (int r = 0; r < gs / 32; ++r) row.insert(row.end(), h.begin(), h.end());
    }
    // Also each 32-group shifted within a larger group.
    if (gs > 32) {
      for (const auto& h : groups32) {
        std::vector<float> big(static_cast<size_t>(gs), 0.25f);
        std::copy(h.begin(), h.end(), big.begin() + (gs - 32));
        row.insert(row.end(), big.begin(), big.end());
      }
    }
    expect_same(k(), t, row, 0, 0, std::string(dtype_name(t)) + " hand-picked");
    if (HasFatalFailure()) return;
  }
}

TEST_P(QuantFast, DequantizeArbitraryBytes) {
  // Any bytes are valid blocks (NaN and Inf scales included). NaN payloads
  // are not part of the contract: any NaN matches any NaN here.
  std::mt19937 rng(5);
  for (DType t : test::quant_types()) {
    const int64_t n = 37LL * group_of(t);
    std::vector<uint8_t> bytes(row_bytes(t, n));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    std::vector<uint16_t> wantb(static_cast<size_t>(n)), gotb(static_cast<size_t>(n));
    dequantize_row_ref(t, bytes.data(), want.data(), n);
    dequantize_row_bf16_ref(t, bytes.data(), wantb.data(), n);
    k().dequantize_row(t, bytes.data(), got.data(), n);
    k().dequantize_row_bf16(t, bytes.data(), gotb.data(), n);
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_TRUE(test::same_float(got[j], want[j])) << dtype_name(t) << " element " << j;
      ASSERT_TRUE(test::same_float(bf16_to_f32(gotb[j]), bf16_to_f32(wantb[j])))
          << dtype_name(t) << " bf16 element " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, QuantFast,
                         testing::Values(QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512),
                         test::isa_param_name);

// ---- public entry points ----

TEST(QuantPublic, UsesTheBestSupportedVariant) {
  const QuantIsa chosen = quant_kernels().isa;
  EXPECT_TRUE(quant_isa_supported(chosen));
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512}) {
    if (quant_isa_supported(isa)) {
      EXPECT_GE(static_cast<int>(chosen), static_cast<int>(isa));
    }
  }
  std::printf("  quantization kernels in use: %s\n", std::string(quant_isa_name(chosen)).c_str());
}

TEST(QuantPublic, MultiRowHelpersWithStrides) {
  // KV layout: [n_tokens, n_heads, head_dim] floats; each (token, head) row of
  // head_dim values quantized on its own, into a cache whose rows are padded.
  for (int head_dim : {64, 128}) {
    for (DType t : test::quant_types()) {
      if (head_dim % group_of(t) != 0) continue;
      SCOPED_TRACE(std::string(dtype_name(t)) + " head_dim " + std::to_string(head_dim));
      const int n_tokens = 7, n_heads = 3;
      const int64_t n_rows = n_tokens * n_heads;
      const auto x = test::make_row(test::RowKind::kNormal, n_rows * head_dim, 32, 11);
      const size_t rb = row_bytes(t, head_dim);
      const size_t y_stride = rb + 6;  // padded, still even
      Guarded y(y_stride * static_cast<size_t>(n_rows));
      std::memset(y.data(), 0x5a, y.size());
      quantize_rows(t, x.data(), head_dim, y.data(), y_stride, n_rows, head_dim);
      ASSERT_TRUE(y.guards_intact());
      std::vector<uint8_t> want(rb);
      for (int64_t r = 0; r < n_rows; ++r) {
        quantize_row_ref(t, x.data() + r * head_dim, want.data(), head_dim);
        ASSERT_EQ(std::memcmp(y.data() + r * y_stride, want.data(), rb), 0) << "row " << r;
        for (size_t p = rb; p < y_stride; ++p) ASSERT_EQ(y.data()[r * y_stride + p], 0x5a);
      }
      // Back, into rows head_dim + 5 floats apart (padding untouched).
      const int64_t out_stride = head_dim + 5;
      std::vector<float> out(static_cast<size_t>(n_rows * out_stride), -7.0f);
      dequantize_rows(t, y.data(), y_stride, out.data(), out_stride, n_rows, head_dim);
      std::vector<uint16_t> outb(static_cast<size_t>(n_rows * out_stride), 0x1234);
      dequantize_rows_bf16(t, y.data(), y_stride, outb.data(), out_stride, n_rows, head_dim);
      std::vector<float> ref(static_cast<size_t>(head_dim));
      for (int64_t r = 0; r < n_rows; ++r) {
        dequantize_row_ref(t, y.data() + r * y_stride, ref.data(), head_dim);
        for (int j = 0; j < head_dim; ++j) {
          ASSERT_EQ(bits_of(out[r * out_stride + j]), bits_of(ref[j]));
          ASSERT_EQ(outb[r * out_stride + j], f32_to_bf16(ref[j]));
        }
        for (int64_t j = head_dim; j < out_stride; ++j) {
          ASSERT_EQ(out[r * out_stride + j], -7.0f);
          ASSERT_EQ(outb[r * out_stride + j], 0x1234);
        }
      }
    }
  }
}

TEST(QuantPublic, SingleRowsMatchReference) {
  for (DType t : test::quant_types()) {
    const int64_t n = 5LL * group_of(t);
    const auto x = test::make_row(test::RowKind::kUniform, n, group_of(t), 3);
    std::vector<uint8_t> a(row_bytes(t, n)), b(row_bytes(t, n));
    quantize_row(t, x.data(), a.data(), n);
    quantize_row_ref(t, x.data(), b.data(), n);
    EXPECT_EQ(a, b) << dtype_name(t);
    std::vector<float> ya(static_cast<size_t>(n)), yb(static_cast<size_t>(n));
    dequantize_row(t, a.data(), ya.data(), n);
    dequantize_row_ref(t, b.data(), yb.data(), n);
    EXPECT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * 4), 0) << dtype_name(t);
    std::vector<uint16_t> ba(static_cast<size_t>(n)), bb(static_cast<size_t>(n));
    dequantize_row_bf16(t, a.data(), ba.data(), n);
    dequantize_row_bf16_ref(t, b.data(), bb.data(), n);
    EXPECT_EQ(ba, bb) << dtype_name(t);
  }
}

TEST(QuantPublic, EmptyRowIsANoOp) {
  for (DType t : test::quant_types()) {
    quantize_row(t, nullptr, nullptr, 0);
    dequantize_row(t, nullptr, nullptr, 0);
    dequantize_row_bf16(t, nullptr, nullptr, 0);
  }
}

TEST(QuantPublicDeathTest, RowNotAWholeNumberOfGroupsIsABug) {
  std::vector<float> x(33, 1.0f);
  std::vector<uint8_t> y(64);
  EXPECT_DEATH(quantize_row(kQ4_1, x.data(), y.data(), 33), "not a whole number of q4a32 groups");
  EXPECT_DEATH(dequantize_row(DType::kF16, y.data(), x.data(), 16), "not a quantized type");
}

}  // namespace
}  // namespace strata
