// cuda_device.h in a build without the CUDA toolkit: no device, and a
// factory that says how to get one.
#include "core/error.h"
#include "kernels/cuda/cuda_device.h"

namespace strata {

bool cuda_built() {
  return false;
}

int cuda_device_count() {
  return 0;
}

std::string cuda_device_description(int device) {
  fail(
      "cuda backend: CUDA device {} is not available: this build has no CUDA backend; rebuild "
      "with the CUDA toolkit installed (-DSTRATA_CUDA=ON)",
      device);
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  fail(
      "cuda backend: CUDA device {} is not available: this build has no CUDA backend; rebuild "
      "with the CUDA toolkit installed (-DSTRATA_CUDA=ON)",
      device);
}

}  // namespace strata
