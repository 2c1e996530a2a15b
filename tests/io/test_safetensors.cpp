// Safetensors reader: values of every dtype read back bit for bit, sharded
// sets through the index, and every malformed file refused with an Error
// (truncations at every length, byte flips, each bad field).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "io/file_writers.h"
#include "io/safetensors.h"

namespace strata {
namespace {

using test_files::Bytes;
using test_files::StTensor;
using test_files::TempDir;

float read_elem(DType t, const std::byte* p) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return t == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
}

// Expects `fn` to throw an Error whose one-line message contains each of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no Error thrown; expected one mentioning '" << *parts.begin() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

std::vector<StTensor> small_tensors() {
  return {test_files::st_tensor("a.weight", DType::kF32, {3, 5}, 1),
          test_files::st_tensor("b.weight", DType::kF16, {7}, 2),
          test_files::st_tensor("c.bias", DType::kBF16, {2, 3, 2}, 3),
          StTensor{"empty", "F32", {0, 4}, {}},
          test_files::st_tensor("scalar", DType::kF32, {}, 4)};
}

TEST(Safetensors, ValuesOfEveryDtypeReadBack) {
  TempDir dir;
  const auto tensors = small_tensors();
  const std::string path = dir / "model.safetensors";
  test_files::write_file(path, test_files::safetensors_file(tensors));
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (const auto& want : tensors) {
    const SafetensorsTensor* t = f.find(want.name);
    ASSERT_NE(t, nullptr) << want.name;
    EXPECT_EQ(t->shape, want.shape);
    EXPECT_EQ(std::string(dtype_name(t->dtype)),
              want.dtype == "F32" ? "f32" : want.dtype == "F16" ? "f16" : "bf16");
    ASSERT_EQ(t->nbytes, want.data.size());
    const auto bytes = f.bytes(*t);
    ASSERT_EQ(bytes.size(), want.data.size());
    EXPECT_TRUE(std::equal(want.data.begin(), want.data.end(), reinterpret_cast<const uint8_t*>(bytes.data())))
        << want.name;
    // Decoded values equal the floats the writer encoded, bit for bit.
    const int esize = dtype_info(t->dtype).block_bytes;
    for (int64_t i = 0; i < t->n_elems(); ++i) {
      const float got = read_elem(t->dtype, bytes.data() + i * esize);
      const float want_v = read_elem(t->dtype, reinterpret_cast<const std::byte*>(want.data.data()) + i * esize);
      EXPECT_EQ(got, want_v);
    }
  }
  EXPECT_EQ(f.find("scalar")->n_elems(), 1);
  EXPECT_EQ(f.find("empty")->n_elems(), 0);
  EXPECT_EQ(f.find("missing"), nullptr);
  // Known values through each dtype.
  const std::vector<float> vals = {1.0f, -2.5f, 0.0f, 65504.0f, 1e-3f, 3.140625f};
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const char* n[] = {"F32", "F16", "BF16"};
    const std::vector<StTensor> one = {{"v", n[static_cast<int>(dt)], {6}, test_files::encode(dt, vals)}};
    test_files::write_file(path, test_files::safetensors_file(one));
    SafetensorsFile g(path);
    const auto* t = g.find("v");
    ASSERT_NE(t, nullptr);
    for (size_t i = 0; i < vals.size(); ++i) {
      const float got = read_elem(dt, g.bytes(*t).data() + i * dtype_info(dt).block_bytes);
      const float want = dt == DType::kF32 ? vals[i]
                         : dt == DType::kF16 ? f16_to_f32(f32_to_f16(vals[i]))
                                             : bf16_to_f32(f32_to_bf16(vals[i]));
      EXPECT_EQ(got, want) << dtype_name(dt) << " element " << i;
    }
  }
}

TEST(Safetensors, TensorsAreInDataOrderAndMetadataIgnored) {
  TempDir dir;
  auto tensors = small_tensors();
  const std::string path = dir / "x.safetensors";
  test_files::write_file(path, test_files::safetensors_file(tensors));
  SafetensorsFile f(path);
  for (size_t i = 1; i < f.tensors().size(); ++i) {
    EXPECT_LE(f.tensors()[i - 1].offset, f.tensors()[i].offset);
  }
  EXPECT_EQ(f.find("__metadata__"), nullptr);
  EXPECT_EQ(f.data_offset() % 8, 0u);
}

TEST(Safetensors, ShardedThroughIndex) {
  TempDir dir;
  const std::vector<StTensor> s1 = {test_files::st_tensor("x.0", DType::kF32, {4, 4}, 10),
                                    test_files::st_tensor("x.1", DType::kF32, {4}, 11)};
  const std::vector<StTensor> s2 = {test_files::st_tensor("y.0", DType::kF32, {2, 8}, 12),
                                    test_files::st_tensor("unlisted", DType::kF32, {1}, 13)};
  test_files::write_file(dir / "model-00001-of-00002.safetensors", test_files::safetensors_file(s1));
  test_files::write_file(dir / "model-00002-of-00002.safetensors", test_files::safetensors_file(s2));
  test_files::write_text(dir / "model.safetensors.index.json", R"({
    "metadata": {"total_size": 200},
    "weight_map": {"x.0": "model-00001-of-00002.safetensors", "x.1": "model-00001-of-00002.safetensors",
                   "y.0": "model-00002-of-00002.safetensors"}})");
  const SafetensorsSet set = SafetensorsSet::open_dir(dir.path().string());
  ASSERT_EQ(set.shards().size(), 2u);
  EXPECT_EQ(set.names(), (std::vector<std::string>{"x.0", "x.1", "y.0"}));
  const auto* e = set.find("y.0");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(set.shards()[e->shard]->path(), dir / "model-00002-of-00002.safetensors");
  const auto bytes = set.shards()[e->shard]->bytes(*e->tensor);
  EXPECT_EQ(std::memcmp(bytes.data(), s2[0].data.data(), s2[0].data.size()), 0);
  EXPECT_EQ(set.find("unlisted"), nullptr);
  EXPECT_EQ(set.find("x.1")->shard, set.find("x.0")->shard);

  // A tensor listed for a shard that does not hold it.
  test_files::write_text(dir / "model.safetensors.index.json",
                      R"({"weight_map": {"x.0": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); },
               {"model.safetensors.index.json", "'x.0'", "model-00002-of-00002.safetensors"});
  // A shard that does not exist.
  test_files::write_text(dir / "model.safetensors.index.json",
                      R"({"weight_map": {"x.0": "model-00009-of-00009.safetensors"}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); }, {"model-00009-of-00009.safetensors"});
  // A shard outside the folder, bad JSON, no weight_map, duplicate keys.
  test_files::write_text(dir / "model.safetensors.index.json", R"({"weight_map": {"x.0": "../x.safetensors"}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); }, {"../x.safetensors"});
  test_files::write_text(dir / "model.safetensors.index.json", R"({"weight_map": {"x.0": )");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); }, {"model.safetensors.index.json", "JSON"});
  test_files::write_text(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); }, {"weight_map"});
  test_files::write_text(dir / "model.safetensors.index.json",
                      R"({"weight_map": {"x.0": "model-00001-of-00002.safetensors", "x.0": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); }, {"'x.0' twice"});
}

TEST(Safetensors, DirectoryWithoutIndex) {
  TempDir dir;
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); }, {dir.path().string(), "no weights"});
  test_files::write_text(dir / "pytorch_model.bin", "not read");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); }, {"PyTorch .bin"});
  test_files::write_file(dir / "model.safetensors", test_files::safetensors_file(small_tensors()));
  EXPECT_EQ(SafetensorsSet::open_dir(dir.path().string()).shards().size(), 1u);
  test_files::write_file(dir / "other.safetensors", test_files::safetensors_file(small_tensors()));
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); }, {"index"});
}

TEST(Safetensors, TruncatedAtEveryLength) {
  TempDir dir;
  const Bytes full = test_files::safetensors_file(small_tensors());
  const std::string path = dir / "t.safetensors";
  for (size_t len = 0; len < full.size(); ++len) {
    test_files::write_file(path, Bytes(full.begin(), full.begin() + static_cast<ptrdiff_t>(len)));
    EXPECT_THROW(SafetensorsFile{path}, Error) << "length " << len;
  }
}

TEST(Safetensors, ByteFlipsNeverCrash) {
  TempDir dir;
  const Bytes full = test_files::safetensors_file(small_tensors());
  const std::string path = dir / "f.safetensors";
  int accepted = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t mask : {0x01, 0x20, 0x80, 0xff}) {
      Bytes b = full;
      b[i] ^= mask;
      test_files::write_file(path, b);
      try {
        SafetensorsFile f(path);
        ++accepted;  // e.g. a flipped data byte: every range must still be inside
        for (const auto& t : f.tensors()) {
          ASSERT_TRUE(f.file().in_bounds(t.offset, t.nbytes));
          ASSERT_GE(t.offset, f.data_offset());
          ASSERT_EQ(t.nbytes, static_cast<uint64_t>(t.n_elems()) * dtype_info(t.dtype).block_bytes);
        }
      } catch (const Error&) {
      }
    }
  }
  EXPECT_GT(accepted, 0);  // flips in the data section are harmless
}

struct BadCase {
  const char* label;
  std::string header;
  size_t data_bytes;
  std::vector<std::string> message;
};

TEST(Safetensors, MalformedHeadersAreRefused) {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  const std::vector<BadCase> cases = {
      {"bad json", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", 8, {"not valid JSON"}},
      {"not an object", R"([1, 2, 3])", 0, {"expected a JSON object"}},
      {"entry not an object", R"({"a": 5})", 0, {"'a'"}},
      {"unknown dtype", R"({"w": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16,
       {"'w'", "I64", "F32, F16, BF16"}},
      {"fp8 dtype", R"({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})", 2, {"F8_E4M3"}},
      {"no dtype", R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8, {"dtype"}},
      {"no shape", R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", 8, {"shape"}},
      {"no offsets", R"({"w": {"dtype": "F32", "shape": [2]}})", 8, {"data_offsets"}},
      {"three offsets", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}})", 8, {"data_offsets"}},
      {"negative dim", R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8, {"shape"}},
      {"float dim", R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8, {"shape"}},
      {"negative offset", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", 8, {"data_offsets"}},
      {"reversed offsets", R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", 8, {"reversed"}},
      {"end past data", R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8, {"'w'", "past the end"}},
      {"begin past data", R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [64, 64]}})", 8, {"past the end"}},
      {"huge offsets", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [18446744073709551608, 18446744073709551615]}})", 8, {"'w'"}},
      {"shape/length mismatch", R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8,
       {"'w'", "needs 12 bytes", "hold 8"}},
      {"dtype size mismatch", R"({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 8]}})", 8, {"needs 4 bytes"}},
      {"element count overflow",
       R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 8]}})", 8, {"'w'"}},
      {"byte count overflow", R"({"w": {"dtype": "F32", "shape": [2305843009213693952, 2], "data_offsets": [0, 8]}})",
       8, {"'w'"}},
      {"overlap", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12, {"overlap", "'a'", "'b'"}},
      {"same range", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}})", 8, {"overlap"}},
      {"duplicate tensor", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 16, {"'a' twice"}},
      {"newline in name", "{\"a\\nb\": {\"dtype\": \"I8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1, {"a\\nb"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    test_files::write_file(path, test_files::safetensors_raw(c.header, Bytes(c.data_bytes, 0)));
    std::vector<std::string> parts = c.message;
    parts.push_back(path);
    try {
      SafetensorsFile f(path);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }
}

TEST(Safetensors, HeaderLengthChecks) {
  TempDir dir;
  const std::string path = dir / "h.safetensors";
  const std::string header = test_files::safetensors_header(small_tensors());
  // Past the end of the file.
  test_files::write_file(path, test_files::safetensors_raw(header, Bytes(16, 0), uint64_t{1} << 20));
  expect_error([&] { SafetensorsFile f(path); }, {path, "header length 1048576", "past the end"});
  // Above the cap (the file is made that large, sparse, so only the cap can refuse it).
  {
    Bytes b;
    test_files::put_u64(b, SafetensorsFile::kMaxHeaderBytes + 8);
    test_files::write_file(path, b);
    std::filesystem::resize_file(path, SafetensorsFile::kMaxHeaderBytes + 64);
    expect_error([&] { SafetensorsFile f(path); }, {path, "above the limit"});
  }
  // Shorter than the length field; empty file.
  test_files::write_file(path, Bytes{1, 2, 3});
  expect_error([&] { SafetensorsFile f(path); }, {path, "too short"});
  test_files::write_file(path, Bytes{});
  expect_error([&] { SafetensorsFile f(path); }, {path});
  // Length 0: an empty header is not JSON.
  test_files::write_file(path, test_files::safetensors_raw("", Bytes{}, 0));
  expect_error([&] { SafetensorsFile f(path); }, {path, "JSON"});
  // Missing file.
  expect_error([&] { SafetensorsFile f(dir / "nope.safetensors"); }, {"nope.safetensors"});
}

}  // namespace
}  // namespace strata
