// Weight placement: which bytes of each weight-pack unit live on each tier,
// decided once from the placement's weight shares (core/placement.h) before
// anything runs. Plain data that the engine and the weight store read; it
// moves nothing. (Where KV pages live is the KV cache's rule: kv/kv_cache.h.)
//
// The unit of placement is a weight-pack unit (offload/pack.h: the
// embeddings, the head, one unit per layer) in pack order. A unit's
// one-dimensional tensors (norms, biases: under 0.1% of its bytes) are always
// resident, converted to f32 once; its matrices split into a head on gpu, a
// middle on cpu and a tail on disk, cut at tensor boundaries, so the disk
// share of a unit is one contiguous read of the pack (PackUnit::tail_bytes).
// The cuts follow the shares by error diffusion over the units in pack
// order: each unit's disk cut is the one that brings the bytes placed on
// disk so far closest to the disk share x the bytes seen so far, so every
// prefix of the model, and the model as a whole, holds the disk share
// within half a tensor; the gpu head is cut the same way within what stays
// in RAM (on the CPU device gpu folds into cpu, so RAM is exact too).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/placement.h"
#include "offload/pack.h"
#include "offload/tier_pool.h"

namespace strata {

struct ModelDesc;

// One weight-pack unit: tensors [0, first_matrix) are vectors (resident),
// [first_matrix, first_cpu) gpu, [first_cpu, first_disk) cpu, [first_disk, n) disk.
struct UnitPlacement {
  std::string name;  // "embed", "output_norm", "output", "blk.N"
  int64_t layer = -1;
  size_t n_tensors = 0;
  size_t first_matrix = 0, first_cpu = 0, first_disk = 0;
  std::array<uint64_t, 3> matrix_bytes{};  // [gpu, cpu, disk] as the pack stores them
  uint64_t vector_bytes = 0;               // bytes of the vectors, resident as f32
  // Bytes of the disk share as one read from the pack: from tensor
  // first_disk to the end of the unit, alignment padding between tensors
  // included (PackUnit::tail_bytes(first_disk)); 0 when nothing is on disk.
  uint64_t disk_read_bytes = 0;

  bool on_disk() const { return first_disk < n_tensors; }
};

struct WeightPlacement {
  std::vector<UnitPlacement> units;  // pack order

  const UnitPlacement* find(const std::string& name) const;
  uint64_t bytes(Tier t) const;  // matrix bytes on tier t
  uint64_t vector_bytes() const;
  uint64_t largest_disk_read() const;  // the largest unit tail read at once
  bool any_on_disk() const;
};

// Places the matrices of `desc` as a pack built with `options` stores them.
// Throws Error when the placement breaks its invariant.
WeightPlacement place_weights(const ModelDesc& desc, const PackOptions& options,
                              const Placement& placement);

}  // namespace strata
