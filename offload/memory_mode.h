// How the offload engine uses memory on a compute device, chosen once from
// the device's capabilities and the options (offload/device_support.h) and
// then read by the parts of the engine instead of flags tested everywhere:
//
//   kHostMemory     the device computes on host RAM (the CPU): the gpu and
//                   cpu tiers are the same RAM, used in place; only the disk
//                   streams (into RAM staging).
//   kDeviceMemory   a device with memory of its own (a GPU): weights of the
//                   gpu share, activations, the forward's scratch and the KV
//                   pages in device memory; the cpu and disk shares of the
//                   weights stream into device staging; KV pages homed on
//                   disk are read into device staging records (relayed
//                   through pinned host mirrors).
//   kCpuAttention   a device with memory of its own, with the KV cache in
//                   RAM (and on disk): each layer's q/k/v rows go down, the
//                   CPU appends K and V and attends, the output rows come
//                   back up (offload/cpu_attention.h).
#pragma once

#include <cstdint>

namespace strata {

enum class MemoryMode : uint8_t { kHostMemory, kDeviceMemory, kCpuAttention };

// KV pages and staging records are host memory in this mode.
inline bool kv_in_host_memory(MemoryMode m) {
  return m != MemoryMode::kDeviceMemory;
}

}  // namespace strata
