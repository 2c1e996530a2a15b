// Appends new key/value rows to the paged KV cache on the GPU: one thread per
// element of the k and v rows (grid-stride), converting f32 to the page dtype
// with the integer rounding of numeric.h (bit for bit kv_append_ref). A slot
// outside the pool or on a null page leaves its row unwritten and is
// reported in the DeviceError.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dispatch.h"

namespace strata::cuda {

namespace {

template <typename S>
__global__ void kv_append_kernel(void* const* k_pages, void* const* v_pages, int64_t n_pages,
                                 int64_t page_size, int64_t row, const float* k, int64_t k_stride,
                                 const float* v, int64_t v_stride, const int64_t* slots,
                                 int64_t n_tokens, DeviceError* err) {
  const int64_t total = n_tokens * 2 * row;
  const int64_t n_slots = n_pages * page_size;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t t = idx / (2 * row);
    const int64_t rem = idx - t * 2 * row;
    const bool is_v = rem >= row;
    const int64_t e = is_v ? rem - row : rem;
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= n_slots) {
      if (e == 0) raise_error(err, DeviceErrorCode::kSlot, t, slot, n_slots);
      continue;
    }
    void* page = (is_v ? v_pages : k_pages)[slot / page_size];
    if (page == nullptr) {
      if (e == 0) raise_error(err, DeviceErrorCode::kSlot, t, slot, n_slots);
      continue;
    }
    const float src = is_v ? v[t * v_stride + e] : k[t * k_stride + e];
    static_cast<typename S::type*>(page)[(slot % page_size) * row + e] = S::from_f32(src);
  }
}

}  // namespace

Status kv_append(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                 int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                 int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                 int64_t n_tokens, DeviceError* err, cudaStream_t stream) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    note_unsupported("kv dtype", dtype_name(dtype), "f32, f16, bf16");
    return Status::kUnsupported;
  }
  if (n_pages < 0 || page_size < 1 || n_kv_head < 1 || head_dim < 1 || n_tokens < 0) {
    return Status::kInvalidArgument;
  }
  if (n_pages > 0 && (k_pages == nullptr || v_pages == nullptr)) return Status::kInvalidArgument;
  if (n_tokens == 0) return Status::kOk;
  const int64_t row = n_kv_head * head_dim;
  if (k == nullptr || v == nullptr || slots == nullptr || k_stride < row || v_stride < row) {
    return Status::kInvalidArgument;
  }
  const unsigned blocks = static_cast<unsigned>(grid_blocks(n_tokens * 2 * row, kBlockThreads));
  STRATA_DISPATCH_STORE(dtype, S, {
    kv_append_kernel<S><<<blocks, kBlockThreads, 0, stream>>>(
        k_pages, v_pages, n_pages, page_size, row, k, k_stride, v, v_stride, slots, n_tokens, err);
  })
  return launch_status();
}

}  // namespace strata::cuda
