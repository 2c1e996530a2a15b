#include "kernels/cuda/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/launch_plan.h"

namespace strata {

namespace {

std::string describe_device(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("CUDA device {}", device);
  }
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", p.name, p.major, p.minor,
                     p.multiProcessorCount,
                     static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

void check_device_index(int device) {
  const int n = cuda_device_count();
  if (n == 0) {
    fail(
        "cuda backend: CUDA device {} is not available: no CUDA device was found on this "
        "machine (no GPU or no driver); run on the CPU (--device cpu)",
        device);
  }
  if (device < 0 || device >= n) {
    fail(
        "cuda backend: CUDA device {} does not exist ({} found); pick a device in [0, {}) or run "
        "on the CPU",
        device, n, n);
  }
}

}  // namespace

bool cuda_built() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error of ours
    return 0;
  }
  return n;
}

std::string cuda_device_description(int device) {
  check_device_index(device);
  return describe_device(device);
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  check_device_index(device);
  return std::make_unique<CudaBackend>(device);
}

CudaBackend::CudaBackend(int device) : device_(device) {
  try {
    init();
  } catch (...) {
    release();
    throw;
  }
  spdlog::info("compute device: {}", name_);
}

void CudaBackend::init() {
  check_device_index(device_);
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_cuda(cudaDeviceGetAttribute(&n_sm_, cudaDevAttrMultiProcessorCount, device_),
             "cudaDeviceGetAttribute");
  name_ = "cuda " + describe_device(device_);
  int pools = 0;
  check_cuda(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_),
             "cudaDeviceGetAttribute");
  stream_ordered_ = pools != 0;
  if (stream_ordered_) {
    // Freed memory stays in the pool for the next allocation instead of
    // going back to the driver at every synchronisation.
    cudaMemPool_t pool = nullptr;
    check_cuda(cudaDeviceGetDefaultMemPool(&pool, device_), "cudaDeviceGetDefaultMemPool");
    uint64_t keep = std::numeric_limits<uint64_t>::max();
    check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
               "cudaMemPoolSetAttribute");
  } else {
    spdlog::info(
        "cuda backend: the stream-ordered allocator is not supported on {}; using cudaMalloc "
        "(freeing memory waits for the device)",
        name_);
  }
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  if (cublasStatus_t s = cublasCreate(&cublas_); s != CUBLAS_STATUS_SUCCESS) {
    cublas_ = nullptr;
    fail("cuda backend: cublasCreate failed: {}", cublasGetStatusString(s));
  }
  if (cublasStatus_t s = cublasSetStream(cublas_, stream_); s != CUBLAS_STATUS_SUCCESS) {
    fail("cuda backend: cublasSetStream failed: {}", cublasGetStatusString(s));
  }
  void* dev = nullptr;
  void* host = nullptr;
  check_cuda(cudaMalloc(&dev, sizeof(cuda::DeviceError)), "cudaMalloc (error report)");
  error_dev_ = static_cast<cuda::DeviceError*>(dev);
  check_cuda(cudaMallocHost(&host, sizeof(cuda::DeviceError)), "cudaMallocHost (error report)");
  error_host_ = static_cast<cuda::DeviceError*>(host);
  check_cuda(cudaMemsetAsync(error_dev_, 0, sizeof(cuda::DeviceError), stream_), "cudaMemsetAsync");
}

CudaBackend::~CudaBackend() {
  release();
}

void CudaBackend::release() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  workspace_.reset();
  partials_.reset();
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  cudaGetLastError();
  if (error_dev_ != nullptr) cudaFree(error_dev_);
  if (error_host_ != nullptr) cudaFreeHost(error_host_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  error_dev_ = nullptr;
  error_host_ = nullptr;
  cublas_ = nullptr;
  stream_ = nullptr;
}

void CudaBackend::check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error
  fail("cuda backend: {} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

void CudaBackend::check_op(Status s, const char* op, const std::string& sizes) {
  if (s == Status::kOk) return;
  std::string detail(cuda::last_detail());
  if (s == Status::kBackendError && detail.empty()) {
    detail = cudaGetErrorString(cudaGetLastError());
  }
  cuda::clear_detail();
  fail("cuda backend: {} failed: {} ({}){}{}", op, status_name(s), sizes,
       detail.empty() ? "" : ": ", detail);
}

void CudaBackend::check_device_error() {
  check_cuda(cudaMemcpyAsync(error_host_, error_dev_, sizeof(cuda::DeviceError),
                             cudaMemcpyDeviceToHost, stream_),
             "cudaMemcpyAsync (error report)");
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  if (error_host_->code == 0) return;
  const cuda::DeviceError e = *error_host_;
  check_cuda(cudaMemsetAsync(error_dev_, 0, sizeof(cuda::DeviceError), stream_), "cudaMemsetAsync");
  fail("cuda backend: {}; the batch passed to the op is malformed", cuda::describe(e));
}

void CudaBackend::reserve(DeviceBuffer& buf, size_t bytes) {
  if (buf.size() >= bytes) return;
  buf = alloc(std::max(bytes, buf.size() + buf.size() / 2));
}

// ---- memory ----

void* CudaBackend::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t e =
      stream_ordered_ ? cudaMallocAsync(&p, bytes, stream_) : cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail(
        "cuda backend: could not allocate {} bytes of device memory ({}; {} of {} bytes free); "
        "lower the batch size or --gpu-mem",
        bytes, cudaGetErrorString(e), free_b, total_b);
  }
  return p;
}

void CudaBackend::deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  const cudaError_t e = stream_ordered_ ? cudaFreeAsync(p, stream_) : cudaFree(p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    spdlog::warn("cuda backend: freeing device memory failed ({}); {} bytes are lost",
                 cudaGetErrorString(e), bytes);
  }
}

void CudaBackend::copy_to_device(void* dst, const void* src_host, size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_),
             "copy_to_device");
  // From pageable memory the call returns once the source is staged; from
  // pinned memory the DMA reads it later, so wait before handing it back.
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, src_host) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (attr.type == cudaMemoryTypeHost || attr.type == cudaMemoryTypeManaged) {
    check_cuda(cudaStreamSynchronize(stream_), "copy_to_device (synchronize)");
  }
}

void CudaBackend::copy_to_host(void* dst_host, const void* src, size_t bytes) {
  if (bytes > 0) {
    check_cuda(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_),
               "copy_to_host");
  }
  synchronize();
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
}

void CudaBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemsetAsync(dst, 0, bytes, stream_), "fill_zero");
}

void CudaBackend::synchronize() {
  check_cuda(cudaStreamSynchronize(stream_), "synchronize (a queued kernel or copy)");
  check_device_error();
}

// ---- ops ----

void CudaBackend::matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                         const MatrixView& w, const float* bias, int64_t m, DType compute) {
  const auto sizes = [&] {
    return fmt::format("m={} n={} k={} w={} compute={}", m, w.rows, w.cols, dtype_name(w.dtype),
                       dtype_name(compute));
  };
  cuda::MatmulPlan plan;
  check_op(cuda::plan_matmul(w.dtype, compute, m, w.rows, w.cols, &plan), "matmul", sizes());
  reserve(workspace_, plan.workspace_bytes());
  check_op(cuda::matmul(cublas_, workspace_.data(), workspace_.size(), y, y_stride, x, x_stride,
                        w.data, w.dtype, w.row_bytes, bias, m, w.rows, w.cols, compute, stream_),
           "matmul", sizes());
}

void CudaBackend::rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                           const float* w, float eps, int64_t n_rows, int64_t d) {
  check_op(cuda::rms_norm(y, y_stride, x, x_stride, w, eps, n_rows, d, stream_), "rms_norm",
           fmt::format("rows={} d={}", n_rows, d));
}

void CudaBackend::layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                             const float* w, const float* b, float eps, int64_t n_rows, int64_t d) {
  check_op(cuda::layer_norm(y, y_stride, x, x_stride, w, b, eps, n_rows, d, stream_), "layer_norm",
           fmt::format("rows={} d={}", n_rows, d));
}

void CudaBackend::rope(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
                       int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
                       const float* inv_freq, int64_t rot_dim, RopePairs pairs) {
  check_op(cuda::rope(q, q_stride, n_head, k, k_stride, n_kv_head, head_dim, pos, n_tokens,
                      inv_freq, rot_dim, pairs, error_dev_, stream_),
           "rope",
           fmt::format("tokens={} heads={}/{} head_dim={} rot_dim={}", n_tokens, n_head, n_kv_head,
                       head_dim, rot_dim));
}

void CudaBackend::activation(ActFn f, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                             int64_t n_rows, int64_t d) {
  check_op(cuda::activation(f, y, y_stride, x, x_stride, n_rows, d, stream_), "activation",
           fmt::format("rows={} d={}", n_rows, d));
}

void CudaBackend::swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride,
                         const float* up, int64_t up_stride, int64_t n_rows, int64_t d) {
  check_op(cuda::swiglu(y, y_stride, gate, gate_stride, up, up_stride, n_rows, d, stream_),
           "swiglu", fmt::format("rows={} d={}", n_rows, d));
}

void CudaBackend::add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
                      int64_t b_stride, int64_t n_rows, int64_t d) {
  check_op(cuda::add(y, y_stride, a, a_stride, b, b_stride, n_rows, d, stream_), "add",
           fmt::format("rows={} d={}", n_rows, d));
}

void CudaBackend::embedding(float* y, int64_t y_stride, const MatrixView& table, const int32_t* ids,
                            int64_t n_ids) {
  check_op(cuda::embedding(y, y_stride, table.data, table.dtype, table.row_bytes, table.rows,
                           table.cols, ids, n_ids, error_dev_, stream_),
           "embedding",
           fmt::format("ids={} table=[{}, {}] {}", n_ids, table.rows, table.cols,
                       dtype_name(table.dtype)));
}

void CudaBackend::gather_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                              const int32_t* rows, int64_t n_rows, int64_t d) {
  check_op(cuda::gather_rows(y, y_stride, x, x_stride, rows, n_rows, d, error_dev_, stream_),
           "gather_rows", fmt::format("rows={} d={}", n_rows, d));
}

namespace {

// Quantized KV pages (--compress-kv) are stored and read by the CPU kernels
// only (kernels/cpu/attention_quant.h); the GPU refuses them up front.
void refuse_quantized_kv(const KvLayer& kv, const char* op) {
  if (!is_quantized(kv.dtype)) return;
  fail(
      "cuda backend: {} over a KV cache stored as {} is not supported on the GPU; keep the KV "
      "cache in f16 (no --compress-kv) or let the CPU hold it and run attention",
      op, dtype_name(kv.dtype));
}

}  // namespace

void CudaBackend::kv_append(const KvLayer& kv, const float* k, int64_t k_stride, const float* v,
                            int64_t v_stride, const int64_t* slots, int64_t n_tokens,
                            const int32_t* touched, const int32_t* n_filled, int64_t n_touched) {
  refuse_quantized_kv(kv, "kv_append");
  const auto sizes = [&] {
    return fmt::format("tokens={} pages={} kv_heads={} head_dim={} {}", n_tokens, kv.n_pages,
                       kv.n_kv_head, kv.head_dim, dtype_name(kv.dtype));
  };
  check_op(
      cuda::kv_append(kv.k_pages, kv.v_pages, kv.n_pages, kv.dtype, kv.page_size, kv.n_kv_head,
                      kv.head_dim, k, k_stride, v, v_stride, slots, n_tokens, error_dev_, stream_),
      "kv_append", sizes());
  if (n_touched == 0) return;
  check_op(cuda::page_key_minmax(kv.k_min, kv.k_max, const_cast<const void* const*>(kv.k_pages),
                                 kv.n_pages, kv.dtype, kv.page_size, kv.n_kv_head, kv.head_dim,
                                 touched, n_filled, n_touched, error_dev_, stream_),
           "page_key_minmax", fmt::format("pages={} of {}", n_touched, kv.n_pages));
}

void CudaBackend::key_minmax(const KvLayer& kv, const int32_t* pages, const int32_t* n_filled,
                             int64_t n) {
  refuse_quantized_kv(kv, "key_minmax");
  if (n == 0) return;
  check_op(cuda::page_key_minmax(kv.k_min, kv.k_max, const_cast<const void* const*>(kv.k_pages),
                                 kv.n_pages, kv.dtype, kv.page_size, kv.n_kv_head, kv.head_dim,
                                 pages, n_filled, n, error_dev_, stream_),
           "page_key_minmax", fmt::format("pages={} of {}", n, kv.n_pages));
}

void CudaBackend::attention(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                            int64_t n_head, const KvLayer& kv, const AttentionSeqs& seqs,
                            float scale) {
  refuse_quantized_kv(kv, "attention");
  const cuda::AttentionPlan plan =
      cuda::plan_attention(seqs.n_seq, n_head, kv.n_kv_head, kv.head_dim, n_sm_);
  reserve(partials_, plan.partial_bytes);
  check_op(cuda::attention(out, out_stride, q, q_stride, n_head, kv, seqs, scale, plan,
                           partials_.as<float>(), error_dev_, stream_),
           "attention",
           fmt::format("seqs={} heads={}/{} head_dim={} pages={} {}", seqs.n_seq, n_head,
                       kv.n_kv_head, kv.head_dim, kv.n_pages, dtype_name(kv.dtype)));
}

void CudaBackend::select_pages(const float*, int64_t, int64_t, const KvLayer&, const AttentionSeqs&,
                               int64_t, bool, const int32_t*, int32_t*) {
  fail("{}: sparse attention (select_pages) is not built for CUDA yet", name());
}

}  // namespace strata
