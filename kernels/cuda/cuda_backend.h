// The GPU as a compute device: Backend (kernels/backend.h) implemented with
// the launchers of kernels/cuda/ops.h on one CUDA stream. Every op and copy
// is queued on that stream, in call order; nothing waits for the device
// except synchronize() and copy_to_host() (and copy_to_device() from pinned
// memory, which waits so that the caller may reuse its buffer at once, as it
// may after a copy from pageable memory).
//
// Memory: device memory from the stream-ordered allocator
// (cudaMallocAsync/cudaFreeAsync on the stream, the device's default pool
// keeping freed memory for reuse; plain cudaMalloc where the device has no
// memory pools), 256-byte aligned; a DeviceBuffer may be dropped while ops
// that use it are still queued. Workspaces of matmul and attention are grown
// on demand and kept. The backend's device is made current when it is
// created; a thread that drives it must not switch devices in between.
//
// Errors. Arguments the host can see (sizes, strides, dtypes, head_dim) are
// checked before queuing: Error naming the op, the status, the sizes and the
// unsupported value. Indices that live on the device (token ids, rows,
// positions, slots, page ids, sequence layouts) are checked by the kernels
// into one device-side DeviceError; synchronize() (and so copy_to_host())
// reads it and throws Error with its description, then clears it. CUDA and
// cuBLAS failures throw Error naming the op and cudaGetErrorString. One host
// thread drives a CudaBackend at a time.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda/ops.h"

namespace strata {

class CudaBackend final : public Backend {
 public:
  // Throws Error when the device does not exist or cannot be set up.
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  int device() const { return device_; }
  int sm_count() const { return n_sm_; }
  // The stream every op and copy is queued on (for code that orders its own
  // streams against it with events).
  cudaStream_t stream() const { return stream_; }
  size_t workspace_bytes() const { return workspace_.size() + partials_.size(); }

  std::string name() const override { return name_; }
  bool supports(BackendFeature) const override { return false; }
  bool memory_is_host() const override { return false; }
  void copy_to_device(void* dst, const void* src_host, size_t bytes) override;
  void copy_to_host(void* dst_host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void synchronize() override;

  void matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const MatrixView& w,
              const float* bias, int64_t m, DType compute) override;
  void rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                float eps, int64_t n_rows, int64_t d) override;
  void layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                  const float* b, float eps, int64_t n_rows, int64_t d) override;
  void rope(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
            int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
            const float* inv_freq, int64_t rot_dim, RopePairs pairs) override;
  void activation(ActFn f, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                  int64_t n_rows, int64_t d) override;
  void swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride, const float* up,
              int64_t up_stride, int64_t n_rows, int64_t d) override;
  void add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
           int64_t b_stride, int64_t n_rows, int64_t d) override;
  void embedding(float* y, int64_t y_stride, const MatrixView& table, const int32_t* ids,
                 int64_t n_ids) override;
  void gather_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                   const int32_t* rows, int64_t n_rows, int64_t d) override;
  void kv_append(const KvLayer& kv, const float* k, int64_t k_stride, const float* v,
                 int64_t v_stride, const int64_t* slots, int64_t n_tokens, const int32_t* touched,
                 const int32_t* n_filled, int64_t n_touched) override;
  void key_minmax(const KvLayer& kv, const int32_t* pages, const int32_t* n_filled,
                  int64_t n) override;
  void attention(float* out, int64_t out_stride, const float* q, int64_t q_stride, int64_t n_head,
                 const KvLayer& kv, const AttentionSeqs& seqs, float scale) override;
  void select_pages(const float* q, int64_t q_stride, int64_t n_head, const KvLayer& kv,
                    const AttentionSeqs& seqs, int64_t budget_pages, bool keep_first,
                    const int32_t* sel_indptr, int32_t* sel_ids) override;

 protected:
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;

 private:
  void init();
  // Frees every handle held (idempotent); the constructor's clean-up on failure.
  void release();
  // Throws Error for a CUDA call that failed: "cuda backend: <what>: <error string>".
  void check_cuda(cudaError_t e, const char* what);
  // Throws Error for a launcher status other than kOk.
  void check_op(Status s, const char* op, const std::string& sizes);
  // Reads and clears the device-side error; throws Error when one was set.
  void check_device_error();
  // Grows buf to at least bytes (contents not kept).
  void reserve(DeviceBuffer& buf, size_t bytes);

  int device_ = 0;
  int n_sm_ = 1;
  bool stream_ordered_ = true;  // cudaMallocAsync available
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cuda::DeviceError* error_dev_ = nullptr;   // device
  cuda::DeviceError* error_host_ = nullptr;  // pinned host staging
  DeviceBuffer workspace_;                   // matmul
  DeviceBuffer partials_;                    // attention
};

}  // namespace strata
