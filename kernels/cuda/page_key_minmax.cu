// Per-page key min/max on the GPU (the page scores of sparse attention): one
// thread per (listed page, element of a key row), grid-stride; each folds the
// page's first n_filled keys with the comparisons of page_key_minmax_ref
// (std::min / std::max order, a NaN element makes that min and max NaN), so
// the results are equal bit for bit. A bad page id or fill count leaves that
// page's min/max unwritten and is reported in the DeviceError.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dispatch.h"

namespace strata::cuda {

namespace {

template <typename S>
__global__ void page_key_minmax_kernel(float* k_min, float* k_max, const void* const* k_pages,
                                       int64_t n_pages, int64_t page_size, int64_t row,
                                       const int32_t* page_ids, const int32_t* n_filled,
                                       int64_t n_list, DeviceError* err) {
  const int64_t total = n_list * row;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t i = idx / row;
    const int64_t e = idx - i * row;
    const int32_t id = page_ids[i];
    const int32_t nf = n_filled[i];
    if (id < 0 || id >= n_pages || k_pages[id] == nullptr) {
      if (e == 0) raise_error(err, DeviceErrorCode::kPageId, i, id, n_pages);
      continue;
    }
    if (nf < 1 || nf > page_size) {
      if (e == 0) raise_error(err, DeviceErrorCode::kFill, i, nf, page_size);
      continue;
    }
    const auto* page = static_cast<const typename S::type*>(k_pages[id]);
    float mn = S::load(page, e);
    float mx = mn;
    bool nan = mn != mn;
    for (int64_t t = 1; t < nf; ++t) {
      const float x = S::load(page, t * row + e);
      nan = nan || x != x;
      mn = x < mn ? x : mn;
      mx = mx < x ? x : mx;
    }
    const float qnan = bits_to_f32(0x7fc00000u);
    k_min[static_cast<int64_t>(id) * row + e] = nan ? qnan : mn;
    k_max[static_cast<int64_t>(id) * row + e] = nan ? qnan : mx;
  }
}

}  // namespace

Status page_key_minmax(float* k_min, float* k_max, const void* const* k_pages, int64_t n_pages,
                       DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                       const int32_t* page_ids, const int32_t* n_filled, int64_t n_list,
                       DeviceError* err, cudaStream_t stream) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    note_unsupported("kv dtype", dtype_name(dtype), "f32, f16, bf16");
    return Status::kUnsupported;
  }
  if (n_pages < 0 || page_size < 1 || n_kv_head < 1 || head_dim < 1 || n_list < 0) {
    return Status::kInvalidArgument;
  }
  if (n_pages > 0 && k_pages == nullptr) return Status::kInvalidArgument;
  if (n_list == 0) return Status::kOk;
  if (k_min == nullptr || k_max == nullptr || page_ids == nullptr || n_filled == nullptr) {
    return Status::kInvalidArgument;
  }
  const int64_t row = n_kv_head * head_dim;
  const unsigned blocks = static_cast<unsigned>(grid_blocks(n_list * row, kBlockThreads));
  STRATA_DISPATCH_STORE(dtype, S, {
    page_key_minmax_kernel<S><<<blocks, kBlockThreads, 0, stream>>>(
        k_min, k_max, k_pages, n_pages, page_size, row, page_ids, n_filled, n_list, err);
  })
  return launch_status();
}

}  // namespace strata::cuda
