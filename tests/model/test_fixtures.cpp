// The fixture models written by scripts/make_fixtures.py with transformers
// (tests/data/models/{opt,llama,qwen2}) and the gguf package
// (tests/data/models/llama-gguf): Model::open must give the hyper-parameters
// recorded in each expect.json and, for every tensor, the recorded shape,
// dtype and element values (quantized GGUF tensors are compared after a
// reference dequantization written here from the GGUF block layouts).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "io/json.h"
#include "model/model.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  const char* name;
  const char* model;  // relative to the fixture folder; "" = the folder itself
};

void PrintTo(const Fixture& f, std::ostream* os) { *os << f.name; }

const Fixture kFixtures[] = {{"opt", ""}, {"llama", ""}, {"qwen2", ""}, {"llama-gguf", "tiny-llama.gguf"}};

float f16(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Element `idx` (row-major flat index) of a tensor, dequantized to f32 the way
// the GGUF block formats define it. Returns NaN for a dtype it does not know.
float element(const TensorInfo& t, std::span<const std::byte> bytes, int64_t idx) {
  const std::byte* p = bytes.data();
  switch (t.dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p + 4 * idx, 4);
      return f;
    }
    case DType::kF16: return f16(p + 2 * idx);
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * idx, 2);
      return bf16_to_f32(h);
    }
    default: break;
  }
  // Rows are whole blocks of 32, so the flat index picks block idx/32, element idx%32.
  const int64_t block = idx / 32, j = idx % 32;
  const std::byte* b = p + block * dtype_info(t.dtype).block_bytes;
  if (t.dtype == kQ8_0) {  // f16 d, int8 q[32]: x = d*q
    return f16(b) * static_cast<float>(static_cast<int8_t>(b[2 + j]));
  }
  // 4-bit: byte k of the 16 holds element k (low nibble) and k + 16 (high nibble).
  const int qs_at = t.dtype == kQ4_0 ? 2 : 4;
  const auto byte = static_cast<uint8_t>(b[qs_at + (j % 16)]);
  const int q = j < 16 ? (byte & 0x0f) : (byte >> 4);
  if (t.dtype == kQ4_0) return f16(b) * static_cast<float>(q - 8);  // x = d*(q-8)
  if (t.dtype == kQ4_1) return f16(b) * static_cast<float>(q) + f16(b + 2);  // x = d*q + m
  return NAN;
}

// The expect.json dtype names: ours for float types, GGUF's for quantized ones.
std::string expect_dtype_name(DType t) {
  if (t == kQ8_0) return "q8_0";
  if (t == kQ4_0) return "q4_0";
  if (t == kQ4_1) return "q4_1";
  return std::string(dtype_name(t));
}

class FixtureModel : public ::testing::TestWithParam<Fixture> {};

TEST_P(FixtureModel, MatchesExpectJson) {
  const Fixture fx = GetParam();
  const fs::path dir = fs::path(STRATA_TEST_DATA) / "models" / fx.name;
  const fs::path expect_path = dir / "expect.json";
  if (!fs::exists(expect_path)) {
    GTEST_SKIP() << expect_path << " is absent; scripts/make_fixtures.py writes it";
  }
  const Json expect = read_json_file(expect_path.string());
  const std::string model_path = std::string(fx.model).empty() ? dir.string() : (dir / fx.model).string();
  const auto model = Model::open(model_path);
  const ModelConfig& c = model->config();
  const ModelDesc& d = model->desc();

  // ---- hyper-parameters ----
  const Json& ec = expect.at("config");
  int compared = 0;
  auto int_key = [&](const char* key, int64_t got) {
    if (!ec.contains(key)) return;
    ++compared;
    if (ec[key].is_null()) {
      EXPECT_EQ(got, -1) << key;
    } else {
      EXPECT_EQ(got, ec[key].get<int64_t>()) << key;
    }
  };
  auto bool_key = [&](const char* key, bool got) {
    if (!ec.contains(key)) return;
    ++compared;
    EXPECT_EQ(got, ec[key].get<bool>()) << key;
  };
  auto float_key = [&](const char* key, float got) {
    if (!ec.contains(key)) return;
    ++compared;
    // The config stores the value as a float32: exact after the same rounding.
    EXPECT_EQ(got, static_cast<float>(ec[key].get<double>())) << key;
  };
  if (ec.contains("architecture")) {
    ++compared;
    const std::string a = ec["architecture"];
    const std::string want = a == "llama" ? "LlamaForCausalLM" : a == "qwen2" ? "Qwen2ForCausalLM" : a;
    EXPECT_EQ(c.architecture, want);
  }
  if (ec.contains("family")) {
    ++compared;
    EXPECT_EQ(family_name(c.family), ec["family"].get<std::string>());
  }
  int_key("n_layer", c.n_layer);
  int_key("hidden", c.n_embd);
  int_key("heads", c.n_head);
  int_key("kv_heads", c.n_kv_head);
  int_key("head_dim", c.head_dim);
  int_key("ffn", c.n_ff);
  int_key("vocab", c.n_vocab);
  int_key("max_pos", c.n_ctx);
  if (c.learned_pos) int_key("pos_offset", c.pos_offset);
  int_key("bos_id", c.bos_id);
  float_key("norm_eps", c.norm_eps);
  float_key("rope_theta", c.rope_theta);
  bool_key("qkv_bias", c.attn_qkv_bias);
  bool_key("tie_embeddings", c.tie_embeddings);
  if (ec.contains("norm")) {
    ++compared;
    EXPECT_EQ(c.norm, ec["norm"] == "layernorm" ? NormKind::kLayerNorm : NormKind::kRmsNorm);
  }
  if (ec.contains("act")) {
    ++compared;
    EXPECT_EQ(activation_name(c.act), ec["act"].get<std::string>());
  }
  if (ec.contains("eos_ids")) {
    ++compared;
    EXPECT_EQ(c.eos_ids, ec["eos_ids"].get<std::vector<int64_t>>());
  }
  if (ec.contains("dtype")) {
    ++compared;
    EXPECT_EQ(c.source_dtype, ec["dtype"].get<std::string>());
  }
  if (ec.contains("rope_layout")) {
    ++compared;
    EXPECT_EQ(ec["rope_layout"].get<std::string>().rfind(std::string(rope_layout_name(c.rope_layout)), 0), 0u)
        << ec["rope_layout"];
  }
  if (ec.contains("rope_scaling")) {
    ++compared;
    const Json& rs = ec["rope_scaling"];
    if (rs.is_null()) {
      EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
    } else {
      EXPECT_EQ(rope_scaling_name(c.rope_scaling.type), rs.value("rope_type", rs.value("type", "")));
      EXPECT_EQ(c.rope_scaling.factor, static_cast<float>(rs.at("factor").get<double>()));
      if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
        EXPECT_EQ(c.rope_scaling.low_freq_factor, static_cast<float>(rs.at("low_freq_factor").get<double>()));
        EXPECT_EQ(c.rope_scaling.high_freq_factor, static_cast<float>(rs.at("high_freq_factor").get<double>()));
        EXPECT_EQ(c.rope_scaling.original_max_position, rs.at("original_max_position_embeddings").get<int64_t>());
      }
    }
  }
  EXPECT_GE(compared, 15) << "expect.json config has too few known keys to check";

  // ---- tensors ----
  std::map<std::string, const TensorInfo*> by_source;
  for (const auto& t : d.tensors) by_source[t.source_name] = &t;
  const Json& et = expect.at("tensors");
  EXPECT_EQ(et.size(), d.tensors.size()) << "expect.json lists every tensor of the model";
  int64_t n_values = 0;
  for (const auto& [name, e] : et.items()) {
    SCOPED_TRACE(name);
    auto it = by_source.find(name);
    ASSERT_NE(it, by_source.end()) << "tensor not in the model description";
    const TensorInfo& t = *it->second;
    EXPECT_EQ(t.shape, e.at("shape").get<std::vector<int64_t>>());
    EXPECT_EQ(expect_dtype_name(t.dtype), e.at("dtype").get<std::string>());
    if (e.contains("file")) {
      EXPECT_EQ(fs::path(d.files[t.file].path).filename().string(), e["file"].get<std::string>());
    }
    const auto bytes = model->bytes(t);
    for (const Json& pair : e.at("values")) {
      const int64_t idx = pair.at(0).get<int64_t>();
      ASSERT_GE(idx, 0);
      ASSERT_LT(idx, t.n_elems());
      const float want = static_cast<float>(pair.at(1).get<double>());
      // Values are recorded exactly as stored (quantized ones as dequantized
      // in f32 with the same operations), so every element must match exactly.
      EXPECT_EQ(element(t, bytes, idx), want) << "element " << idx;
      ++n_values;
    }
  }
  EXPECT_GT(n_values, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, FixtureModel, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace strata
