// The offload engine: the implementation of the Engine interface
// (generate/engine.h) that runs blocks of sequences through the forward pass
// with the paged KV cache, in the order of the zig-zag block schedule
// (offload/schedule.h), with weights, KV pages and activations where
// EngineOptions' placement puts them, on the compute device
// EngineOptions::device names (offload/device.h). On the CPU the gpu and cpu
// tiers are RAM (used in place) and disk streams; on a GPU, weights on the
// gpu tier are copied to the device once, the cpu and disk shares are
// streamed into device staging per column, KV pages live in device memory
// or on disk, or in RAM with CPU attention.
//
// Its parts, each in a file of its own:
//   device_support.h  what runs on the device, the memory mode (one choice)
//   tier_budgets.h    the tiers' budgets and the checks against them
//   block_budget.h    the memory of a block, one derivation
//   weight_store.h    the weights' views and placement per column
//   weight_staging.h  streamed columns, double-buffered, checked on first read
//   kv/kv_cache.h     sequences and page tables; kv_staging.h the disk pages
//   cpu_attention.h   the CPU-attention pipeline beside a device
//   block_state.h     the block's sequences and micro-batch groups
//   executor.h        the load and store queues and the compute spans
// and the engine's loop over the schedule is its step verbs: begin_step,
// store, load, compute_embed / compute_layer / compute_head, end_step.
//
// Budgets are checked before any work: the weights and their staging when
// the engine is made (and a whole block of the planned size when
// EngineOptions has one), each block's memory before the block's first
// compute. A budget too small is an Error naming the tier, the bytes needed
// and what they are for. With everything in RAM the schedule has no
// transfers and the run is the plain zig-zag loop over in-place weights and
// RAM pages; a placement changes where bytes are read from, never the
// arithmetic.
#pragma once

#include <cstdint>
#include <memory>

#include "generate/engine.h"
#include "offload/engine_options.h"

namespace strata {

class Model;
struct ComputeDevice;

// The engine for `model` (which must outlive it). Throws Error for options
// it cannot run (an unknown device; compute dtype other than f32/bf16/int8,
// int8 or a quantized KV cache where the device has no such kernels; kv
// dtype other than f32/f16/bf16 or a q4/q8 format whose group divides
// head_dim, weight compression without an offload directory, non-positive
// batch sizes or page size, a placement the device does not run:
// offload/device_support.h) and for models whose shape the forward cannot
// run. With options.weight_dtype the matrices come from the requantized
// weight pack in options.offload_dir (offload/pack_weights.h), built there
// when missing; so is the pack of a placement that puts weights on disk.
// Budgets too small for the placement (and, with plan_prompt_tokens /
// plan_new_tokens, for a full block) are an Error here, before any work.
std::unique_ptr<Engine> make_engine(const Model& model, const EngineOptions& options);
// The same on a device the caller opened (options.device is then only
// checked, not opened).
std::unique_ptr<Engine> make_engine(const Model& model, const EngineOptions& options,
                                    ComputeDevice device);

}  // namespace strata
