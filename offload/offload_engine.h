// The offload engine: the Engine (src/generate/engine.h) that runs blocks of
// sequences with the model spread over the tiers as EngineOptions' placement
// says, by walking the zig-zag block schedule (offload/schedule.h) with its
// transfers. It owns the pieces: the tiers' byte budgets (TierPool: RAM and
// disk; on the CPU device the gpu tier is RAM), the weights
// (offload/weight_store.h, the pack in offload_dir when weights live on
// disk), the KV cache (offload/kv_store.h), the forward, and the executor
// (offload/executor.h) that overlaps the transfers with compute.
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
