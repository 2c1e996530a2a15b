// Safetensors reader: one memory-mapped .safetensors file (u64 header
// length, JSON header, data section), and a model's set of them, sharded
// through model.safetensors.index.json or a single file. Every header length,
// shape and offset pair is checked against the file before use, with
// overflow-safe arithmetic: a tensor's bytes lie inside the data section,
// equal shape x element size, and no two tensors overlap. A malformed file
// gives an Error naming the file and the bad value, never a crash. It reads
// what the files say and interprets nothing: mapping names onto a model lives
// in model/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "io/mapped_file.h"

namespace strata {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;    // F32, F16 or BF16
  std::vector<int64_t> shape;   // row-major, outermost first; [] is a scalar
  uint64_t offset = 0;          // absolute file offset of the first byte
  uint64_t nbytes = 0;
  int64_t n_elems() const;
};

class SafetensorsFile {
 public:
  // A header larger than this is refused as corrupt (real headers are a few MB).
  static constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

  // Maps and parses `path`; throws Error on anything malformed or unsupported
  // (header length past the end or above kMaxHeaderBytes, bad JSON, a dtype
  // other than F32/F16/BF16, a shape that does not match its byte range, an
  // offset pair reversed or out of range, overlapping tensors, duplicate names).
  // `__metadata__` is ignored.
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return file_.path(); }
  const MappedFile& file() const { return file_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + header length

  // Tensors in the order of their data in the file.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;
  // The bytes of one of this file's tensors (checked at parse time).
  std::span<const std::byte> bytes(const SafetensorsTensor& t) const {
    return file_.slice(t.offset, t.nbytes);
  }

 private:
  void parse();
  MappedFile file_;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// The weights of a model directory: every shard opened once, and each tensor
// name resolved to the shard that holds it.
class SafetensorsSet {
 public:
  struct Entry {
    const SafetensorsTensor* tensor = nullptr;
    int shard = 0;  // index into shards()
  };

  // Opens `dir`/model.safetensors.index.json when present (every shard named in
  // its weight_map; a tensor listed there but absent from its shard is an
  // Error), else the directory's single *.safetensors file. Throws Error naming
  // the directory when there are no weights or several files and no index.
  static SafetensorsSet open_dir(const std::string& dir);
  // Opens the shards named by one index file (paths relative to its folder).
  static SafetensorsSet open_index(const std::string& index_path);
  // A single file.
  static SafetensorsSet open_file(const std::string& path);

  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // Every tensor name of the set, sorted.
  std::vector<std::string> names() const;
  const Entry* find(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::unordered_map<std::string, Entry> entries_;
};

// Strata's DType for a safetensors dtype string, nullopt when not read.
std::optional<DType> dtype_from_safetensors(std::string_view name);

}  // namespace strata
