// The CUDA matrix product (cuBLAS paths and the fused dequantize kernel)
// against the CPU reference matmul_ref, every element, canaries around and
// between the output rows; every weight dtype, both compute dtypes, odd
// sizes, strided x and y, with and without bias, and weights large enough to
// be converted in two panels.
//
// Reference and tolerance. The op's definition (launch_plan.h) rounds the
// operands to the plan's operand dtype (f16 / bf16: nearest even, 2^-11 /
// 2^-8 relative each; f32: none), so the reference is matmul_ref in f32 on
// exactly those operands x~, W~ (computed here on the host with core's
// conversions and quant's reference dequantizer). What remains is the f32
// accumulation of k products and one bias add, in any order: within
// (k + 1) u (sum_l |x~_l W~_l| + |bias|) (u = 2^-24). Tensor cores (16-bit
// operands) add blocks of 4 to 16 exact products to the accumulator at once,
// aligned to the largest exponent and truncated: each block step is within
// 4 u of the largest magnitude involved, so over k / 4 + 1 steps the sum is
// within 2 (k + 1) u (sum |x~ W~| + |bias|); 16-bit operands get that bound.
// The reference's own rounding adds u |ref|, and k 2^-126 covers products
// flushed to zero.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/launch_plan.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda_test_util.h"
#include "quant/quant_ref.h"

namespace strata::cuda {
namespace {

using test::DeviceArray;
using test::DeviceBytes;
using test::DeviceRows;
using test::kU32;

constexpr cudaStream_t kStream = nullptr;

class CudaMatmul : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_GPU();
    ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(handle_, kStream), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }

  struct Case {
    DType w;
    DType compute;
    int64_t m, n, k;
    int64_t x_pad = 0, y_pad = 0;
    bool bias = false;
  };

  // Runs one product and checks it.
  void check(const Case& c, uint32_t seed) {
    SCOPED_TRACE(::testing::Message()
                 << dtype_name(c.w) << " compute " << dtype_name(c.compute) << " m=" << c.m
                 << " n=" << c.n << " k=" << c.k << " bias=" << c.bias);
    MatmulPlan plan;
    ASSERT_EQ(plan_matmul(c.w, c.compute, c.m, c.n, c.k, &plan), Status::kOk);
    const size_t w_rb = row_bytes(c.w, c.k) + (c.w == DType::kF32 ? 8 : 4);
    const auto w = test::weight_rows(c.w, c.n, c.k, w_rb, seed, false, -1.0f, 1.0f);
    const auto xv = test::random_floats(static_cast<size_t>(c.m * c.k), -1.0f, 1.0f, seed + 1);
    const auto bias = test::random_floats(static_cast<size_t>(c.n), -1.0f, 1.0f, seed + 2);

    DeviceBytes w_dev(std::max<size_t>(w.size(), 1));
    if (!w.empty()) w_dev.upload(w.data(), w.size());
    DeviceRows x(c.m, c.k, c.k + c.x_pad), y(c.m, c.n, c.n + c.y_pad);
    x.fill(xv);
    DeviceArray<float> b_dev(bias);
    DeviceBytes ws(std::max<size_t>(plan.workspace_bytes(), 1));
    ASSERT_EQ(matmul(handle_, ws.data(), plan.workspace_bytes(), y.data(), y.stride(), x.data(),
                     x.stride(), w_dev.data(), c.w, w_rb, c.bias ? b_dev.data() : nullptr, c.m, c.n,
                     c.k, c.compute, kStream),
              Status::kOk)
        << last_detail();

    // The operands as the op defines them.
    auto round_op = [&](float v) {
      switch (plan.operand) {
        case DType::kF16:
          return f16_to_f32(f32_to_f16(v));
        case DType::kBF16:
          return bf16_to_f32(f32_to_bf16(v));
        default:
          return v;
      }
    };
    std::vector<float> wf(static_cast<size_t>(c.n * c.k));
    for (int64_t j = 0; j < c.n; ++j) {
      const uint8_t* row = w.data() + static_cast<size_t>(j) * w_rb;
      float* dst = wf.data() + j * c.k;
      switch (c.w) {
        case DType::kF32:
          std::memcpy(dst, row, static_cast<size_t>(c.k) * 4);
          break;
        case DType::kF16:
        case DType::kBF16:
          for (int64_t l = 0; l < c.k; ++l) {
            uint16_t h;
            std::memcpy(&h, row + 2 * l, 2);
            dst[l] = c.w == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
          }
          break;
        default:
          dequantize_row_ref(c.w, row, dst, c.k);
          break;
      }
      for (int64_t l = 0; l < c.k; ++l) dst[l] = round_op(dst[l]);
    }
    std::vector<float> xo(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) xo[i] = round_op(xv[i]);
    std::vector<float> ref(static_cast<size_t>(c.m * c.n));
    ASSERT_EQ(cpu::matmul_ref(ref.data(), c.n, xo.data(), c.k, wf.data(), DType::kF32,
                              static_cast<size_t>(c.k) * 4, c.bias ? bias.data() : nullptr, c.m,
                              c.n, c.k, cpu::ComputeType::kF32),
              Status::kOk);
    EXPECT_TRUE(y.canaries_intact());

    const double gamma = (plan.operand == DType::kF32 ? 1.0 : 2.0) * (c.k + 1) * kU32;
    const auto r = test::to_double(ref);
    const auto tol = [&](size_t e) {
      const int64_t i = static_cast<int64_t>(e) / c.n;
      const int64_t j = static_cast<int64_t>(e) % c.n;
      double abs_sum = c.bias ? std::fabs(bias[static_cast<size_t>(j)]) : 0.0;
      for (int64_t l = 0; l < c.k; ++l) {
        abs_sum += std::fabs(static_cast<double>(xo[static_cast<size_t>(i * c.k + l)]) *
                             wf[static_cast<size_t>(j * c.k + l)]);
      }
      return gamma * abs_sum + kU32 * std::fabs(r[e]) + c.k * 0x1p-126;
    };
    EXPECT_TRUE(test::all_close(y.rows(), r, tol, "matmul"));
  }

  cublasHandle_t handle_ = nullptr;
};

TEST_F(CudaMatmul, PlainWeights) {
  uint32_t seed = 1;
  for (DType w : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType compute : {DType::kF32, DType::kBF16}) {
      check({w, compute, 1, 1, 1}, seed += 3);
      check({w, compute, 3, 7, 17, 2, 1, true}, seed += 3);
      check({w, compute, 17, 111, 64, 0, 3, false}, seed += 3);
      check({w, compute, 130, 33, 989, 5, 0, true}, seed += 3);
    }
  }
}

TEST_F(CudaMatmul, QuantizedWeightsBothPaths) {
  uint32_t seed = 100;
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    const DType w = static_cast<DType>(i);
    if (!is_quantized(w)) continue;  // Strata's formats and the GGUF-only ones
    const int64_t g = dtype_info(w).block_elems;
    for (DType compute : {DType::kF32, DType::kBF16}) {
      check({w, compute, 1, 7, g, 0, 0, true}, seed += 3);                   // fused kernel
      check({w, compute, kGemvMaxM, 111, 3 * g, 3, 1, false}, seed += 3);    // fused kernel
      check({w, compute, kGemvMaxM + 1, 17, 2 * g, 1, 2, true}, seed += 3);  // dequantize + GEMM
      check({w, compute, 33, 5, 5 * g, 0, 0, false}, seed += 3);             // dequantize + GEMM
    }
  }
}

TEST_F(CudaMatmul, WeightsConvertedInTwoPanels) {
  // q4a32 [4100, 4096] in f32 operands: 4096 rows make a 64 MiB panel, so the
  // product runs as two panels sharing one workspace.
  MatmulPlan plan;
  ASSERT_EQ(plan_matmul(DType::kQ4A32, DType::kF32, 9, 4100, 4096, &plan), Status::kOk);
  ASSERT_EQ(plan.panel_rows, 4096);
  check({DType::kQ4A32, DType::kF32, 9, 4100, 4096, 0, 1, true}, 7);
}

TEST_F(CudaMatmul, EmptySumIsBias) {
  check({DType::kF16, DType::kF32, 3, 5, 0, 0, 2, true}, 11);
  check({DType::kQ8S32, DType::kBF16, 2, 4, 0, 0, 0, false}, 12);
}

TEST_F(CudaMatmul, RejectsBadArguments) {
  float* p = reinterpret_cast<float*>(uintptr_t{256});
  void* ws = reinterpret_cast<void*>(uintptr_t{256});
  // Workspace smaller than the plan's.
  MatmulPlan plan;
  ASSERT_EQ(plan_matmul(DType::kF16, DType::kF32, 4, 8, 64, &plan), Status::kOk);
  EXPECT_EQ(matmul(handle_, ws, plan.workspace_bytes() - 1, p, 8, p, 64, p, DType::kF16, 128,
                   nullptr, 4, 8, 64, DType::kF32, kStream),
            Status::kInvalidArgument);
  // Misaligned 16-bit weight rows.
  EXPECT_EQ(matmul(handle_, ws, 1 << 20, p, 8, p, 64, p, DType::kF16, 129, nullptr, 4, 8, 64,
                   DType::kF32, kStream),
            Status::kInvalidArgument);
  EXPECT_EQ(matmul(handle_, ws, 1 << 20, p, 8, p, 64, p, DType::kF16, 128, nullptr, 4, 8, 64,
                   DType::kF16, kStream),
            Status::kUnsupported);
  EXPECT_EQ(gemv_dequant(p, 8, p, 64, p, DType::kQ8S32, 68, nullptr, kGemvMaxM + 1, 8, 64,
                         DType::kF32, kStream),
            Status::kInvalidArgument);
  EXPECT_EQ(gemv_dequant(p, 8, p, 64, p, DType::kF16, 128, nullptr, 1, 8, 64, DType::kF32, kStream),
            Status::kUnsupported);
}

}  // namespace
}  // namespace strata::cuda
