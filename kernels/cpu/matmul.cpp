// cpu::matmul: each call to a decode kernel (bf16 or f32 dot, int8) or to
// the GEMM path (kernels/cpu/matmul_gemm.h).
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_bf16.h"
#include "kernels/cpu/matmul_f32_dot.h"
#include "kernels/cpu/matmul_gemm.h"
#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/op_args.h"

namespace strata::cpu {

namespace {

// k == 0: the empty sum.
void fill_bias(float* y, int64_t y_stride, const float* bias, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) y[i * y_stride + j] = bias != nullptr ? bias[j] : 0.0f;
  }
}

// The int8 compute type with quantized weights (kernels/cpu/matmul_int8.h).
Status run_matmul_int8(MatmulCache::Impl& c, float* y, int64_t y_stride, const float* x,
                       int64_t x_stride, WeightParts parts, int64_t m, int64_t k) {
  const int64_t group = matmul_int8_group(parts[0].dtype);
  const int n_threads = matmul_threads(m, total_rows(parts), k);
  if (!c.int8_x.ensure(matmul_int8_x_bytes(m, k, group))) return Status::kOutOfMemory;
  if (static_cast<int>(c.threads.size()) < n_threads)
    c.threads.resize(static_cast<size_t>(n_threads));
  std::vector<void*> panels(static_cast<size_t>(n_threads));
  for (int i = 0; i < n_threads; ++i) {
    auto& ws = c.threads[static_cast<size_t>(i)];
    if (!ws.int8_panel.ensure(matmul_int8_panel_bytes(k, group))) return Status::kOutOfMemory;
    panels[static_cast<size_t>(i)] = ws.int8_panel.data();
  }
  return matmul_int8(y, y_stride, x, x_stride, parts, m, k, c.int8_x.data(), panels.data(),
                     n_threads);
}

// bf16 at m <= kBf16DotMaxM: the fused dequantize + dot kernel
// (kernels/cpu/matmul_bf16.h).
Status run_matmul_bf16_dot(MatmulCache::Impl& c, float* y, int64_t y_stride, const float* x,
                           int64_t x_stride, WeightParts parts, int64_t m, int64_t k) {
  const int n_threads = matmul_threads(m, total_rows(parts), k);
  if (!c.dot_x.ensure(matmul_bf16_dot_ws_bytes(m, k))) return Status::kOutOfMemory;
  return matmul_bf16_dot(y, y_stride, x, x_stride, parts, m, k, c.dot_x.data(), n_threads);
}

// f32 (or bf16 without native products) at m <= kF32DotMaxM: the fused
// widen + FMA kernel (kernels/cpu/matmul_f32_dot.h).
Status run_matmul_f32_dot(MatmulCache::Impl& c, float* y, int64_t y_stride, const float* x,
                          int64_t x_stride, WeightParts parts, int64_t m, int64_t k,
                          bool round_bf16) {
  const int n_threads = matmul_threads(m, total_rows(parts), k);
  if (!c.dot_x.ensure(matmul_f32_dot_ws_bytes(m, k))) return Status::kOutOfMemory;
  return matmul_f32_dot(y, y_stride, x, x_stride, parts, m, k, round_bf16, c.dot_x.data(),
                        n_threads);
}

}  // namespace

// oneDNN multiplies bf16 operands only on CPUs with AVX-512; elsewhere kBF16
// rounds x and W to bf16 and multiplies in f32: a product of two bf16
// values is exact in f32 and the sums are f32 either way, so the result is
// that of the native path up to the order of the sums.
bool native_bf16_products() {
  return cpu_features().avx512;
}

MatmulCache::MatmulCache() : impl_(std::make_unique<Impl>()) {}
MatmulCache::~MatmulCache() = default;

size_t MatmulCache::workspace_bytes() const {
  size_t total =
      impl_->x_ws.size() + impl_->int8_x.size() + impl_->dot_x.size() + impl_->rounded_x.size();
  for (const auto& t : impl_->threads) {
    total += t.panel.size() + t.tmp.size() + t.scratch.size() + t.int8_panel.size();
  }
  return total;
}

size_t MatmulCache::n_primitives() const {
  return impl_->prims.size();
}

Status MatmulCache::reserve(int64_t max_m, int64_t n, int64_t k, ComputeType compute) {
  if (max_m < 1 || n < 1 || k < 1) return Status::kInvalidArgument;
  if (compute == ComputeType::kInt8) compute = ComputeType::kBF16;  // float weights' path
  if (compute == ComputeType::kBF16 && !native_bf16_products()) compute = ComputeType::kF32;
  if (compute == ComputeType::kF32 && matmul_f32_dot_ok(1) &&
      !impl_->dot_x.ensure(matmul_f32_dot_ws_bytes(std::min(max_m, kF32DotMaxM), k))) {
    return Status::kOutOfMemory;
  }
  return reserve_gemm(*impl_, max_m, n, k, compute);
}

Status matmul(MatmulCache& cache, float* y, int64_t y_stride, const float* x, int64_t x_stride,
              const void* w, DType w_dtype, size_t w_row_bytes, const float* bias, int64_t m,
              int64_t n, int64_t k, ComputeType compute) {
  const WeightPart part{w, w_dtype, w_row_bytes, bias, n};
  return matmul_parts(cache, y, y_stride, x, x_stride, WeightParts(&part, 1), m, k, compute);
}

Status matmul_parts(MatmulCache& cache, float* y, int64_t y_stride, const float* x,
                    int64_t x_stride, WeightParts parts, int64_t m, int64_t k,
                    ComputeType compute) {
  if (parts.empty() || parts.size() > kMaxWeightParts) return Status::kInvalidArgument;
  int64_t col = 0;
  bool one_dtype = true;
  for (const WeightPart& p : parts) {
    float* y_part = y != nullptr ? y + col : nullptr;
    if (Status s = op_args::matmul(y_part, y_stride - col, x, x_stride, p.w, p.dtype, p.row_bytes,
                                   m, p.n, k, compute);
        s != Status::kOk) {
      return s;
    }
    col += p.n;
    one_dtype = one_dtype && p.dtype == parts[0].dtype;
  }
  if (m == 0 || col == 0) return Status::kOk;
  if (k == 0) {
    col = 0;
    for (const WeightPart& p : parts) {
      fill_bias(y + col, y_stride, p.bias, m, p.n);
      col += p.n;
    }
    return Status::kOk;
  }
  MatmulCache::Impl& c = cache.impl();
  // The decode kernels take all parts in one call (a part of one dtype each
  // otherwise); the GEMM paths one weight at a time.
  if (!one_dtype) {
    col = 0;
    for (const WeightPart& p : parts) {
      if (Status s = matmul_parts(cache, y + col, y_stride, x, x_stride, WeightParts(&p, 1), m, k,
                                  compute);
          s != Status::kOk) {
        return s;
      }
      col += p.n;
    }
    return Status::kOk;
  }
  const DType w_dtype = parts[0].dtype;
  if (compute == ComputeType::kInt8) {
    // The integer path reads the quantized formats but Q8_K; others multiply in bf16.
    if (matmul_int8_ok(w_dtype)) return run_matmul_int8(c, y, y_stride, x, x_stride, parts, m, k);
    compute = ComputeType::kBF16;
  }
  if (compute == ComputeType::kBF16 && matmul_bf16_dot_ok(w_dtype, m)) {
    return run_matmul_bf16_dot(c, y, y_stride, x, x_stride, parts, m, k);
  }
  const bool bf16_in_f32 = compute == ComputeType::kBF16 && !native_bf16_products();
  if ((compute == ComputeType::kF32 || bf16_in_f32) && matmul_f32_dot_ok(m)) {
    return run_matmul_f32_dot(c, y, y_stride, x, x_stride, parts, m, k, bf16_in_f32);
  }
  col = 0;
  for (const WeightPart& p : parts) {
    if (Status s = matmul_gemm(c, y + col, y_stride, x, x_stride, p, m, k, compute);
        s != Status::kOk) {
      return s;
    }
    col += p.n;
  }
  return Status::kOk;
}

}  // namespace strata::cpu
