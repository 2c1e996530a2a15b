// The weight pack: a model's weights laid out for streaming from disk.
//
//   DIR/manifest.json  what is where (below), written last
//   DIR/weights.bin    the bytes: one unit after the other
//
// A unit is what the schedule loads as one piece: the globals (unit "embed":
// token_embd and position_embd; "output_norm"; "output", the lm_head, absent
// when tied) and then one unit per transformer layer ("blk.0", "blk.1", ...).
// Every unit starts at a multiple of kPackUnitAlign and its tensors are
// contiguous, each at a multiple of kPackTensorAlign, so a unit, or any tail of
// it, is one O_DIRECT read. weights.bin is padded to a multiple of
// kPackUnitAlign, so the pages of the last unit are inside the file.
//
// Tensor order inside a layer unit is fixed: the one-dimensional tensors first
// (attn_norm.weight, attn_norm.bias, attn_q/k/v.bias, attn_output.bias,
// ffn_norm.weight, ffn_norm.bias, ffn_gate/up/down.bias), then the matrices in
// forward order (attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up,
// ffn_down). A placement that puts part of a layer on disk puts its tail
// there: tensors [k, n) for some k, never the small tensors at the head.
//
// manifest.json (format "strata-pack", version kPackFormatVersion):
//   source   {path, format: "gguf"|"hf", files: [{path, size, mtime_ns, header_checksum}]}
//   options  {weights: "source" or a dtype name such as "q4a64"}
//   config   the model config (ModelConfig fields)
//   weights_file "weights.bin", weights_bytes, unit_align, tensor_align
//   units    [{name, layer (-1 for globals), offset, length, checksum,
//              tensors: [{name, shape, dtype, offset, nbytes, checksum}]}]
// Offsets are absolute in weights.bin; length runs from the unit's offset to
// the end of its last tensor; a unit's checksum is XXH64 over those bytes
// (padding between tensors is zero and included), a tensor's over its nbytes.
// The engine checks each tensor it reads from the pack the first time it
// reads it (check_tensors), so a damaged pack is caught before its bytes are
// used, without a pass of its own over the file.
//
// Invariant: a Pack object exists only for a manifest whose every offset and
// size was checked against the size of weights.bin and whose every tensor has
// the bytes its shape and dtype imply. Checksums are checked on request
// (verify), since that reads the whole file; tensors as they are first read.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "io/json.h"
#include "model/config.h"

namespace strata {

class DiskIo;
class Model;
struct ModelDesc;
struct TensorInfo;

inline constexpr int kPackFormatVersion = 2;  // 2: tensor checksums
inline constexpr uint64_t kPackUnitAlign = 4096;
inline constexpr uint64_t kPackTensorAlign = 4096;
inline constexpr std::string_view kPackManifestName = "manifest.json";
inline constexpr std::string_view kPackWeightsName = "weights.bin";

struct PackTensor {
  std::string name;            // canonical (model/model.h)
  std::vector<int64_t> shape;  // row-major, outermost first
  DType dtype = DType::kF32;
  uint64_t offset = 0;  // absolute in weights.bin
  uint64_t nbytes = 0;
  uint64_t checksum = 0;  // XXH64 of the nbytes bytes
};

struct PackUnit {
  std::string name;    // "embed", "output_norm", "output", "blk.N"
  int64_t layer = -1;  // N for "blk.N", -1 for globals
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t checksum = 0;
  std::vector<PackTensor> tensors;  // in file order

  const PackTensor* find(std::string_view tensor_name) const;
  // Bytes from the start of tensors[first] to the end of the unit: the disk
  // share of a layer whose tensors [first, n) live on disk. first == n gives 0.
  uint64_t tail_bytes(size_t first) const;
};

struct PackSourceFile {
  std::string path;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t header_checksum = 0;  // XXH64 of the file's header (GGUF metadata, safetensors JSON)
};

struct PackSource {
  std::string path;    // the model as the user named it
  std::string format;  // "gguf" or "hf"
  std::vector<PackSourceFile> files;
};

struct PackOptions {
  // Matrices (2-D weights but position_embd) are requantized into this
  // format; nullopt keeps every tensor as the source stores it. A matrix whose
  // rows are not a multiple of the format's group keeps its source dtype.
  std::optional<DType> weight_dtype;
  std::string to_string() const;  // "source" or the dtype name
  bool operator==(const PackOptions&) const = default;
};

struct PackManifest {
  int version = kPackFormatVersion;
  PackSource source;
  PackOptions options;
  Json config;  // config_to_json(ModelConfig)
  uint64_t weights_bytes = 0;
  std::vector<PackUnit> units;  // in file order

  Json to_json() const;
};

// A model config as JSON (every field of ModelConfig), as stored in manifests.

// The units of a pack for a model, in file order, each with the model's
// tensors in the order documented above.
struct PackLayoutUnit {
  std::string name;
  int64_t layer = -1;
  std::vector<const TensorInfo*> tensors;
};
std::vector<PackLayoutUnit> pack_layout(const ModelDesc& desc);

// The dtype a pack built with `options` stores a source tensor in.
DType pack_dtype(std::string_view name, const std::vector<int64_t>& shape, DType source,
                 const PackOptions& options);
// The bytes a pack built with `options` stores a source tensor in.
uint64_t packed_bytes(const TensorInfo& t, const PackOptions& options);

class Pack {
 public:
  // Reads DIR/manifest.json and checks it (every field, offset and size)
  // against DIR/weights.bin; with a model, also that the pack holds exactly
  // the model's tensors with their shapes and the dtypes the pack's options
  // imply. Throws Error naming the file and the value that is wrong.
  static Pack open(const std::string& dir, const Model* model = nullptr);

  const std::string& dir() const { return dir_; }
  std::string manifest_path() const;
  std::string weights_path() const;
  const PackManifest& manifest() const { return m_; }
  const std::vector<PackUnit>& units() const { return m_.units; }
  uint64_t weights_bytes() const { return m_.weights_bytes; }

  const PackUnit* find_unit(std::string_view name) const;
  const PackUnit& layer(int64_t j) const;  // unit "blk.j" (asserted present)
  const PackTensor* find_tensor(std::string_view name) const;

  // Recomputes every unit's checksum from weights.bin; Error naming the unit
  // and the file on a mismatch.
  void verify(DiskIo& engine) const;
  void verify() const;  // with an engine of its own
  // Checks one unit's bytes (length bytes, read from its offset).
  void verify_unit(const PackUnit& unit, std::span<const std::byte> bytes) const;
  // Checks tensors [first, n) of `unit` in `bytes`, which hold weights.bin
  // from file offset `bytes_offset` on (a disk read of the unit's tail).
  // Returns the first mismatch ("tensor 'x' of unit 'y' (n bytes at offset
  // o) has checksum a but the manifest says b"), nothing when all match.
  // Only reports: the caller decides what a damaged pack means (fail_damaged).
  std::optional<std::string> check_tensors(const PackUnit& unit, size_t first,
                                           std::span<const std::byte> bytes,
                                           uint64_t bytes_offset) const;
  // The same for one tensor whose bytes are at `data` (a mapping of weights.bin).
  std::optional<std::string> check_tensor(const PackUnit& unit, const PackTensor& t,
                                          const std::byte* data) const;
  // Ends a run that found the pack damaged (`mismatch` from a check): sets
  // the manifest aside (manifest.json.damaged), so that the next run builds
  // the pack again instead of reading these bytes, and throws Error naming
  // weights.bin and the mismatch.
  [[noreturn]] void fail_damaged(const std::string& mismatch) const;

  // Checks the pack's tensors against a model; Error naming the tensor.
  void check_against(const Model& model) const;

 private:
  std::string dir_;
  PackManifest m_;
};

// Parses and checks a manifest read from `manifest_path` whose weights file
// (`weights_path`) has `weights_file_bytes` bytes; Error naming the file and
// the bad value.
PackManifest parse_pack_manifest(const Json& j, const std::string& manifest_path,
                                 const std::string& weights_path, uint64_t weights_file_bytes);

}  // namespace strata
