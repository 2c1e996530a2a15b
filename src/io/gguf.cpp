#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "io/one_line.h"

namespace strata {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDims = 4;

// Bounds-checked little-endian reader over the mapping.
class Cursor {
 public:
  Cursor(const MappedFile& f) : f_(f) {}
  uint64_t pos() const { return pos_; }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, f_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    need(len, what);
    std::string_view s(reinterpret_cast<const char*>(f_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }

  void need(uint64_t n, std::string_view what) const {
    if (!f_.in_bounds(pos_, n)) {
      fail("{}: truncated GGUF: {} needs {} bytes at offset {} but the file has {}", f_.path(),
           what, n, pos_, f_.size());
    }
  }

 private:
  const MappedFile& f_;
  uint64_t pos_ = 0;
};

int scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

bool is_int_type(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

bool known_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::kF64);
}

// Decodes one scalar at `p` (size checked by the caller).
void decode_scalar(GgufType t, const std::byte* p, GgufValue& v) {
  auto get = [p](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (t) {
    case GgufType::kU8:
      v.u = get(uint8_t{});
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::kI8:
      v.i = get(int8_t{});
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::kBool:
      v.u = get(uint8_t{}) != 0;
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::kU16:
      v.u = get(uint16_t{});
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::kI16:
      v.i = get(int16_t{});
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::kU32:
      v.u = get(uint32_t{});
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::kI32:
      v.i = get(int32_t{});
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::kU64:
      v.u = get(uint64_t{});
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::kI64:
      v.i = get(int64_t{});
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::kF32:
      v.f = get(float{});
      break;
    case GgufType::kF64:
      v.f = get(double{});
      break;
    default:
      break;
  }
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "uint8";
    case GgufType::kI8:
      return "int8";
    case GgufType::kU16:
      return "uint16";
    case GgufType::kI16:
      return "int16";
    case GgufType::kU32:
      return "uint32";
    case GgufType::kI32:
      return "int32";
    case GgufType::kF32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "uint64";
    case GgufType::kI64:
      return "int64";
    case GgufType::kF64:
      return "float64";
  }
  return "unknown";
}

std::optional<DType> dtype_from_ggml_type(uint32_t t) {
  switch (t) {
    case 0:
      return DType::kF32;
    case 1:
      return DType::kF16;
    case 2:
      return kQ4_0;
    case 3:
      return kQ4_1;
    case 6:
      return DType::kQ5_0;
    case 7:
      return DType::kQ5_1;
    case 8:
      return kQ8_0;
    case 10:
      return DType::kQ2_K;
    case 11:
      return DType::kQ3_K;
    case 12:
      return DType::kQ4_K;
    case 13:
      return DType::kQ5_K;
    case 14:
      return DType::kQ6_K;
    case 15:
      return DType::kQ8_K;
    case 24:
      return DType::kI8;
    case 26:
      return DType::kI32;
    case 30:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

std::string ggml_type_name(uint32_t t) {
  static const char* kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
  if (t < std::size(kNames)) return kNames[t];
  return "type " + std::to_string(t);
}

GgufFile::GgufFile(std::string path) : file_(std::move(path)) {
  try {
    parse();
  } catch (const Error& e) {
    // Keys and names in the file are arbitrary bytes: keep the message on one line.
    throw Error(one_line(e.what()));
  }
}

void GgufFile::parse() {
  const std::string& p = file_.path();
  Cursor c(file_);
  const uint32_t magic = c.read<uint32_t>("the magic number");
  if (magic != kGgufMagic) fail("{}: not a GGUF file (bad magic 0x{:08x})", p, magic);
  version_ = c.read<uint32_t>("the version");
  if (version_ != 2 && version_ != 3) {
    fail("{}: GGUF version {} is not supported (Strata reads versions 2 and 3)", p, version_);
  }
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // Each key/value takes at least 8+4 bytes and each tensor info 8+4+4+8.
  if (n_kv > file_.size() / 12) fail("{}: metadata count {} cannot fit in the file", p, n_kv);
  if (n_tensors > file_.size() / 24)
    fail("{}: tensor count {} cannot fit in the file", p, n_tensors);

  kv_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key(c.read_string("a metadata key"));
    const uint32_t type = c.read<uint32_t>("a metadata type");
    if (!known_type(type)) fail("{}: metadata '{}' has unknown value type {}", p, key, type);
    GgufValue v;
    v.type = static_cast<GgufType>(type);
    if (v.type == GgufType::kString) {
      v.str = c.read_string(key);
    } else if (v.type == GgufType::kArray) {
      const uint32_t et = c.read<uint32_t>(key);
      if (!known_type(et) || et == static_cast<uint32_t>(GgufType::kArray)) {
        fail("{}: metadata '{}' is an array of unsupported element type {}", p, key, et);
      }
      v.elem_type = static_cast<GgufType>(et);
      v.n_elems = c.read<uint64_t>(key);
      v.elems_offset = c.pos();
      if (v.elem_type == GgufType::kString) {
        if (v.n_elems > (file_.size() - c.pos()) / 8) {
          fail("{}: metadata '{}' claims {} strings, past the end of the file", p, key, v.n_elems);
        }
        for (uint64_t e = 0; e < v.n_elems; ++e) c.read_string(key);
      } else {
        const uint64_t sz = static_cast<uint64_t>(scalar_size(v.elem_type));
        if (v.n_elems > (file_.size() - c.pos()) / sz) {
          fail("{}: metadata '{}' claims {} elements, past the end of the file", p, key, v.n_elems);
        }
        c.skip(v.n_elems * sz, key);
      }
    } else {
      const int sz = scalar_size(v.type);
      c.need(static_cast<uint64_t>(sz), key);
      decode_scalar(v.type, file_.data() + c.pos(), v);
      c.skip(static_cast<uint64_t>(sz), key);
    }
    if (!kv_index_.emplace(key, kv_.size()).second) fail("{}: duplicate metadata key '{}'", p, key);
    kv_.emplace_back(std::move(key), v);
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (!is_int_type(a->type) || a->type == GgufType::kBool) {
      fail("{}: general.alignment has type {}, expected an integer", p, gguf_type_name(a->type));
    }
    if (a->i <= 0 || (a->u & (a->u - 1)) != 0 || a->u > (1u << 30)) {
      fail("{}: general.alignment {} is not a power of two", p, a->i);
    }
    alignment_ = a->u;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo info;
    info.name = std::string(c.read_string("a tensor name"));
    const uint32_t n_dims = c.read<uint32_t>(info.name);
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail("{}: tensor '{}' has {} dimensions (1 to {} allowed)", p, info.name, n_dims, kMaxDims);
    }
    std::vector<int64_t> ne(n_dims);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = c.read<uint64_t>(info.name);
      if (dim == 0 || dim > (uint64_t{1} << 40) || n_elems > (uint64_t{1} << 48) / dim) {
        fail("{}: tensor '{}' has an invalid dimension {}", p, info.name, dim);
      }
      n_elems *= dim;
      ne[d] = static_cast<int64_t>(dim);
    }
    info.shape.assign(ne.rbegin(), ne.rend());
    info.ggml_type = c.read<uint32_t>(info.name);
    auto dt = dtype_from_ggml_type(info.ggml_type);
    if (!dt) {
      fail(
          "{}: tensor '{}' has type {}, which Strata does not read (supported: F32, F16, BF16, "
          "Q8_0, Q5_0, Q5_1, Q4_0, Q4_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K)",
          p, info.name, ggml_type_name(info.ggml_type));
    }
    info.dtype = *dt;
    if (!row_elems_ok(info.dtype, ne[0])) {
      fail("{}: tensor '{}' row of {} elements is not a whole number of {} blocks", p, info.name,
           ne[0], dtype_name(info.dtype));
    }
    info.nbytes = row_bytes(info.dtype, ne[0]) * (n_elems / static_cast<uint64_t>(ne[0]));
    info.offset = c.read<uint64_t>(info.name);  // relative for now
    if (info.offset % alignment_ != 0) {
      fail("{}: tensor '{}' offset {} is not a multiple of the alignment {}", p, info.name,
           info.offset, alignment_);
    }
    if (!tensor_index_.emplace(info.name, tensors_.size()).second) {
      fail("{}: duplicate tensor name '{}'", p, info.name);
    }
    tensors_.push_back(std::move(info));
  }

  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > file_.size()) {
    fail("{}: truncated GGUF: the data section would start at {} past the end ({} bytes)", p,
         data_offset_, file_.size());
  }
  const uint64_t data_size = file_.size() - std::min(data_offset_, file_.size());
  for (auto& info : tensors_) {
    if (info.offset > data_size || info.nbytes > data_size - info.offset) {
      fail(
          "{}: tensor '{}' data [{}, +{}) lies past the end of the file; the file is truncated "
          "or corrupt",
          p, info.name, info.offset, info.nbytes);
    }
    info.offset += data_offset_;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (auto& info : tensors_) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* a = by_offset[i - 1];
    const auto* b = by_offset[i];
    if (a->offset + a->nbytes > b->offset) {
      fail("{}: tensors '{}' and '{}' overlap in the file", p, a->name, b->name);
    }
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_int_type(v->type)) {
    fail("{}: metadata '{}' has type {}, expected an integer", path(), key,
         gguf_type_name(v->type));
  }
  if (v->type == GgufType::kU64 && v->u > static_cast<uint64_t>(INT64_MAX)) {
    fail("{}: metadata '{}' value {} is out of range", path(), key, v->u);
  }
  return v->i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufType::kF32 || v->type == GgufType::kF64) return v->f;
  if (v->type == GgufType::kU64) return static_cast<double>(v->u);
  if (is_int_type(v->type) && v->type != GgufType::kBool) return static_cast<double>(v->i);
  fail("{}: metadata '{}' has type {}, expected a number", path(), key, gguf_type_name(v->type));
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_int_type(v->type)) {
    fail("{}: metadata '{}' has type {}, expected a bool", path(), key, gguf_type_name(v->type));
  }
  return v->i != 0;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kString) {
    fail("{}: metadata '{}' has type {}, expected a string", path(), key, gguf_type_name(v->type));
  }
  return v->str;
}

std::optional<std::vector<std::string_view>> GgufFile::get_string_array(
    std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    fail("{}: metadata '{}' is not an array of strings", path(), key);
  }
  std::vector<std::string_view> out;
  out.reserve(v->n_elems);
  const std::byte* d = file_.data();
  uint64_t pos = v->elems_offset;  // lengths were bounds-checked while parsing
  for (uint64_t e = 0; e < v->n_elems; ++e) {
    uint64_t len;
    std::memcpy(&len, d + pos, 8);
    out.emplace_back(reinterpret_cast<const char*>(d + pos + 8), len);
    pos += 8 + len;
  }
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kArray || !is_int_type(v->elem_type)) {
    fail("{}: metadata '{}' is not an array of integers", path(), key);
  }
  std::vector<int64_t> out(v->n_elems);
  const int sz = scalar_size(v->elem_type);
  for (uint64_t e = 0; e < v->n_elems; ++e) {
    GgufValue x;
    decode_scalar(v->elem_type, file_.data() + v->elems_offset + e * sz, x);
    out[e] = x.i;
  }
  return out;
}

std::optional<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::kArray ||
      !(v->elem_type == GgufType::kF32 || v->elem_type == GgufType::kF64)) {
    fail("{}: metadata '{}' is not an array of floats", path(), key);
  }
  std::vector<float> out(v->n_elems);
  const int sz = scalar_size(v->elem_type);
  for (uint64_t e = 0; e < v->n_elems; ++e) {
    GgufValue x;
    decode_scalar(v->elem_type, file_.data() + v->elems_offset + e * sz, x);
    out[e] = static_cast<float>(x.f);
  }
  return out;
}

}  // namespace strata
