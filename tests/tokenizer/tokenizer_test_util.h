// Helpers shared by the tokenizer tests: where the unpacked vocabularies are,
// reading the llama.cpp-style .inp/.out vectors, loading a tokenizer once per
// process, a scratch directory, and a minimal GGUF writer for malformed-file
// tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "support/files.h"

namespace strata::test {

// Unpacked tests/data/tokenizers/*.tar.xz (see tests/tokenizer/CMakeLists.txt).
inline std::string tokenizer_data(const std::string& rel) {
  return std::string(STRATA_TOKENIZER_DATA) + "/" + rel;
}

struct Vector {
  std::string text;
  std::vector<int32_t> ids;
};

// The inputs of `<gguf>.inp` paired with the ids of `<gguf>.out`.
inline std::vector<Vector> read_vectors(const std::string& gguf_path) {
  EXPECT_TRUE(std::filesystem::exists(gguf_path + ".inp")) << "cannot open " << gguf_path << ".inp";
  EXPECT_TRUE(std::filesystem::exists(gguf_path + ".out")) << "cannot open " << gguf_path << ".out";
  const std::string inp = read_text(gguf_path + ".inp");
  const std::string out = read_text(gguf_path + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  while (true) {
    const size_t hit = inp.find(sep, pos);
    if (hit == std::string::npos) break;
    texts.push_back(inp.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  std::vector<Vector> vectors;
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i >= texts.size()) break;
    Vector v;
    v.text = texts[i++];
    std::istringstream ids(line);
    int32_t id;
    while (ids >> id) v.ids.push_back(id);
    vectors.push_back(std::move(v));
  }
  EXPECT_EQ(vectors.size(), texts.size()) << gguf_path;
  return vectors;
}

// One tokenizer per path per process (vocabularies take a while to load).
inline const Tokenizer& cached_tokenizer(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(path);
  if (it == cache.end()) it = cache.emplace(path, Tokenizer::from_path(path)).first;
  return *it->second;
}

inline std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

// Writes a GGUF v3 file with metadata only. Values: string, u32, i32, bool,
// f32, array of strings, array of i32, array of f32.
class GgufWriter {
 public:
  using StringArray = std::vector<std::string>;
  using IntArray = std::vector<int32_t>;
  using FloatArray = std::vector<float>;
  using Value =
      std::variant<std::string, uint32_t, int32_t, bool, float, StringArray, IntArray, FloatArray>;

  void set(const std::string& key, Value v) { kv_.emplace_back(key, std::move(v)); }

  void write(const std::string& path) const {
    std::string b;
    b += "GGUF";
    put<uint32_t>(b, 3);
    put<uint64_t>(b, 0);  // tensors
    put<uint64_t>(b, kv_.size());
    for (const auto& [key, v] : kv_) {
      put_str(b, key);
      if (auto* s = std::get_if<std::string>(&v)) {
        put<uint32_t>(b, 8);
        put_str(b, *s);
      } else if (auto* u = std::get_if<uint32_t>(&v)) {
        put<uint32_t>(b, 4);
        put<uint32_t>(b, *u);
      } else if (auto* i = std::get_if<int32_t>(&v)) {
        put<uint32_t>(b, 5);
        put<int32_t>(b, *i);
      } else if (auto* x = std::get_if<bool>(&v)) {
        put<uint32_t>(b, 7);
        put<uint8_t>(b, *x ? 1 : 0);
      } else if (auto* f = std::get_if<float>(&v)) {
        put<uint32_t>(b, 6);
        put<float>(b, *f);
      } else if (auto* sa = std::get_if<StringArray>(&v)) {
        put<uint32_t>(b, 9);
        put<uint32_t>(b, 8);
        put<uint64_t>(b, sa->size());
        for (const auto& s2 : *sa) put_str(b, s2);
      } else if (auto* ia = std::get_if<IntArray>(&v)) {
        put<uint32_t>(b, 9);
        put<uint32_t>(b, 5);
        put<uint64_t>(b, ia->size());
        for (int32_t x2 : *ia) put<int32_t>(b, x2);
      } else if (auto* fa = std::get_if<FloatArray>(&v)) {
        put<uint32_t>(b, 9);
        put<uint32_t>(b, 6);
        put<uint64_t>(b, fa->size());
        for (float x2 : *fa) put<float>(b, x2);
      }
    }
    while (b.size() % 32) b.push_back('\0');
    std::ofstream out(path, std::ios::binary);
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
  }

 private:
  template <typename T>
  static void put(std::string& b, T v) {
    char raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    b.append(raw, sizeof(T));
  }
  static void put_str(std::string& b, const std::string& s) {
    put<uint64_t>(b, s.size());
    b += s;
  }
  std::vector<std::pair<std::string, Value>> kv_;
};

}  // namespace strata::test
