// Placement: where each piece of a run's data lives, decided once from the
// policy's fractions (FlexGen's six numbers: weights, KV cache and
// activations on the gpu and cpu tiers, disk holding the rest) before
// anything runs. Plain data that the engine, the schedule generator and the
// dry run read; it moves nothing.
//
// Weights. The unit of placement is a weight-pack unit (offload/pack.h: the
// embeddings, the head, one unit per layer) in pack order. A unit's
// one-dimensional tensors (norms, biases: under 0.1% of its bytes) are always
// resident, converted to f32 once; its matrices split into a head on gpu, a
// middle on cpu and a tail on disk, cut at tensor boundaries, so the disk
// share of a unit is one contiguous read of the pack (PackUnit::tail_bytes).
// The cuts follow the fractions by error diffusion over the units in pack
// order: each unit's disk cut is the one that brings the bytes placed on
// disk so far closest to the disk fraction x the bytes seen so far, so every
// prefix of the model, and the model as a whole, holds the disk fraction
// within half a tensor; the gpu head is cut the same way within what stays
// in RAM (on the CPU device gpu folds into cpu, so RAM is exact too).
//
// KV cache. Each page of a sequence has a home from its index p in the
// sequence's page table: page p lives in RAM (gpu or cpu) when
// floor((p+1) r) > floor(p r) for the RAM fraction r = gpu + cpu, else on
// disk; among RAM pages, on gpu when floor((p+1) g) > floor(p g) too. So of
// any sequence's first n pages exactly floor(n r) live in RAM (the disk pages
// are spread evenly, and every micro-batch holds the fractions, whatever its
// lengths), at most floor(n g) of them on gpu. A disk page fills in RAM and
// is written once full: at most one partial page per sequence is in RAM
// beyond the fraction.
//
// On a compute device whose memory is host RAM (the CPU device) the gpu and
// cpu tiers are the same RAM: the gpu fractions fold into cpu, nothing is
// copied from one to the other, and disk is the only tier that streams.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/placement.h"
#include "kv/page_pool.h"
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

// The home of page `page_index` of a sequence (rule above); the placement
// as folded for the device (Placement::folded).
Tier kv_page_home(const Placement& p, int64_t page_index);
PageTier to_page_tier(Tier t);

}  // namespace strata
