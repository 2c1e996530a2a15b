// What runs on a device (device_support.h).
#include "offload/device_support.h"

#include "core/error.h"
#include "kernels/backend.h"
#include "offload/device.h"

namespace strata {

DeviceCaps device_caps(const std::string& device) {
  DeviceCaps c;
  c.name = device;
  if (parse_device_name(device) >= 0) {
    // CudaBackend: device memory, neither int8 products, quantized KV nor
    // sparse attention (its supports() says the same).
    c.memory_is_host = c.int8_matmul = c.quantized_kv = c.sparse_attention = false;
  }
  return c;
}

DeviceCaps device_caps(const Backend& backend) {
  DeviceCaps c;
  c.name = backend.name();
  c.memory_is_host = backend.memory_is_host();
  c.int8_matmul = backend.supports(BackendFeature::kInt8Matmul);
  c.quantized_kv = backend.supports(BackendFeature::kQuantizedKv);
  c.sparse_attention = backend.supports(BackendFeature::kSparseAttention);
  return c;
}

MemoryMode memory_mode(const DeviceCaps& caps, bool cpu_attention) {
  if (caps.memory_is_host) return MemoryMode::kHostMemory;
  return cpu_attention ? MemoryMode::kCpuAttention : MemoryMode::kDeviceMemory;
}

void check_dtypes(const DeviceCaps& caps, DType compute, DType kv) {
  if (compute == DType::kI8 && !caps.int8_matmul) {
    fail("compute dtype int8 runs on the CPU only; on {} use f32 or bf16", caps.name);
  }
  if (is_quantized(kv) && !caps.quantized_kv) {
    fail(
        "a KV cache stored as {} is read by the CPU kernels only; on {} keep it in f16 (no "
        "--compress-kv)",
        dtype_name(kv), caps.name);
  }
}

void check_sparse(const DeviceCaps& caps, int64_t budget, int64_t page_size) {
  if (budget == 0) return;
  if (budget < page_size) {
    fail("--sparse-budget {}: below one KV page of {} tokens; use {} or more (0: dense)", budget,
         page_size, page_size);
  }
  if (!caps.sparse_attention) {
    fail("--sparse-budget {}: sparse attention runs on the CPU only; on {} use 0 (dense)", budget,
         caps.name);
  }
}

void check_placement(const DeviceCaps& caps, const Placement& f, bool cpu_attention) {
  if (f.disk(DataKind::kAct) > 1e-12) {
    fail(
        "placement puts {:.4g}% of the activations on disk, which this engine does not support; "
        "keep them in RAM (--percent ... ACT_GPU ACT_CPU summing to 100)",
        100 * f.disk(DataKind::kAct));
  }
  if (caps.memory_is_host) return;
  // On a device with memory of its own, activations and the KV pages the
  // ops read are in device memory; the off-device home of KV pages is the
  // disk (read into device staging per layer).
  if (f[Share::kActCpu] > 1e-12) {
    fail(
        "placement keeps {:.4g}% of the activations in CPU RAM; on {} this engine keeps them in "
        "device memory: use ACT_GPU 100 ACT_CPU 0 (--percent W_GPU W_CPU KV_GPU KV_CPU 100 0)",
        100 * f[Share::kActCpu], caps.name);
  }
  if (cpu_attention && f[Share::kKvGpu] > 1e-12) {
    fail(
        "--cpu-attention runs attention on the CPU over a KV cache in RAM and on disk, but the "
        "placement keeps {:.4g}% of it on {}: use KV_GPU 0 (--percent W_GPU W_CPU 0 KV_CPU "
        "ACT_GPU ACT_CPU)",
        100 * f[Share::kKvGpu], caps.name);
  }
  if (!cpu_attention && f[Share::kKvCpu] > 1e-12) {
    fail(
        "placement keeps {:.4g}% of the KV cache in CPU RAM; on {} attention then runs on the "
        "CPU: add --cpu-attention (with KV_GPU 0), or use KV_CPU 0 to keep KV pages in device "
        "memory and on disk",
        100 * f[Share::kKvCpu], caps.name);
  }
}

PlacementPins runnable_pins(const DeviceCaps& caps, bool cpu_attention) {
  PlacementPins pins;
  if (caps.memory_is_host) {
    // Activations in RAM (the gpu share folds into cpu there), never on disk.
    pins[static_cast<size_t>(Share::kActCpu)] = 1;
    return pins;
  }
  pins[static_cast<size_t>(Share::kActGpu)] = 1;
  pins[static_cast<size_t>(Share::kActCpu)] = 0;
  pins[static_cast<size_t>(cpu_attention ? Share::kKvGpu : Share::kKvCpu)] = 0;
  return pins;
}

}  // namespace strata
