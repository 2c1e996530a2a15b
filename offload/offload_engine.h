// The offload engine: the Engine (src/generate/engine.h) that runs blocks of
// sequences with the model spread over the tiers as EngineOptions' placement
// says, by walking the zig-zag block schedule (offload/schedule.h) with its
// transfers, on one compute device (offload/device.h). It owns the pieces:
// the tiers' byte budgets (TierPool: RAM and disk, and device memory on a
// device with memory of its own; on the CPU device the gpu tier is RAM), the
// weights (offload/weight_store.h, the pack in offload_dir when weights live
// on disk), the KV cache (kv/kv_cache.h, its disk file offload/kv_file.h), the forward, and the executor
// (offload/executor.h) that overlaps the transfers with compute.
//
// On a device whose memory is not host memory (a GPU): streamed weight
// columns land in two device staging buffers (their disk tails through two
// pinned host buffers the disk I/O layer reads into), KV staging records are
// device memory with a pinned host mirror each that relays their disk reads
// and writes, activations and the forward's scratch are device memory, and
// the logits are copied back at the end of each step. With CPU attention
// the KV cache (pool, staging records) is host memory of a CpuBackend, and
// each layer's KV append and attention run there, on a queue of its own,
// between the two halves of the layer on the device (Forward::layer_qkv,
// layer_out), pipelined over the micro-batches of a layer column: the
// second half of micro-batch k is queued after the first half of k+1, and
// anything of another column (its transfers reuse buffers) waits for the
// column's last one. Loads into, and stores from, KV staging wait for the
// CPU attention that reads or writes it.
// Activations in RAM, and KV pages in RAM without CPU attention, are
// refused there with a message.
//
// Budgets are checked before any work: the weights and their staging when
// the engine is made (and a whole block of the planned size when
// EngineOptions has one), each block's KV cache, staging, activations and
// working memory before the block's first compute. A budget too small is an
// Error naming the tier, the bytes needed and what they are for.
//
// With everything in RAM the schedule has no transfers and the run is the
// plain zig-zag loop over in-place weights and RAM pages; a placement
// changes where bytes are read from, never the arithmetic.
#pragma once

#include <memory>

#include "generate/engine.h"

namespace strata {

class Model;

struct ComputeDevice;

// `options` as make_engine validated them (offload/engine.h), on `device`.
std::unique_ptr<Engine> make_offload_engine(const Model& model, const EngineOptions& options,
                                            ComputeDevice device);

}  // namespace strata
