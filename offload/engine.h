// make_engine: the Engine (src/generate/engine.h) that runs blocks of
// sequences through the forward pass with the paged KV cache, in the order
// of the zig-zag block schedule (offload/schedule.h). Today every tensor is
// resident: the compute device is the CPU, weights are read in place from
// the model's mapping and the KV cache lives in RAM, so the schedule's
// loads and stores are empty and running it is the plain zig-zag loop.
#pragma once

#include <memory>

#include "generate/engine.h"

namespace strata {

class Model;

// The engine for `model` (which must outlive it). Throws Error for options
// it cannot run (compute dtype other than f32/bf16, kv dtype other than
// f32/f16/bf16, non-positive batch sizes or page size) and for models whose
// shape the forward cannot run.
std::unique_ptr<Engine> make_engine(const Model& model, const EngineOptions& options);

// The KV dtype that goes with a compute dtype: f32 for f32 compute; f16 for
// bf16 compute (same bytes as bf16 but 3 more mantissa bits, so the cache
// adds 2^-11 relative error instead of 2^-9, well below the bf16 rounding
// of the matmul operands; K and V of the supported families stay far
// inside f16's range of 65504).
DType default_kv_dtype(DType compute_dtype);

// The KV budget used when EngineOptions::kv_budget_bytes is 0: half of the
// RAM available now (MemAvailable), at least 256 MiB. Storage is taken from
// it only as sequences grow.
uint64_t default_kv_budget_bytes();

}  // namespace strata
