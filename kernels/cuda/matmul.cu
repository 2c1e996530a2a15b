// Matrix product of a linear layer on the GPU, y[m, n] = x[m, k] . W[n, k]^T
// (+ bias), along the path plan_matmul picks (launch_plan.h): cuBLAS GemmEx
// straight on f16/bf16/f32 weights (x rounded to the operand dtype into the
// workspace first), cuBLAS on weight panels converted or dequantized into the
// workspace one after the other (stream order reuses the panel), or the fused
// dequantize kernel for few rows. Accumulation is f32 everywhere; the f32
// path asks cuBLAS for pedantic f32 (no TF32). Row-major y = x . W^T is the
// column-major product y^T = W^T-as-stored . x^T: op(A) = T on W, op(B) = N
// on x, ldc = y_stride.
#include <algorithm>
#include <climits>
#include <initializer_list>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dispatch.h"

namespace strata::cuda {

namespace {

cudaDataType_t cuda_type(DType t) {
  return t == DType::kF16 ? CUDA_R_16F : (t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F);
}

// y[cols, rows] (column-major view) = A^T . B: A [k, n_cols] with lda, B [k, m] with ldb.
Status gemm(cublasHandle_t handle, DType operand, int64_t n, int64_t m, int64_t k, const void* a,
            int64_t lda, const void* b, int64_t ldb, float* y, int64_t ldc) {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cublasComputeType_t compute =
      operand == DType::kF32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
  const cudaDataType_t t = cuda_type(operand);
  const cublasStatus_t s = cublasGemmEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &alpha, a, t, static_cast<int>(lda), b, t, static_cast<int>(ldb), &beta,
      y, CUDA_R_32F, static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    note_detail(std::string("cublasGemmEx: ") + cublasGetStatusString(s));
    return Status::kBackendError;
  }
  return Status::kOk;
}

bool fits_int(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

}  // namespace

Status matmul(cublasHandle_t handle, void* workspace, size_t workspace_bytes, float* y,
              int64_t y_stride, const float* x, int64_t x_stride, const void* w, DType w_dtype,
              size_t w_row_bytes, const float* bias, int64_t m, int64_t n, int64_t k, DType compute,
              cudaStream_t stream) {
  MatmulPlan plan;
  if (Status s = plan_matmul(w_dtype, compute, m, n, k, &plan); s != Status::kOk) return s;
  if (m == 0 || n == 0) return Status::kOk;
  if (y == nullptr || y_stride < n) return Status::kInvalidArgument;
  const size_t w_align = row_align(w_dtype);
  if (k > 0 &&
      (x == nullptr || w == nullptr || x_stride < k || w_row_bytes < row_bytes(w_dtype, k) ||
       w_row_bytes % w_align != 0 || reinterpret_cast<uintptr_t>(w) % w_align != 0)) {
    return Status::kInvalidArgument;
  }
  if (k == 0) {  // the empty sum: y = bias or 0
    if (cudaMemset2DAsync(y, static_cast<size_t>(y_stride) * 4, 0, static_cast<size_t>(n) * 4,
                          static_cast<size_t>(m), stream) != cudaSuccess) {
      return Status::kBackendError;
    }
    return bias != nullptr ? add_bias(y, y_stride, bias, m, n, stream) : Status::kOk;
  }
  if (plan.path == MatmulPath::kGemv) {
    return gemv_dequant(y, y_stride, x, x_stride, w, w_dtype, w_row_bytes, bias, m, n, k, compute,
                        stream);
  }
  const int64_t w_ld = static_cast<int64_t>(w_row_bytes / w_align);
  if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(x_stride) || !fits_int(y_stride) ||
      !fits_int(w_ld)) {
    note_unsupported("matmul size above 2^31",
                     std::max<int64_t>({m, n, k, x_stride, y_stride, w_ld}),
                     "sizes and strides below 2^31");
    return Status::kUnsupported;
  }
  if (workspace_bytes < plan.workspace_bytes() ||
      (plan.workspace_bytes() > 0 &&
       (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlign != 0))) {
    return Status::kInvalidArgument;
  }
  if (cublasStatus_t s = cublasSetStream(handle, stream); s != CUBLAS_STATUS_SUCCESS) {
    note_detail(std::string("cublasSetStream: ") + cublasGetStatusString(s));
    return Status::kBackendError;
  }

  char* ws = static_cast<char*>(workspace);
  const void* xo = x;
  int64_t ldx = x_stride;
  if (plan.convert_x) {
    if (Status s = convert_rows(ws, plan.operand, k, x, DType::kF32,
                                static_cast<size_t>(x_stride) * 4, m, k, stream);
        s != Status::kOk) {
      return s;
    }
    xo = ws;
    ldx = k;
  }
  if (plan.path == MatmulPath::kGemm) {
    if (Status s = gemm(handle, plan.operand, n, m, k, w, w_ld, xo, ldx, y, y_stride);
        s != Status::kOk) {
      return s;
    }
  } else {
    char* panel = ws + plan.x_bytes;
    const char* wb = static_cast<const char*>(w);
    for (int64_t n0 = 0; n0 < n; n0 += plan.panel_rows) {
      const int64_t pn = std::min(plan.panel_rows, n - n0);
      if (Status s =
              convert_rows(panel, plan.operand, k, wb + static_cast<size_t>(n0) * w_row_bytes,
                           w_dtype, w_row_bytes, pn, k, stream);
          s != Status::kOk) {
        return s;
      }
      if (Status s = gemm(handle, plan.operand, pn, m, k, panel, k, xo, ldx, y + n0, y_stride);
          s != Status::kOk) {
        return s;
      }
    }
  }
  if (bias != nullptr) return add_bias(y, y_stride, bias, m, n, stream);
  return launch_status();
}

}  // namespace strata::cuda
