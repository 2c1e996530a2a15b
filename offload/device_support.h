// What the offload engine runs on a compute device, in one place: the
// device's capabilities (memory of its own or host RAM; the backend's
// features, kernels/backend.h), the memory mode the engine uses there
// (offload/memory_mode.h), the settings it refuses (an Error naming the
// setting), and the placement shares a device pins, which the policy search
// is given so that it plans only what the engine runs.
//
// On any device: activations are never on disk. On a device with memory of
// its own: activations on the device; KV pages on the device (and disk) with
// attention there, or with CPU attention in RAM (and disk); int8 compute and
// a quantized KV cache only where the backend has them (the CPU's kernels).
#pragma once

#include <string>

#include "core/dtype.h"
#include "core/placement.h"
#include "offload/memory_mode.h"

namespace strata {

class Backend;

struct DeviceCaps {
  std::string name;            // "cuda:0", or the backend's name, for messages
  bool memory_is_host = true;  // the device computes on host RAM
  bool int8_matmul = true;
  bool quantized_kv = true;
  bool sparse_attention = true;
};

// By name ("cpu", "cuda", "cuda:N"), without opening the device (Error for
// a name that is not known); and of a backend the caller opened.
DeviceCaps device_caps(const std::string& device);
DeviceCaps device_caps(const Backend& backend);

MemoryMode memory_mode(const DeviceCaps& caps, bool cpu_attention);

// Error naming the setting for a compute or KV dtype the device does not run.
void check_dtypes(const DeviceCaps& caps, DType compute, DType kv);

// Error naming the flag for a sparse attention budget (tokens, 0: dense)
// below one page or on a device that has no sparse attention.
void check_sparse(const DeviceCaps& caps, int64_t budget, int64_t page_size);
// Error naming the setting for a placement (as folded for the device) the
// engine does not run there.
void check_placement(const DeviceCaps& caps, const Placement& placement, bool cpu_attention);

// The shares a placement (as folded for the device) must have to run on this
// device (nullopt: free).
PlacementPins runnable_pins(const DeviceCaps& caps, bool cpu_attention);

}  // namespace strata
