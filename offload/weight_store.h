// The weights of a run as the placement puts them (offload/placement.h):
// the views the forward reads (model/layer_weights.h) for each column of the
// schedule (embed, layer j, head), and for the disk share of a column the
// one read from the weight pack that brings it into a staging buffer.
//
// The RAM share is used in place: the model's mapping, or the mapped pack
// when the pack requantizes the matrices (offload/pack_weights.h). The disk
// share of a unit is the tail of its matrices in pack order, read with
// O_DIRECT from weights.bin (unit tails start at kPackTensorAlign, and the
// file is padded, so the read is whole pages); a column's views then point
// into the buffer it was read into. Norms and biases are resident, f32.
//
// Invariant: a view never points at the in-place copy of a tensor placed on
// disk (those pointers are null until the column's staged buffer is given),
// so a run with weights on disk computes from the bytes it read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/layer_weights.h"
#include "offload/pack.h"
#include "offload/placement.h"

namespace strata {

class Model;
class PackMatrices;

class WeightStore {
 public:
  // `pack` (the current pack of the model, with the placement's options) is
  // needed when a unit has a disk share; `ram_source` (may be null) maps the
  // pack's matrices for the RAM share when the pack requantizes them.
  // Throws Error when the pack's layout does not match the placement.
  WeightStore(const Model& model, Backend& backend, const WeightPlacement& placement,
              const Pack* pack, const PackMatrices* ram_source);
  ~WeightStore();

  int64_t n_columns() const { return n_layer_ + 2; }
  // The pack unit whose disk share column c reads, or null when the column
  // reads nothing (column 0: "embed"; 1..n_layer: "blk.j"; the head:
  // "output", or "embed" when the embeddings are tied).
  const UnitPlacement* disk_unit(int64_t column) const;
  struct Read {
    uint64_t offset = 0;  // in weights.bin, a multiple of kDiskAlign
    size_t bytes = 0;     // a multiple of kDiskAlign, inside the file
  };
  Read disk_read(int64_t column) const;
  // Bytes of one staging buffer: the largest column read.
  size_t staging_bytes() const { return staging_bytes_; }

  // Views of column c's weights, its disk share at `staged` (the buffer
  // disk_read(c) was read into; null when the column reads nothing).
  LayerWeights layer(int64_t j, const std::byte* staged) const;
  GlobalWeights embed(const std::byte* staged) const;
  GlobalWeights head(const std::byte* staged) const;

  // Bytes held in RAM for the whole run: matrices used in place, and the
  // f32 vectors.
  uint64_t resident_matrix_bytes() const { return resident_matrix_bytes_; }
  uint64_t vector_bytes() const;

 private:
  // A matrix on disk: which view field it fills, and where it sits in the
  // column's staged buffer.
  struct Patch {
    std::string name;      // canonical tensor name
    uint64_t rel = 0;      // offset from the start of the staged read
  };
  struct Column {
    const UnitPlacement* unit = nullptr;  // null: nothing on disk
    Read read;
    std::vector<Patch> patches;
  };

  WeightPlacement placement_;
  int64_t n_layer_ = 0;
  bool tied_ = false;
  std::unique_ptr<ResidentWeights> base_;  // every view, disk matrices nulled below
  std::vector<LayerWeights> layers_;
  GlobalWeights global_;
  std::vector<Column> columns_;  // [n_columns]
  size_t staging_bytes_ = 0;
  uint64_t resident_matrix_bytes_ = 0;
};

}  // namespace strata
