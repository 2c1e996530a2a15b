// Fused dequantize + matrix product for few rows of x (decode): y[m, n] =
// x[m, k] . W[n, k]^T (+ bias) with W in a quantized format, read once at its
// stored size. One warp per W row (output column), kGemvWarps warps a block,
// grid-stride over columns; lane l takes the quantized blocks l, l + 32, ...
// of the row, widens each a chunk of 16 values at a time (the scale and
// minimum once per block; the values bit for bit dequantize_row_ref's) and
// multiplies them into the partial sums of every row of x; the partial sums
// are reduced across the warp at the end. compute bf16 rounds both operands
// to bf16 first (as matmul_ref does); products are accumulated in f32. The
// GGUF-only formats (gguf_numeric.h) the same way, a super-block per lane.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dispatch.h"

namespace strata::cuda {

namespace {

constexpr int kChunk = 16;

__device__ __forceinline__ float round_bf16(float v) {
  return bf16_to_f32(f32_to_bf16(v));
}

// acc[i] += x[i, k0 .. k0 + n) . w[0 .. n) for the m rows of x (bf16: both
// operands rounded to bf16 first).
template <int N>
__device__ __forceinline__ void accumulate(float (&acc)[kGemvMaxM], const float* x,
                                           int64_t x_stride, int64_t m, int64_t k0,
                                           const float (&w)[N], bool bf16) {
#pragma unroll
  for (int i = 0; i < kGemvMaxM; ++i) {
    if (i < m) {
      const float* xr = x + i * x_stride + k0;
      float a = acc[i];
#pragma unroll
      for (int c = 0; c < N; ++c) {
        const float xv = bf16 ? round_bf16(xr[c]) : xr[c];
        a = fmaf(xv, w[c], a);
      }
      acc[i] = a;
    }
  }
}

// The warp's partial sums of column col reduced; lane 0 writes y[i, col] (+ bias).
__device__ __forceinline__ void store_column(const float (&acc)[kGemvMaxM], float* y,
                                             int64_t y_stride, int64_t m, int64_t col,
                                             const float* bias, int lane) {
#pragma unroll
  for (int i = 0; i < kGemvMaxM; ++i) {
    if (i < m) {
      const float s = warp_sum(acc[i]);
      if (lane == 0) y[i * y_stride + col] = bias != nullptr ? s + bias[col] : s;
    }
  }
}

// Values e0 .. e0 + kChunk of block b (e0 a multiple of kChunk).
template <DType T>
__device__ __forceinline__ void dequant_chunk(const block_of_t<T>& b, float d, float m, int e0,
                                              float (&w)[kChunk]) {
  using B = block_of_t<T>;
  constexpr int G = B::kGroup;
  constexpr QuantKind kind = quant_kind(T);
#pragma unroll
  for (int c = 0; c < kChunk; ++c) {
    const int e = e0 + c;
    if constexpr (kind == QuantKind::kQ8S) {
      w[c] = mul_rn(static_cast<float>(b.qs[e]), d);
    } else if constexpr (kind == QuantKind::kQ8A) {
      w[c] = add_rn(mul_rn(static_cast<float>(b.qs[e]), d), m);
    } else {
      const int q = e < G / 2 ? (b.qs[e] & 0x0f) : (b.qs[e - G / 2] >> 4);
      if constexpr (kind == QuantKind::kQ4S) {
        w[c] = mul_rn(static_cast<float>(q - 8), d);
      } else {
        w[c] = add_rn(mul_rn(static_cast<float>(q), d), m);
      }
    }
  }
}

template <DType T>
__global__ void gemv_dequant_kernel(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                    const char* w, size_t w_row_bytes, const float* bias, int64_t m,
                                    int64_t n, int64_t k, bool bf16) {
  using B = block_of_t<T>;
  constexpr int G = B::kGroup;
  constexpr QuantKind kind = quant_kind(T);
  constexpr bool kAsym = kind == QuantKind::kQ8A || kind == QuantKind::kQ4A;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t n_blocks = k / G;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp; col < n;
       col += static_cast<int64_t>(gridDim.x) * kGemvWarps) {
    const B* row = reinterpret_cast<const B*>(w + static_cast<size_t>(col) * w_row_bytes);
    float acc[kGemvMaxM];
#pragma unroll
    for (int i = 0; i < kGemvMaxM; ++i) acc[i] = 0.0f;
    for (int64_t ib = lane; ib < n_blocks; ib += 32) {
      const B& blk = row[ib];
      const float d = f16_to_f32(blk.d);
      float mn = 0.0f;
      if constexpr (kAsym) mn = f16_to_f32(blk.m);
#pragma unroll 1
      for (int e0 = 0; e0 < G; e0 += kChunk) {
        float wv[kChunk];
        dequant_chunk<T>(blk, d, mn, e0, wv);
        if (bf16) {
#pragma unroll
          for (int c = 0; c < kChunk; ++c) wv[c] = round_bf16(wv[c]);
        }
        accumulate(acc, x, x_stride, m, ib * G + e0, wv, bf16);
      }
    }
    store_column(acc, y, y_stride, m, col, bias, lane);
  }
}

// The GGUF-only formats: lane l takes the blocks l, l + 32, ... of the row
// (256 values for the K-quants), 16 values at a time through gguf_chunk (the
// scales decoded per chunk; the values bit for bit dequantize_row_ref's).
template <DType T>
__global__ void gemv_gguf_kernel(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                 const char* w, size_t w_row_bytes, const float* bias, int64_t m,
                                 int64_t n, int64_t k, bool bf16) {
  constexpr DTypeInfo kInfo = dtype_info_constexpr(T);
  constexpr int G = kInfo.block_elems;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t n_blocks = k / G;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp; col < n;
       col += static_cast<int64_t>(gridDim.x) * kGemvWarps) {
    const auto* row = reinterpret_cast<const uint8_t*>(w + static_cast<size_t>(col) * w_row_bytes);
    float acc[kGemvMaxM];
#pragma unroll
    for (int i = 0; i < kGemvMaxM; ++i) acc[i] = 0.0f;
    for (int64_t ib = lane; ib < n_blocks; ib += 32) {
      const uint8_t* blk = row + ib * kInfo.block_bytes;
#pragma unroll 1
      for (int c = 0; c < G / kGgufChunk; ++c) {
        float wv[kGgufChunk];
        gguf_chunk<T>(blk, c, wv);
        if (bf16) {
#pragma unroll
          for (int e = 0; e < kGgufChunk; ++e) wv[e] = round_bf16(wv[e]);
        }
        accumulate(acc, x, x_stride, m, ib * G + c * kGgufChunk, wv, bf16);
      }
    }
    store_column(acc, y, y_stride, m, col, bias, lane);
  }
}

}  // namespace

Status gemv_dequant(float* y, int64_t y_stride, const float* x, int64_t x_stride, const void* w,
                    DType w_dtype, size_t w_row_bytes, const float* bias, int64_t m, int64_t n,
                    int64_t k, DType compute, cudaStream_t stream) {
  if (compute != DType::kF32 && compute != DType::kBF16) {
    note_unsupported("compute dtype", dtype_name(compute), "f32, bf16");
    return Status::kUnsupported;
  }
  if (!is_quantized(w_dtype)) {
    note_unsupported("gemv weight dtype", dtype_name(w_dtype), "quantized formats");
    return Status::kUnsupported;
  }
  if (m < 0 || m > kGemvMaxM || n < 0 || k < 0 || !row_elems_ok(w_dtype, k)) {
    return Status::kInvalidArgument;
  }
  if (m == 0 || n == 0) return Status::kOk;
  if (y == nullptr || y_stride < n) return Status::kInvalidArgument;
  if (k > 0 &&
      (x == nullptr || w == nullptr || x_stride < k || w_row_bytes < row_bytes(w_dtype, k) ||
       w_row_bytes % 2 != 0 || reinterpret_cast<uintptr_t>(w) % 2 != 0)) {
    return Status::kInvalidArgument;
  }
  const unsigned blocks = static_cast<unsigned>(grid_blocks(n, kGemvWarps));
  const char* wb = static_cast<const char*>(w);
  const bool bf16 = compute == DType::kBF16;
  if (dtype_info(w_dtype).dequant_only) {
    STRATA_DISPATCH_GGUF(w_dtype, T, {
      gemv_gguf_kernel<T><<<blocks, kGemvWarps * 32, 0, stream>>>(y, y_stride, x, x_stride, wb,
                                                                  w_row_bytes, bias, m, n, k, bf16);
    })
    return launch_status();
  }
  STRATA_DISPATCH_QUANT(w_dtype, T, {
    gemv_dequant_kernel<T><<<blocks, kGemvWarps * 32, 0, stream>>>(
        y, y_stride, x, x_stride, wb, w_row_bytes, bias, m, n, k, bf16);
  })
  return launch_status();
}

}  // namespace strata::cuda
