// GGUF v2/v3 reader: header, metadata key/values, tensor infos and the
// aligned data section of a memory-mapped file. Every length, count, offset
// and shape is checked against the file size before use; a malformed file
// gives an Error naming the file and the bad value, never a crash. It reads
// what the file says and interprets nothing: mapping tensor names onto a
// model lives in model/, tokenizer metadata in tokenizer/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "io/mapped_file.h"

namespace strata {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

std::string_view gguf_type_name(GgufType t);

// One metadata value. Scalars are decoded; arrays keep their element type,
// count and where their encoded elements start in the file, and are decoded on
// request (a vocabulary array holds 10^5 strings).
struct GgufValue {
  GgufType type = GgufType::kU8;
  // scalars
  int64_t i = 0;    // every integer type and bool
  uint64_t u = 0;   // same value for unsigned types (u64 above INT64_MAX)
  double f = 0;     // f32 / f64
  std::string_view str;  // kString: points into the mapping
  // arrays
  GgufType elem_type = GgufType::kU8;
  uint64_t n_elems = 0;
  uint64_t elems_offset = 0;  // file offset of the first encoded element
};

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;         // raw type id from the file
  DType dtype = DType::kF32;      // Strata's equivalent
  std::vector<int64_t> shape;     // row-major, outermost first (GGUF ne[] reversed)
  uint64_t offset = 0;            // absolute file offset of the first byte
  uint64_t nbytes = 0;
};

class GgufFile {
 public:
  // Maps and parses `path`; throws Error on anything malformed or unsupported
  // (bad magic, version other than 2 or 3, bad alignment, a count or length
  // past the end, a tensor type Strata does not read, out-of-range or
  // overlapping tensor data, duplicate keys or names).
  explicit GgufFile(std::string path);

  const std::string& path() const { return file_.path(); }
  const MappedFile& file() const { return file_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: nullopt when the key is absent; Error naming the key when
  // it is present with an incompatible type (any integer type reads as int,
  // any integer or float type as double).
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;

  // Array getters: empty optional when absent; Error when the key is not an
  // array of a compatible element type. Strings point into the mapping.
  std::optional<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  std::optional<std::vector<float>> get_float_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

 private:
  void parse();
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Strata's DType for a ggml type id, nullopt for types Strata does not read.
std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type);
std::string ggml_type_name(uint32_t ggml_type);

}  // namespace strata
