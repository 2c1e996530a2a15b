// Row conversion on the GPU: rows of any weight dtype (f32, f16, bf16, every
// quantized format) to f32, f16 or bf16, element-wise (grid-stride). Each
// value is first the exact f32 value (dequant_value for quantized rows: bit
// for bit quant's dequantize_row_ref) and then rounded to nearest even by the
// same integer code as core/dtype.h. Used to round x for a 16-bit GEMM, to
// widen or dequantize weight panels, and as the dequantization op.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dispatch.h"

namespace strata::cuda {

namespace {

template <typename Out, typename Load>
__global__ void convert_rows_kernel(typename Out::type* y, int64_t y_stride, const char* x,
                                    size_t x_row_bytes, int64_t n_rows, int64_t n) {
  const Load load;
  const int64_t total = n_rows * n;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t r = idx / n;
    const int64_t c = idx - r * n;
    y[r * y_stride + c] = Out::from_f32(load(x + static_cast<size_t>(r) * x_row_bytes, c));
  }
}

}  // namespace

Status convert_rows(void* y, DType y_dtype, int64_t y_stride, const void* x, DType x_dtype,
                    size_t x_row_bytes, int64_t n_rows, int64_t n, cudaStream_t stream) {
  if (y_dtype != DType::kF32 && y_dtype != DType::kF16 && y_dtype != DType::kBF16) {
    note_unsupported("output dtype", dtype_name(y_dtype), "f32, f16, bf16");
    return Status::kUnsupported;
  }
  if (x_dtype != DType::kF32 && x_dtype != DType::kF16 && x_dtype != DType::kBF16 &&
      !is_quantized(x_dtype)) {
    note_unsupported("input dtype", dtype_name(x_dtype), "f32, f16, bf16, quantized");
    return Status::kUnsupported;
  }
  if (n_rows < 0 || n < 0 || !row_elems_ok(x_dtype, n)) return Status::kInvalidArgument;
  if (n_rows == 0 || n == 0) return Status::kOk;
  const size_t x_align = row_align(x_dtype);
  if (y == nullptr || x == nullptr || y_stride < n || x_row_bytes < row_bytes(x_dtype, n) ||
      x_row_bytes % x_align != 0 || reinterpret_cast<uintptr_t>(x) % x_align != 0 ||
      reinterpret_cast<uintptr_t>(y) % row_align(y_dtype) != 0) {
    return Status::kInvalidArgument;
  }
  const unsigned blocks = static_cast<unsigned>(grid_blocks(n_rows * n, kBlockThreads));
  const char* xb = static_cast<const char*>(x);
  STRATA_DISPATCH_STORE(y_dtype, Out, {STRATA_DISPATCH_LOAD(x_dtype, Load, {
                          convert_rows_kernel<Out, Load><<<blocks, kBlockThreads, 0, stream>>>(
                              static_cast<typename Out::type*>(y), y_stride, xb, x_row_bytes,
                              n_rows, n);
                        })})
  return launch_status();
}

}  // namespace strata::cuda
