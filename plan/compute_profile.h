// Measuring the engine's compute for one model on this machine
// (policy/engine_compute.h), for the cost model of a run on the CPU device:
// the engine's own forward (model/forward.h) runs one transformer layer,
// the embeddings and the head on a CpuBackend with the run's threads, with
// the model's layer-0 and global matrices as the engine holds them (in
// place in the model's mapping, or random matrices of the requantized
// dtype a weight pack would hold: offload/pack.h's pack_dtype), KV pages of
// the run's KV dtype from a page pool, and micro-batches built as the
// engine builds them:
//   decode  g = 1, 2, 4, ..., 128 sequences, 1 new token after 15 cached
//           (16 keys), and 8 sequences at up to 1024 keys for the slope per
//           key;
//   prefill 1, 4, 16, 32, 64 sequences of 16 tokens, and one sequence of
//           up to 512 tokens for the part that grows with its square;
//   head    the embeddings of g tokens and the logits of g rows.
// Decode and head points are measured twice: run back to back (in the
// caches) and each after the model's next layers ran (out of the caches, as
// in the engine, where the other layers run between two runs of one):
// layers 1..n of one sequence, n the fewest whose weights are twice the
// last-level cache (sysconf), or all the model has.
// Each point is the median of repeated runs after a warm-up (core/bench.h),
// the faster of two passes over the grid (a disturbance from elsewhere on
// the machine seldom lasts through both); a point below the one before it
// (more rows or tokens) is noise and takes that one's time. About 5 s for a
// small model, 30 s for a 3 GB one.
#pragma once

#include <string>

#include "core/bench.h"
#include "generate/engine.h"
#include "policy/engine_compute.h"

namespace strata {

class Model;

// What a measurement for `eo` (its compute, KV and weight dtypes and
// threads) of `model` is cached under: the host, the build (the commit and
// the executable's path and time), the model's shape and the dtypes of the
// matrices measured.
std::string engine_compute_key(const Model& model, const EngineOptions& eo);

// Measures; Error when the model's shape cannot run. With `stream_dir`
// (the offload directory) decode is also measured beside a layer's weight
// load from a file written there (EngineCompute::decode_layer_streamed_s).
EngineCompute measure_engine_compute(const Model& model, const EngineOptions& eo,
                                     const TimingPlan& timing, const std::string& stream_dir = "");

// The measurement for `eo`, from the cache (plan/machine_profile.h's
// profile_cache_dir, a JSON file per key) or measured once and cached; a
// cache file that cannot be read is measured again (a warning).
EngineCompute engine_compute_for(const Model& model, const EngineOptions& eo,
                                 const std::string& offload_dir);

}  // namespace strata
