// make_engine: the Engine (src/generate/engine.h) that runs blocks of
// sequences through the forward pass with the paged KV cache, in the order
// of the zig-zag block schedule (offload/schedule.h), with weights, KV
// pages and activations where EngineOptions' placement puts them, on the
// compute device EngineOptions::device names (offload/device.h). On the CPU
// the gpu and cpu tiers are RAM (used in place) and disk streams; on a GPU,
// weights on the gpu tier are copied to the device once, the cpu and disk
// shares are streamed into device staging per column, KV pages live in
// device memory or on disk. The engine itself is offload/offload_engine.h.
// With everything resident the schedule's loads and stores are empty and
// running it is the plain zig-zag loop.
#pragma once

#include <memory>
#include <string>

#include "generate/engine.h"

namespace strata {

class Model;

// The engine for `model` (which must outlive it). Throws Error for options
// it cannot run (an unknown device; compute dtype other than f32/bf16/int8,
// int8 or a quantized KV cache on a GPU; kv dtype other than
// f32/f16/bf16 or a q4/q8 format whose group divides head_dim, weight
// compression without an offload directory, non-positive batch sizes or page
// size) and for models whose shape the forward cannot run. With
// options.weight_dtype the matrices come from the requantized weight pack in
// options.offload_dir (offload/pack_weights.h), built there when missing;
// so is the pack of a placement that puts weights on disk. Budgets too
// small for the placement (and, with plan_prompt_tokens / plan_new_tokens,
// for a full block) are an Error here, before any work.
std::unique_ptr<Engine> make_engine(const Model& model, const EngineOptions& options);

struct ComputeDevice;
// The same on a device the caller opened (options.device is then only
// checked, not opened).
std::unique_ptr<Engine> make_engine(const Model& model, const EngineOptions& options,
                                    ComputeDevice device);

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

// RAM available now (MemAvailable of /proc/meminfo), 0 when unknown: the
// default budget of the cpu tier.
uint64_t available_ram_bytes();

}  // namespace strata
