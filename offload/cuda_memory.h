// The CUDA pieces of the tiers and of movement between them, usable without
// including CUDA headers (the stream and event handles are the runtime's
// opaque pointer types, declared here):
//   - memory behind the TierPool interface (offload/tier_pool.h): device
//     memory for the gpu tier, pinned host memory for the cpu tier (falling
//     back to pageable memory, logged once, when the driver cannot pin);
//   - RAII owners of CUDA streams and events;
//   - CudaCopyQueues: host->device and device->host copies, each direction
//     on a stream of its own so that loads, stores and compute overlap, and
//     ordered against other streams by events only (no device-wide
//     synchronisation).
// Byte budgets stay the pools' business: these allocators only hand out
// memory. Built only with the CUDA toolkit (target strata_offload_cuda).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "offload/tier_pool.h"

struct CUstream_st;
struct CUevent_st;

namespace strata {

// Device memory of GPU `device` (cudaMalloc), any power-of-two alignment.
// allocate() returns nullptr when the device has no more memory. Freeing
// waits for the device (cudaFree), so a run allocates its blocks up front.
std::unique_ptr<TierAllocator> make_cuda_device_allocator(int device);

// Page-locked host memory (cudaHostAlloc, portable to every device), any
// power-of-two alignment. When pinning fails (no driver, or the system's
// limit on locked memory) it logs why once and hands out pageable memory
// instead; copies from it are then staged by the driver and slower.
std::unique_ptr<TierAllocator> make_pinned_host_allocator();

// The gpu tier's pool on `device` and a cpu tier's pool of pinned memory,
// each with its byte budget.
std::unique_ptr<TierPool> make_cuda_gpu_pool(int device, uint64_t budget);
std::unique_ptr<TierPool> make_pinned_cpu_pool(uint64_t budget);

class CudaEvent;

// A non-blocking CUDA stream of one device; destroyed (after its work
// finishes) with the object.
class CudaStream {
 public:
  // Throws Error when the stream cannot be created.
  explicit CudaStream(int device);
  ~CudaStream();
  CudaStream(CudaStream&& o) noexcept;
  CudaStream& operator=(CudaStream&& o) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  CUstream_st* get() const { return stream_; }
  int device() const { return device_; }
  // Work queued on this stream from now on starts after `e` completes.
  void wait(const CudaEvent& e) const;
  // Blocks until everything queued so far has run; throws Error on a failure.
  void synchronize() const;

 private:
  int device_ = 0;
  CUstream_st* stream_ = nullptr;
};

// A CUDA event (no timing): marks a point of a stream that other streams and
// the host can wait for.
class CudaEvent {
 public:
  // Throws Error when the event cannot be created.
  CudaEvent();
  ~CudaEvent();
  CudaEvent(CudaEvent&& o) noexcept;
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  CUevent_st* get() const { return event_; }
  // Marks the current end of `stream`.
  void record(CUstream_st* stream);
  void record(const CudaStream& s) { record(s.get()); }
  // True once the work before the mark has run (also for a never-recorded event).
  bool done() const;
  void synchronize() const;

 private:
  CUevent_st* event_ = nullptr;
};

// Copies between host memory and device memory of one device, loads on one
// stream and stores on another. Each call queues one copy after an optional
// event (e.g. "compute finished with this buffer") and returns the event
// that completes with it. Copies on one queue run in call order. A host
// buffer must stay valid and unchanged (loads) or unread (stores) until the
// returned event completes.
class CudaCopyQueues {
 public:
  explicit CudaCopyQueues(int device);

  CudaEvent load(void* dst_device, const void* src_host, size_t bytes,
                 const CudaEvent* after = nullptr);
  CudaEvent store(void* dst_host, const void* src_device, size_t bytes,
                  const CudaEvent* after = nullptr);
  // Waits for every queued copy.
  void synchronize();

  const CudaStream& load_stream() const { return h2d_; }
  const CudaStream& store_stream() const { return d2h_; }
  uint64_t bytes_loaded() const { return bytes_loaded_.load(); }
  uint64_t bytes_stored() const { return bytes_stored_.load(); }

 private:
  CudaEvent copy(const CudaStream& s, void* dst, const void* src, size_t bytes, bool to_device,
                 const CudaEvent* after);

  CudaStream h2d_;
  CudaStream d2h_;
  std::atomic<uint64_t> bytes_loaded_{0};
  std::atomic<uint64_t> bytes_stored_{0};
  std::atomic<bool> warned_pageable_{false};
};

}  // namespace strata
