// Opening a compute device by name (device.h).
#include "offload/device.h"

#include <charconv>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace strata {

int parse_device_name(const std::string& name) {
  if (name == "cpu") return -1;
  if (name == "cuda") return 0;
  if (name.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* b = name.data() + 5;
    const char* e = name.data() + name.size();
    const auto r = std::from_chars(b, e, index);
    if (r.ec == std::errc() && r.ptr == e && b != e && index >= 0) return index;
  }
  fail("device {} is not known; use cpu, cuda or cuda:N (N the GPU index)", name);
}

ComputeDevice open_device(const std::string& name, int threads) {
  const int index = parse_device_name(name);
  if (index >= 0) return open_cuda_device(index);
  ComputeDevice d;
  d.backend = std::make_unique<CpuBackend>(threads);
  d.host_allocator = make_host_allocator();
  return d;
}

}  // namespace strata
