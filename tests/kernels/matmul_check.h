// One matmul checked against matmul_ref, every element, with canaries around
// (and between the rows of) the output. Shared by the random-weight tests and
// the tests on the demo model's weights.
//
// Tolerance. With x~ and w~ the operands as the compute dtype sees them (bf16:
// rounded to nearest even; the products are then exact in f32), any order of
// f32 accumulation of k products and one bias add is within
// (k + 1) u (sum_l |x~_l w~_l| + |bias|) of the exact sum (u = 2^-24); the
// reference rounds the exact sum once more to f32 (u |ref|). bf16 products use
// vdpbf16ps, which flushes subnormal results: k 2^-126 more at most. The
// bf16 rounding of the operands (eps_bf16 = 2^-8 each) is part of the op's
// definition, so it is not in this bound; MatmulBf16.WithinOperandRoundingOfF32
// bounds it against the f32 product.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"
#include "quant/convert.h"
#include "quant/quant_ref.h"
#include "support/all_close.h"
#include "support/guarded.h"
#include "support/random.h"
#include "support/random_weights.h"

namespace strata::test {

// x: [m, k] contiguous (copied into rows x_pad floats longer); bias: [n] or null.
inline void check_matmul(cpu::MatmulCache& cache, cpu::ComputeType c, const void* w, DType t,
                         size_t w_stride, const std::vector<float>& x_rows,
                         const std::vector<float>* bias, int64_t m, int64_t n, int64_t k,
                         int64_t x_pad = 0, int64_t y_pad = 0) {
  const bool bf16 = c == cpu::ComputeType::kBF16;
  GuardedRows x(m, k, k + x_pad);
  x.fill(x_rows);
  const float* b = bias != nullptr ? bias->data() : nullptr;
  GuardedRows y(m, n, n + y_pad), y_ref(m, n, n);
  ASSERT_EQ(
      cpu::matmul(cache, y.data(), y.stride(), x.data(), x.stride(), w, t, w_stride, b, m, n, k, c),
      Status::kOk);
  ASSERT_EQ(cpu::matmul_ref(y_ref.data(), y_ref.stride(), x.data(), x.stride(), w, t, w_stride, b,
                            m, n, k, c),
            Status::kOk);
  EXPECT_TRUE(y.canaries_intact());

  // The operands as the compute dtype sees them.
  auto as_computed = [bf16](float v) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; };
  std::vector<float> wf(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) {
    const void* row = static_cast<const char*>(w) + static_cast<size_t>(j) * w_stride;
    float* dst = wf.data() + j * k;
    switch (t) {
      case DType::kF32:
        std::memcpy(dst, row, static_cast<size_t>(k) * 4);
        break;
      case DType::kF16:
        f16_to_f32_row(static_cast<const uint16_t*>(row), dst, k);
        break;
      case DType::kBF16:
        bf16_to_f32_row(static_cast<const uint16_t*>(row), dst, k);
        break;
      default:
        dequantize_row_ref(t, row, dst, k);
        break;
    }
    for (int64_t l = 0; l < k; ++l) dst[l] = as_computed(dst[l]);
  }
  std::vector<float> xf(x_rows.size());
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = as_computed(x_rows[i]);

  const auto ref = to_double(y_ref.rows());
  const auto tol = [&](size_t e) {
    const int64_t i = static_cast<int64_t>(e) / n;
    const int64_t j = static_cast<int64_t>(e) % n;
    double abs_sum = b != nullptr ? std::fabs(b[j]) : 0.0;
    for (int64_t l = 0; l < k; ++l) {
      abs_sum += std::fabs(static_cast<double>(xf[static_cast<size_t>(i * k + l)]) *
                           wf[static_cast<size_t>(j * k + l)]);
    }
    return (k + 1) * kU32 * abs_sum + kU32 * std::fabs(ref[e]) + k * 0x1p-126;
  };
  EXPECT_TRUE(all_close(y.rows(), ref, tol, "matmul"));
}

}  // namespace strata::test
