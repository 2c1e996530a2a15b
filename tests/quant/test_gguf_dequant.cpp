// GGUF's own quantized tensors loaded without requantizing (docs/DESIGN.md §6): the
// Q4_0, Q4_1 and Q8_0 tensors of the tiny GGUF fixture
// (tests/data/models/llama-gguf), dequantized by quant's fast dequantize_row
// straight from the model's mapping, give exactly (bit for bit, the sign of
// zero included) the values transformers/gguf-py dequantized when the fixture
// was made (expect.json "values": d*q or d*q + m in f32 without FMA), and every
// row equals quant's reference dequantizer and the bf16 path's rounding of it.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/json.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::optional<DType> gguf_quant_type(const std::string& name) {
  if (name == "q4_0") return kQ4_0;
  if (name == "q4_1") return kQ4_1;
  if (name == "q8_0") return kQ8_0;
  return std::nullopt;
}

TEST(GgufDequant, Q4_0Q4_1Q8_0EqualTransformersValuesExactly) {
  const fs::path dir = fs::path(STRATA_TEST_DATA) / "models" / "llama-gguf";
  const Json expect = read_json_file((dir / "expect.json").string());
  const auto model = Model::open((dir / "tiny-llama.gguf").string());
  int n_tensors = 0, n_values = 0;
  std::map<DType, int> per_type;
  for (const auto& [name, et] : expect.at("tensors").items()) {
    const std::optional<DType> want_type = gguf_quant_type(et.at("dtype").get<std::string>());
    if (!want_type) continue;
    SCOPED_TRACE(name);
    const TensorInfo& t = model->desc().get(name);
    ASSERT_EQ(t.dtype, *want_type);
    ASSERT_EQ(t.shape, et.at("shape").get<std::vector<int64_t>>());
    const int64_t cols = t.shape.back(), rows = t.n_elems() / cols;
    const size_t rb = row_bytes(t.dtype, cols);
    const std::span<const std::byte> bytes = model->bytes(t);
    ASSERT_EQ(bytes.size(), rb * static_cast<size_t>(rows));
    ASSERT_EQ(bytes.size(), et.at("nbytes").get<size_t>());
    // The mapped bytes are the file's: the first block as the fixture recorded it.
    const std::string hex = et.at("first_block_hex").get<std::string>();
    ASSERT_EQ(hex.size(), 2u * static_cast<size_t>(dtype_info(t.dtype).block_bytes));
    for (size_t i = 0; i < hex.size() / 2; ++i) {
      ASSERT_EQ(static_cast<unsigned>(bytes[i]), std::stoul(hex.substr(2 * i, 2), nullptr, 16))
          << "byte " << i;
    }
    // Blocks need 2-byte alignment; GGUF aligns tensor data to 32.
    ASSERT_EQ(reinterpret_cast<uintptr_t>(bytes.data()) % 2, 0u);
    std::vector<float> fast(static_cast<size_t>(cols)), ref(fast.size());
    std::vector<uint16_t> bf(fast.size());
    for (int64_t r = 0; r < rows; ++r) {
      const std::byte* row = bytes.data() + static_cast<size_t>(r) * rb;
      dequantize_row(t.dtype, row, fast.data(), cols);
      dequantize_row_ref(t.dtype, row, ref.data(), cols);
      ASSERT_EQ(std::memcmp(fast.data(), ref.data(), fast.size() * 4), 0) << "row " << r;
      dequantize_row_bf16(t.dtype, row, bf.data(), cols);
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(bf[c], f32_to_bf16(ref[c])) << r << " " << c;
    }
    for (const auto& pair : et.at("values")) {
      const int64_t idx = pair.at(0).get<int64_t>();
      const float want = static_cast<float>(pair.at(1).get<double>());
      ASSERT_LT(idx, t.n_elems());
      dequantize_row(t.dtype, bytes.data() + static_cast<size_t>(idx / cols) * rb, fast.data(),
                     cols);
      const float got = fast[static_cast<size_t>(idx % cols)];
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
          << "element " << idx << ": " << got << " vs " << want;
      ++n_values;
    }
    ++n_tensors;
    ++per_type[t.dtype];
  }
  // The fixture has each of the three formats several times.
  EXPECT_GE(per_type[kQ4_0], 4);
  EXPECT_GE(per_type[kQ4_1], 4);
  EXPECT_GE(per_type[kQ8_0], 4);
  EXPECT_GE(n_values, 9 * n_tensors - 5);
}

}  // namespace
}  // namespace strata
