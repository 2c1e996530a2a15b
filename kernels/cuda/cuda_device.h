// The CUDA device as seen from code that must not include CUDA headers (the
// engine, the CLI, policy profiling): how many GPUs there are and a factory
// for the CUDA Backend. Always linked: in a build without the CUDA toolkit
// cuda_device_count() is 0 and make_cuda_backend() throws an Error saying so.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"

namespace strata {

// True when this build has the CUDA backend.
bool cuda_built();

// GPUs usable by this process; 0 without a GPU, without a driver, or in a
// build without CUDA. Never throws.
int cuda_device_count();

// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)"; throws Error for a device that
// does not exist.
std::string cuda_device_description(int device);

// A Backend computing on GPU `device` with one stream (CudaBackend). Throws
// Error when the device does not exist or cannot be initialised.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

}  // namespace strata
