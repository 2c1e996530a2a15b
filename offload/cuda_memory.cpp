#include "offload/cuda_memory.h"

#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_device.h"
#include "offload/device.h"

namespace strata {

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  fail("cuda: {} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// Aligned blocks carved out of allocations made by `raw_alloc` with enough
// slack for the alignment; remembers each block's base (and how it was
// made) for deallocate. Thread-safe.
class AlignedBlocks {
 public:
  struct Base {
    void* ptr;
    bool pinned;
  };
  void add(void* aligned, Base base) {
    std::lock_guard<std::mutex> lock(mu_);
    bases_[aligned] = base;
  }
  Base take(void* aligned) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = bases_.find(aligned);
    STRATA_ASSERT_MSG(it != bases_.end(), "block {} was not allocated here", aligned);
    const Base b = it->second;
    bases_.erase(it);
    return b;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, Base> bases_;
};

void* align_pointer(void* p, size_t alignment) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<void*>((u + alignment - 1) / alignment * alignment);
}

class CudaDeviceAllocator final : public TierAllocator {
 public:
  explicit CudaDeviceAllocator(int device) : device_(device) {}

  void* allocate(size_t bytes, size_t alignment) override {
    if (cudaSetDevice(device_) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    // cudaMalloc aligns to at least 256 bytes; more takes slack.
    const size_t slack = alignment > 256 ? alignment : 0;
    void* base = nullptr;
    if (cudaMalloc(&base, (bytes == 0 ? 1 : bytes) + slack) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    void* p = align_pointer(base, alignment);
    blocks_.add(p, {base, false});
    return p;
  }
  void deallocate(void* p, size_t) override {
    if (p == nullptr) return;
    cudaFree(blocks_.take(p).ptr);
  }
  std::string_view name() const override { return "device"; }

 private:
  int device_;
  AlignedBlocks blocks_;
};

class PinnedHostAllocator final : public TierAllocator {
 public:
  void* allocate(size_t bytes, size_t alignment) override {
    // cudaHostAlloc returns page-aligned memory; more takes slack.
    const size_t slack = alignment > 4096 ? alignment : 0;
    const size_t n = (bytes == 0 ? 1 : bytes) + slack;
    void* base = nullptr;
    bool pinned = false;
    if (!pageable_only_.load()) {
      const cudaError_t e = cudaHostAlloc(&base, n, cudaHostAllocPortable);
      if (e == cudaSuccess) {
        pinned = true;
      } else {
        cudaGetLastError();
        base = nullptr;
        if (!warned_.exchange(true)) {
          spdlog::warn(
              "pinned host memory unavailable ({}), falling back to pageable memory for the cpu "
              "tier: host/device copies will be staged and slower",
              cudaGetErrorString(e));
        }
        // Without a driver no later call can succeed either.
        if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) pageable_only_ = true;
      }
    }
    if (!pinned) {
      const size_t a =
          alignment < alignof(std::max_align_t) ? alignof(std::max_align_t) : alignment;
      base = std::aligned_alloc(a, (n + a - 1) / a * a);
      if (base == nullptr) return nullptr;
    }
    void* p = align_pointer(base, alignment);
    blocks_.add(p, {base, pinned});
    return p;
  }
  void deallocate(void* p, size_t) override {
    if (p == nullptr) return;
    const AlignedBlocks::Base b = blocks_.take(p);
    if (b.pinned) {
      cudaFreeHost(b.ptr);
    } else {
      std::free(b.ptr);
    }
  }
  std::string_view name() const override { return "pinned"; }

 private:
  AlignedBlocks blocks_;
  std::atomic<bool> warned_{false};
  std::atomic<bool> pageable_only_{false};
};

}  // namespace

std::unique_ptr<TierAllocator> make_cuda_device_allocator(int device) {
  return std::make_unique<CudaDeviceAllocator>(device);
}

std::unique_ptr<TierAllocator> make_pinned_host_allocator() {
  return std::make_unique<PinnedHostAllocator>();
}

std::unique_ptr<TierPool> make_cuda_gpu_pool(int device, uint64_t budget) {
  return std::make_unique<TierPool>(Tier::kGpu, budget, make_cuda_device_allocator(device));
}

std::unique_ptr<TierPool> make_pinned_cpu_pool(uint64_t budget) {
  return std::make_unique<TierPool>(Tier::kCpu, budget, make_pinned_host_allocator());
}

// ---- CudaStream ----

CudaStream::CudaStream(int device) : device_(device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);  // returns at once; work still completes
}

CudaStream::CudaStream(CudaStream&& o) noexcept
    : device_(o.device_), stream_(std::exchange(o.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& o) noexcept {
  if (this != &o) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    device_ = o.device_;
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

void CudaStream::wait(const CudaEvent& e) const {
  check(cudaStreamWaitEvent(stream_, e.get(), 0), "cudaStreamWaitEvent");
}

void CudaStream::synchronize() const {
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

// ---- CudaEvent ----

CudaEvent::CudaEvent() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  event_ = e;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

CudaEvent::CudaEvent(CudaEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

void CudaEvent::record(CUstream_st* stream) {
  check(cudaEventRecord(event_, stream), "cudaEventRecord");
}

bool CudaEvent::done() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(e, "cudaEventQuery");
  return true;
}

void CudaEvent::synchronize() const {
  check(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

// ---- CudaCopyQueues ----

CudaCopyQueues::CudaCopyQueues(int device) : h2d_(device), d2h_(device) {}

CudaEvent CudaCopyQueues::copy(const CudaStream& s, void* dst, const void* src, size_t bytes,
                               bool to_device, const CudaEvent* after) {
  const void* host = to_device ? src : dst;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, host) != cudaSuccess) cudaGetLastError();
  if (attr.type != cudaMemoryTypeHost && !warned_pageable_.exchange(true)) {
    spdlog::warn(
        "cuda copy {} pageable host memory: the driver stages it and the copy does not overlap; "
        "allocate host buffers from the pinned allocator",
        to_device ? "from" : "to");
  }
  if (after != nullptr) s.wait(*after);
  if (bytes > 0) {
    check(cudaMemcpyAsync(dst, src, bytes,
                          to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s.get()),
          to_device ? "cudaMemcpyAsync (load)" : "cudaMemcpyAsync (store)");
  }
  CudaEvent done;
  done.record(s);
  (to_device ? bytes_loaded_ : bytes_stored_) += bytes;
  return done;
}

CudaEvent CudaCopyQueues::load(void* dst_device, const void* src_host, size_t bytes,
                               const CudaEvent* after) {
  return copy(h2d_, dst_device, src_host, bytes, true, after);
}

CudaEvent CudaCopyQueues::store(void* dst_host, const void* src_device, size_t bytes,
                                const CudaEvent* after) {
  return copy(d2h_, dst_host, src_device, bytes, false, after);
}

void CudaCopyQueues::synchronize() {
  h2d_.synchronize();
  d2h_.synchronize();
}

// ---- the CUDA compute device ----

namespace {

// DeviceCopies (offload/transfer.h) on CudaCopyQueues, ordered after the
// compute stream: each copy waits on the device for the compute queued
// before the call that started it (the kernels still reading a buffer a load
// overwrites, or writing one a store reads), and never for compute queued
// later, so a load issued one column ahead overlaps the current column.
class CudaDeviceCopies final : public DeviceCopies {
 public:
  CudaDeviceCopies(int device, CUstream_st* compute)
      : device_(device), queues_(device), compute_(compute) {}

  std::function<void()> to_device(void* dst, const void* src_host, size_t bytes) override {
    CudaEvent after;
    after.record(compute_);
    auto done = std::make_shared<CudaEvent>(queues_.load(dst, src_host, bytes, &after));
    return [done] { done->synchronize(); };
  }
  std::function<void()> to_device_later(void* dst, const void* src_host, size_t bytes) override {
    auto after = std::make_shared<CudaEvent>();
    after->record(compute_);
    return [this, after, dst, src_host, bytes] {
      check(cudaSetDevice(device_), "cudaSetDevice");
      queues_.load(dst, src_host, bytes, after.get()).synchronize();
    };
  }
  std::function<void()> to_host(void* dst_host, const void* src, size_t bytes) override {
    CudaEvent after;
    after.record(compute_);
    auto done = std::make_shared<CudaEvent>(queues_.store(dst_host, src, bytes, &after));
    return [done] { done->synchronize(); };
  }

 private:
  int device_;
  CudaCopyQueues queues_;
  CUstream_st* compute_;
};

}  // namespace

ComputeDevice open_cuda_device(int index) {
  ComputeDevice d;
  d.backend = make_cuda_backend(index);
  auto* cuda = static_cast<CudaBackend*>(d.backend.get());
  d.copies = std::make_unique<CudaDeviceCopies>(index, cuda->stream());
  d.host_allocator = make_pinned_host_allocator();
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  // Leave room for the runtime, cuBLAS and the stream-ordered pool's slack.
  const uint64_t margin = std::max<uint64_t>(uint64_t{512} << 20, total_b / 20);
  d.default_device_bytes = free_b > margin ? free_b - margin : 0;
  return d;
}

}  // namespace strata
