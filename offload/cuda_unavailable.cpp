// offload/device.h's CUDA part in a build without the CUDA toolkit.
#include "core/error.h"
#include "offload/device.h"

namespace strata {

ComputeDevice open_cuda_device(int index) {
  fail(
      "device cuda:{} is not available: this build has no CUDA backend; rebuild with the CUDA "
      "toolkit installed (-DSTRATA_CUDA=ON), or run on the CPU (--device cpu)",
      index);
}

}  // namespace strata
