// Tiny writers of safetensors and GGUF files for tests: they produce valid
// files by default and let a test set any field to a bad value (header
// length, offsets, dims, types, raw metadata bytes) to check that the readers
// refuse it. Header-only; used by tests/io and tests/model.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata::test_files {

using Bytes = std::vector<uint8_t>;

inline void put_u32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void put_u64(Bytes& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void put_f32(Bytes& b, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  put_u32(b, u);
}
inline void put_str(Bytes& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

inline void write_file(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}
inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  ASSERT_TRUE(f.good()) << path;
}

// A fresh empty directory for one test, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "strata";
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = std::filesystem::temp_directory_path() /
            ("strata-test-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// ---- element encoding ----

inline Bytes encode(DType t, const std::vector<float>& values) {
  Bytes b;
  for (float v : values) {
    if (t == DType::kF32) {
      put_f32(b, v);
    } else {
      const uint16_t h = t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
      b.push_back(static_cast<uint8_t>(h));
      b.push_back(static_cast<uint8_t>(h >> 8));
    }
  }
  return b;
}

inline std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ---- safetensors ----

struct StTensor {
  std::string name;
  std::string dtype;            // "F32", "F16", "BF16", or anything for bad cases
  std::vector<int64_t> shape;
  Bytes data;
};

inline std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

// The header JSON for tensors laid out back to back in the given order.
inline std::string safetensors_header(const std::vector<StTensor>& tensors,
                                      const std::string& metadata = R"({"format":"pt"})") {
  std::string h = "{";
  if (!metadata.empty()) h += "\"__metadata__\":" + metadata;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    if (h.size() > 1) h += ",";
    h += json_quote(t.name) + ":{\"dtype\":" + json_quote(t.dtype) + ",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.data.size()) + "]}";
    off += t.data.size();
  }
  return h + "}";
}

// A file from a header text and a data section; the header is padded with
// spaces to a multiple of 8 as the reference writer does. `header_len`
// overrides the length field.
inline Bytes safetensors_raw(const std::string& header, const Bytes& data,
                             std::optional<uint64_t> header_len = std::nullopt) {
  std::string h = header;
  while (h.size() % 8 != 0) h += ' ';
  Bytes b;
  put_u64(b, header_len.value_or(h.size()));
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

inline Bytes safetensors_file(const std::vector<StTensor>& tensors) {
  Bytes data;
  for (const auto& t : tensors) data.insert(data.end(), t.data.begin(), t.data.end());
  return safetensors_raw(safetensors_header(tensors), data);
}

inline StTensor st_tensor(const std::string& name, DType t, std::vector<int64_t> shape, uint32_t seed,
                          float scale = 1.0f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const char* names[] = {"F32", "F16", "BF16"};
  return StTensor{name, names[static_cast<int>(t)], std::move(shape),
                  encode(t, random_values(static_cast<size_t>(n), seed, scale))};
}

// ---- GGUF ----

enum GgufKvType : uint32_t {
  kGU8 = 0, kGI8 = 1, kGU16 = 2, kGI16 = 3, kGU32 = 4, kGI32 = 5, kGF32 = 6,
  kGBool = 7, kGString = 8, kGArray = 9, kGU64 = 10, kGI64 = 11, kGF64 = 12,
};

enum GgmlType : uint32_t {
  kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ8_0 = 8, kGgmlBF16 = 30,
};

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> ne;          // GGUF order: innermost first
  uint32_t type = kGgmlF32;
  Bytes data;
  std::optional<uint64_t> offset;    // relative to the data section; default: packed, aligned
};

class GgufBuilder {
 public:
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  uint64_t alignment = 32;           // used to lay out data (general.alignment is a separate kv)
  std::optional<uint64_t> n_tensors_override;
  std::optional<uint64_t> n_kv_override;

  // key + type + raw value bytes
  void kv_raw(const std::string& key, uint32_t type, const Bytes& value) {
    Bytes b;
    put_str(b, key);
    put_u32(b, type);
    b.insert(b.end(), value.begin(), value.end());
    kvs_.push_back(std::move(b));
  }
  void kv_u32(const std::string& key, uint32_t v) { Bytes b; put_u32(b, v); kv_raw(key, kGU32, b); }
  void kv_i32(const std::string& key, int32_t v) { Bytes b; put_u32(b, static_cast<uint32_t>(v)); kv_raw(key, kGI32, b); }
  void kv_u64(const std::string& key, uint64_t v) { Bytes b; put_u64(b, v); kv_raw(key, kGU64, b); }
  void kv_f32(const std::string& key, float v) { Bytes b; put_f32(b, v); kv_raw(key, kGF32, b); }
  void kv_bool(const std::string& key, bool v) { kv_raw(key, kGBool, Bytes{static_cast<uint8_t>(v)}); }
  void kv_str(const std::string& key, const std::string& v) { Bytes b; put_str(b, v); kv_raw(key, kGString, b); }
  void kv_str_array(const std::string& key, const std::vector<std::string>& v) {
    Bytes b;
    put_u32(b, kGString);
    put_u64(b, v.size());
    for (const auto& s : v) put_str(b, s);
    kv_raw(key, kGArray, b);
  }
  void kv_i32_array(const std::string& key, const std::vector<int32_t>& v) {
    Bytes b;
    put_u32(b, kGI32);
    put_u64(b, v.size());
    for (int32_t x : v) put_u32(b, static_cast<uint32_t>(x));
    kv_raw(key, kGArray, b);
  }
  void tensor(GgufTensorSpec t) { tensors_.push_back(std::move(t)); }
  // A float tensor from a row-major shape and values.
  void tensor_f(const std::string& name, DType t, const std::vector<int64_t>& shape,
                const std::vector<float>& values) {
    GgufTensorSpec s;
    s.name = name;
    for (auto it = shape.rbegin(); it != shape.rend(); ++it) s.ne.push_back(static_cast<uint64_t>(*it));
    s.type = t == DType::kF32 ? kGgmlF32 : t == DType::kF16 ? kGgmlF16 : kGgmlBF16;
    s.data = encode(t, values);
    tensors_.push_back(std::move(s));
  }

  Bytes build() const {
    Bytes b;
    put_u32(b, magic);
    put_u32(b, version);
    put_u64(b, n_tensors_override.value_or(tensors_.size()));
    put_u64(b, n_kv_override.value_or(kvs_.size()));
    for (const auto& kv : kvs_) b.insert(b.end(), kv.begin(), kv.end());
    // Packed tensors are laid out in order at aligned offsets; a tensor with
    // an explicit offset takes no space and writes no data (bad-offset tests).
    std::vector<uint64_t> offsets;
    uint64_t off = 0;
    for (const auto& t : tensors_) {
      if (t.offset) {
        offsets.push_back(*t.offset);
        continue;
      }
      offsets.push_back(off);
      off = (off + t.data.size() + alignment - 1) / alignment * alignment;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      put_str(b, t.name);
      put_u32(b, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) put_u64(b, d);
      put_u32(b, t.type);
      put_u64(b, offsets[i]);
    }
    while (b.size() % alignment != 0) b.push_back(0);
    const size_t data_start = b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      if (t.offset) continue;
      b.resize(data_start + offsets[i], 0);
      b.insert(b.end(), t.data.begin(), t.data.end());
    }
    return b;
  }

 private:
  std::vector<Bytes> kvs_;
  std::vector<GgufTensorSpec> tensors_;
};

}  // namespace strata::test_files
