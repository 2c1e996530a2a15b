// GGUF reader: metadata and tensors of a small file read back, and every
// malformed file refused with an Error naming it (bad magic, version,
// alignment, dims, types, lengths and offsets past the end, overlaps,
// duplicates, truncation at every length, byte flips).
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/file_writers.h"
#include "io/gguf.h"

namespace strata {
namespace {

using test_files::Bytes;
using test_files::GgufBuilder;
using test_files::GgufTensorSpec;
using test_files::TempDir;

// A small valid file: scalars of several types, arrays, and tensors of
// F32, F16 and Q8_0 (the Q8_0 block bytes are arbitrary but well-formed).
GgufBuilder small_builder() {
  GgufBuilder g;
  g.kv_str("general.architecture", "llama");
  g.kv_u32("llama.block_count", 2);
  g.kv_f32("llama.rope.freq_base", 10000.0f);
  g.kv_bool("tokenizer.ggml.add_bos_token", true);
  g.kv_str_array("tokenizer.ggml.tokens", {"a", "bc", "", "d\xc3\xa9"});
  g.kv_i32_array("tokenizer.ggml.token_type", {1, 1, 3, 6});
  g.tensor_f("norm.weight", DType::kF32, {8}, test_files::random_values(8, 1));
  g.tensor_f("emb.weight", DType::kF16, {3, 8}, test_files::random_values(24, 2));
  GgufTensorSpec q;
  q.name = "q.weight";
  q.ne = {32, 2};
  q.type = test_files::kGgmlQ8_0;
  for (int b = 0; b < 2; ++b) {
    const uint16_t d = f32_to_f16(0.01f * (b + 1));
    q.data.push_back(static_cast<uint8_t>(d));
    q.data.push_back(static_cast<uint8_t>(d >> 8));
    for (int i = 0; i < 32; ++i) q.data.push_back(static_cast<uint8_t>(i - 16));
  }
  g.tensor(q);
  return g;
}

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

TEST(Gguf, SmallFileReadsBack) {
  TempDir dir;
  const std::string path = dir / "m.gguf";
  test_files::write_file(path, small_builder().build());
  GgufFile g(path);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.data_offset() % 32, 0u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.block_count"), 2);
  EXPECT_EQ(g.get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(g.get_float("llama.block_count"), 2.0);
  EXPECT_EQ(g.get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(g.get_int("absent"), std::nullopt);
  const auto tokens = g.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens);
  EXPECT_EQ(*tokens, (std::vector<std::string_view>{"a", "bc", "", "d\xc3\xa9"}));
  EXPECT_EQ(*g.get_int_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 1, 3, 6}));
  // Wrong types are errors naming the key.
  expect_error([&] { (void)g.get_int("general.architecture"); }, {path, "general.architecture"});
  expect_error([&] { (void)g.get_string("llama.block_count"); }, {"llama.block_count"});
  expect_error([&] { (void)g.get_string_array("tokenizer.ggml.token_type"); }, {"token_type"});

  ASSERT_EQ(g.tensors().size(), 3u);
  const auto* norm = g.find_tensor("norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->shape, (std::vector<int64_t>{8}));
  const auto nv = test_files::random_values(8, 1);
  for (int i = 0; i < 8; ++i) {
    float f;
    std::memcpy(&f, g.file().data() + norm->offset + 4 * i, 4);
    EXPECT_EQ(f, nv[i]);
  }
  const auto* emb = g.find_tensor("emb.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{3, 8}));  // row-major: GGUF ne reversed
  EXPECT_EQ(emb->dtype, DType::kF16);
  const auto ev = test_files::random_values(24, 2);
  for (int i = 0; i < 24; ++i) {
    uint16_t h;
    std::memcpy(&h, g.file().data() + emb->offset + 2 * i, 2);
    EXPECT_EQ(f16_to_f32(h), f16_to_f32(f32_to_f16(ev[i])));
  }
  const auto* q = g.find_tensor("q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, kQ8_0);
  EXPECT_EQ(q->nbytes, 68u);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{2, 32}));
  const auto* p = reinterpret_cast<const int8_t*>(g.file().data() + q->offset);
  EXPECT_EQ(p[2], -16);
  EXPECT_EQ(p[34 + 2 + 31], 15);
  EXPECT_EQ(g.find_tensor("nope"), nullptr);
}

TEST(Gguf, CustomAlignmentAndVersion2) {
  TempDir dir;
  const std::string path = dir / "a.gguf";
  GgufBuilder b = small_builder();
  b.kv_u32("general.alignment", 64);
  b.alignment = 64;
  b.version = 2;
  test_files::write_file(path, b.build());
  GgufFile g(path);
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.version(), 2u);
  for (const auto& t : g.tensors()) EXPECT_EQ((t.offset - g.data_offset()) % 64, 0u);
}

TEST(Gguf, TruncatedAtEveryLength) {
  TempDir dir;
  const Bytes full = small_builder().build();
  const std::string path = dir / "t.gguf";
  for (size_t len = 0; len < full.size(); ++len) {
    test_files::write_file(path, Bytes(full.begin(), full.begin() + static_cast<ptrdiff_t>(len)));
    EXPECT_THROW(GgufFile{path}, Error) << "length " << len;
  }
}

TEST(Gguf, ByteFlipsNeverCrash) {
  TempDir dir;
  const Bytes full = small_builder().build();
  const std::string path = dir / "f.gguf";
  int accepted = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t mask : {0x01, 0x10, 0x80, 0xff}) {
      Bytes b = full;
      b[i] ^= mask;
      test_files::write_file(path, b);
      try {
        GgufFile g(path);
        ++accepted;
        for (const auto& t : g.tensors()) ASSERT_TRUE(g.file().in_bounds(t.offset, t.nbytes));
        // Array getters walk the encoded elements: they must stay inside too.
        for (const auto& [key, v] : g.metadata()) {
          if (v.type != GgufType::kArray) continue;
          if (v.elem_type == GgufType::kString) (void)g.get_string_array(key);
        }
      } catch (const Error&) {
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST(Gguf, MalformedFilesAreRefused) {
  TempDir dir;
  const std::string path = dir / "bad.gguf";
  auto check = [&](const char* label, const GgufBuilder& b, std::initializer_list<std::string> parts) {
    SCOPED_TRACE(label);
    test_files::write_file(path, b.build());
    std::vector<std::string> all(parts);
    all.push_back(path);
    try {
      GgufFile g(path);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& p : all) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  };
  {
    GgufBuilder b = small_builder();
    b.magic = 0x46554746;
    check("bad magic", b, {"not a GGUF file"});
  }
  {
    GgufBuilder b = small_builder();
    b.version = 1;
    check("version 1", b, {"version 1"});
    b.version = 4;
    check("version 4", b, {"version 4"});
  }
  {
    GgufBuilder b = small_builder();
    b.kv_u32("general.alignment", 48);
    check("alignment not a power of two", b, {"alignment", "48"});
  }
  {
    GgufBuilder b = small_builder();
    b.kv_u32("general.alignment", 0);
    check("alignment 0", b, {"alignment"});
  }
  {
    GgufBuilder b = small_builder();
    b.kv_str("general.alignment", "32");
    check("alignment a string", b, {"alignment"});
  }
  {
    GgufBuilder b;
    b.tensor(GgufTensorSpec{"zero_dims", {}, test_files::kGgmlF32, Bytes(4, 0), std::nullopt});
    check("n_dims 0", b, {"'zero_dims'", "0 dimensions"});
  }
  {
    GgufBuilder b;
    b.tensor(GgufTensorSpec{"five", {1, 1, 1, 1, 1}, test_files::kGgmlF32, Bytes(4, 0), std::nullopt});
    check("n_dims 5", b, {"'five'", "5 dimensions"});
  }
  {
    GgufBuilder b;
    b.tensor(GgufTensorSpec{"big", {uint64_t{1} << 32, uint64_t{1} << 32}, test_files::kGgmlF32, Bytes(4, 0), std::nullopt});
    check("dimension overflow", b, {"'big'", "dimension"});
  }
  {
    GgufBuilder b;
    b.tensor(GgufTensorSpec{"zero", {0}, test_files::kGgmlF32, Bytes{}, std::nullopt});
    check("zero dimension", b, {"'zero'"});
  }
  {
    GgufBuilder b;
    b.tensor(GgufTensorSpec{"iq2", {256}, 16 /* IQ2_XXS */, Bytes(66, 0), std::nullopt});
    check("unsupported tensor type", b, {"'iq2'", "IQ2_XXS"});
    GgufBuilder c;
    c.tensor(GgufTensorSpec{"t999", {32}, 999, Bytes(32, 0), std::nullopt});
    check("unknown tensor type", c, {"'t999'", "999"});
  }
  {
    GgufBuilder b;
    b.tensor(GgufTensorSpec{"partial_block", {16}, test_files::kGgmlQ8_0, Bytes(34, 0), std::nullopt});
    check("row not a whole number of blocks", b, {"'partial_block'", "blocks"});
  }
  {
    GgufBuilder b;
    Bytes v;
    test_files::put_u64(v, uint64_t{1} << 40);
    v.push_back('x');
    b.kv_raw("general.name", test_files::kGString, v);
    check("string length past EOF", b, {"general.name"});
  }
  {
    GgufBuilder b;
    Bytes v;
    test_files::put_u64(v, ~uint64_t{0});
    b.kv_raw("general.name", test_files::kGString, v);
    check("string length 2^64-1", b, {"general.name"});
  }
  {
    GgufBuilder b;
    Bytes v;
    test_files::put_u32(v, test_files::kGString);
    test_files::put_u64(v, uint64_t{1} << 50);
    b.kv_raw("tokenizer.ggml.tokens", test_files::kGArray, v);
    check("string array count past EOF", b, {"tokenizer.ggml.tokens"});
  }
  {
    GgufBuilder b;
    Bytes v;
    test_files::put_u32(v, test_files::kGI32);
    test_files::put_u64(v, uint64_t{1} << 62);
    b.kv_raw("tokenizer.ggml.token_type", test_files::kGArray, v);
    check("int array count past EOF", b, {"tokenizer.ggml.token_type"});
  }
  {
    GgufBuilder b;
    Bytes v;
    test_files::put_u32(v, test_files::kGArray);
    test_files::put_u64(v, 0);
    b.kv_raw("nested", test_files::kGArray, v);
    check("array of arrays", b, {"'nested'"});
  }
  {
    GgufBuilder b;
    b.kv_raw("weird", 13, Bytes(4, 0));
    check("unknown value type", b, {"'weird'", "13"});
  }
  {
    GgufBuilder b = small_builder();
    b.n_kv_override = uint64_t{1} << 60;
    check("metadata count too large", b, {"metadata count"});
  }
  {
    GgufBuilder b = small_builder();
    b.n_tensors_override = uint64_t{1} << 60;
    check("tensor count too large", b, {"tensor count"});
  }
  {
    GgufBuilder b = small_builder();
    b.tensor(GgufTensorSpec{"far", {8}, test_files::kGgmlF32, {}, uint64_t{1} << 20});
    check("tensor data past EOF", b, {"'far'", "past the end"});
  }
  {
    GgufBuilder b = small_builder();
    b.tensor(GgufTensorSpec{"huge_offset", {8}, test_files::kGgmlF32, {}, ~uint64_t{31}});
    check("tensor offset near 2^64", b, {"'huge_offset'"});
  }
  {
    GgufBuilder b = small_builder();
    b.tensor(GgufTensorSpec{"misaligned", {1}, test_files::kGgmlF32, {}, 4});
    check("misaligned offset", b, {"'misaligned'", "alignment"});
  }
  {
    GgufBuilder b = small_builder();  // norm.weight is at 0 and 32 bytes long
    b.tensor(GgufTensorSpec{"overlapping", {8}, test_files::kGgmlF32, {}, 0});
    check("overlapping tensors", b, {"overlap", "'overlapping'"});
  }
  {
    GgufBuilder b = small_builder();
    b.kv_u32("llama.block_count", 3);
    check("duplicate key", b, {"duplicate", "llama.block_count"});
  }
  {
    GgufBuilder b = small_builder();
    b.tensor_f("norm.weight", DType::kF32, {8}, test_files::random_values(8, 5));
    check("duplicate tensor", b, {"duplicate", "norm.weight"});
  }
  {
    GgufBuilder b = small_builder();
    b.kv_str("bad\nkey", "x");
    b.kv_str("bad\nkey", "y");
    check("control characters stay escaped", b, {"bad\\nkey"});
  }
}

TEST(Gguf, MissingFile) {
  TempDir dir;
  expect_error([&] { GgufFile g(dir / "none.gguf"); }, {"none.gguf", "cannot open"});
  expect_error([&] { GgufFile g(dir.path().string()); }, {"not a regular file"});
}

}  // namespace
}  // namespace strata
