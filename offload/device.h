// The compute device an engine runs on, with what the offload engine needs
// beside its Backend: the memory of the cpu tier (pinned for a GPU, so that
// host->device copies are DMA from it and disk reads land in it), the
// host<->device copy queues (offload/transfer.h: DeviceCopies; null where the
// backend's own copies serve), and the device memory a gpu tier may use by
// default.
//
//   "cpu"            CpuBackend: the gpu and cpu tiers are both RAM
//   "cuda", "cuda:N" CudaBackend on GPU N (0 by default) with CudaDeviceCopies
//                    and pinned host memory; an Error in a build without CUDA
//                    or where the GPU does not exist
// A device whose memory is not host memory can also be made by the caller
// (tests run the discrete-device paths on kernels/cpu/separate_memory_backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "offload/tier_pool.h"
#include "offload/transfer.h"

namespace strata {

struct ComputeDevice {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<DeviceCopies> copies;  // may be null
  // Memory of the cpu tier's buffers (weights kept in RAM, staging).
  std::unique_ptr<TierAllocator> host_allocator;
  // The gpu tier's default budget when memory is not host memory (free
  // device memory less a margin for the runtime's own needs); 0 otherwise.
  uint64_t default_device_bytes = 0;
};

// Checks a device name ("cpu", "cuda", "cuda:N"); Error naming it otherwise.
// Returns -1 for the CPU, else the GPU index.
int parse_device_name(const std::string& name);

// Opens the device `name` names; `threads` for the CPU's OpenMP ops. Throws
// Error for a name it does not know and a device that cannot be opened.
ComputeDevice open_device(const std::string& name, int threads);

// The CUDA part of open_device (offload/cuda_memory.cpp; in a build without
// CUDA an Error saying so).
ComputeDevice open_cuda_device(int index);

}  // namespace strata
