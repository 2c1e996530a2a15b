// The weights of a run as the placement puts them (offload/weight_placement.h):
// the views the forward reads (model/layer_weights.h) for each column of the
// schedule (embed, layer j, head), and what a column must load before it
// computes.
//
// On a device whose memory is host memory (the CPU) the RAM share is used in
// place: the model's mapping, or the mapped pack when the pack requantizes
// the matrices (offload/pack_weights.h). The disk share of a unit is the
// tail of its matrices in pack order, read with O_DIRECT from weights.bin
// (unit tails start at kPackTensorAlign, and the file is padded, so the read
// is whole pages) into a staging buffer; a column's views then point there.
//
// On any other device (a GPU) the gpu share of each unit is copied into
// device memory once, here; the cpu share is copied once into host memory
// of the cpu tier (pinned on a GPU); and a column with a cpu or disk share
// is *streamed*: before it computes, its cpu matrices are copied from there
// and its disk tail is read (into host staging, then copied up) into a
// device staging buffer laid out as [cpu matrices][disk tail at disk_rel],
// and its views point there. Norms and biases are resident, f32, on the
// device.
//
// Invariant: a view never points at a copy of a tensor other than the one
// its placement says (the in-place copy of a tensor placed on disk, or host
// memory on a device whose memory is not host memory): those pointers are
// null until the column's staged buffer is given, so a run computes from the
// bytes it moved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/layer_weights.h"
#include "offload/pack.h"
#include "offload/weight_placement.h"
#include "offload/tier_pool.h"

namespace strata {

class Model;
class PackMatrices;

class WeightStore {
 public:
  // `pack` (the current pack of the model, with the placement's options) is
  // needed when a unit has a disk share; `ram_source` (may be null) maps the
  // pack's matrices for the RAM share when the pack requantizes them.
  // `host_pool`: the cpu tier, which holds the cpu share on a device whose
  // memory is not host memory (unused otherwise; may then be null). Throws
  // Error when the pack's layout does not match the placement, and as the
  // pools and the backend do when memory runs out.
  WeightStore(const Model& model, Backend& backend, const WeightPlacement& placement,
              const Pack* pack, const PackMatrices* ram_source, TierPool* host_pool = nullptr);
  ~WeightStore();

  int64_t n_columns() const { return n_layer_ + 2; }
  // The head is the token embedding: its column streams what column 0 does.
  bool tied() const { return tied_; }
  // The pack unit whose disk share column c reads, or null when the column
  // reads nothing (column 0: "embed"; 1..n_layer: "blk.j"; the head:
  // "output", or "embed" when the embeddings are tied).
  const UnitPlacement* disk_unit(int64_t column) const;
  struct Read {
    uint64_t offset = 0;  // in weights.bin, a multiple of kDiskAlign
    size_t bytes = 0;     // a multiple of kDiskAlign, inside the file
  };
  Read disk_read(int64_t column) const;
  // Bytes of one host staging buffer: the largest column read from disk.
  size_t staging_bytes() const { return staging_bytes_; }

  // ---- streaming into device memory (device memory not host memory) ----
  // True when column c loads anything before it computes: a disk share, or
  // on a device whose memory is not host memory a cpu share too.
  bool streams(int64_t column) const;
  // A matrix of the cpu share: its host copy, and where it goes in the
  // column's device staging buffer.
  struct HostPart {
    const std::byte* host = nullptr;
    size_t bytes = 0;
    uint64_t rel = 0;
  };
  const std::vector<HostPart>& host_parts(int64_t column) const;
  // Where the disk read goes in the device staging buffer.
  uint64_t disk_rel(int64_t column) const;
  // Bytes of one device staging buffer (0 on a device computing on host memory).
  size_t device_staging_bytes() const { return device_staging_bytes_; }
  // Bytes of device memory held for the whole run: the gpu share and the vectors.
  uint64_t device_bytes() const { return device_bytes_; }

  // Views of column c's weights, its streamed share at `staged` (on a device
  // computing on host memory the host buffer disk_read(c) was read into,
  // else the device staging buffer filled as above; null when the column
  // streams nothing).
  LayerWeights layer(int64_t j, const std::byte* staged) const;
  GlobalWeights embed(const std::byte* staged) const;
  GlobalWeights head(const std::byte* staged) const;

  // Bytes held in RAM for the whole run on a device computing on host
  // memory: matrices used in place, and the f32 vectors. (The cpu share's
  // host copies on other devices are PoolBlocks of host_pool.)
  uint64_t resident_matrix_bytes() const { return resident_matrix_bytes_; }
  uint64_t vector_bytes() const;

 private:
  // A matrix on disk: which view field it fills, and where it sits in the
  // column's staged read.
  struct Patch {
    std::string name;      // canonical tensor name
    uint64_t rel = 0;      // offset from the start of the staged read
  };
  struct Column {
    const UnitPlacement* unit = nullptr;  // null: nothing on disk
    Read read;
    std::vector<Patch> patches;
    // Device memory not host memory: the cpu share and where the disk read goes.
    std::vector<Patch> host_patches;  // rel: in the device staging buffer
    std::vector<HostPart> host_parts;
    uint64_t disk_rel = 0;
  };
  // Copies the gpu share of every unit to the device and the cpu share to
  // host_pool; fills the columns' host parts.
  void place_on_device(const Model& model, Backend& backend, TierPool& host_pool);
  // The view fields tensor `name` of unit u fills in this store's views.
  std::vector<MatrixView*> fields(const UnitPlacement& u, const std::string& name);
  // The columns that read unit u.
  std::vector<int64_t> columns_of(const UnitPlacement& u) const;

  WeightPlacement placement_;
  int64_t n_layer_ = 0;
  bool tied_ = false;
  bool host_memory_ = true;
  std::unique_ptr<ResidentWeights> base_;  // every view, disk matrices nulled below
  std::vector<LayerWeights> layers_;
  GlobalWeights global_;
  std::vector<Column> columns_;  // [n_columns]
  size_t staging_bytes_ = 0;
  size_t device_staging_bytes_ = 0;
  uint64_t resident_matrix_bytes_ = 0;
  uint64_t device_bytes_ = 0;
  std::vector<DeviceBuffer> gpu_units_;  // the gpu share, a buffer per unit
  std::vector<PoolBlock> cpu_units_;     // the cpu share, a block per unit
};

}  // namespace strata
