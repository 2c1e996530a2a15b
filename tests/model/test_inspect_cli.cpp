// `strata inspect` end to end: a small model in JSON and text, and malformed
// model files: exit status 1 and exactly one line on stderr naming the file.
#include <gtest/gtest.h>

#include <sstream>

#include <algorithm>

#include "io/json.h"
#include "model/model_dirs.h"
#include "support/run_cli.h"

namespace strata {
namespace {

// True when `text` has the line "<key>:", padding, then `value` (and nothing else).
bool has_line(const std::string& text, const std::string& key, const std::string& value) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    const size_t v = line.find_first_not_of(' ', key.size() + 1);
    if (v != std::string::npos && line.substr(v) == value) return true;
  }
  return false;
}

using test_files::HfShape;
using test_files::TempDir;

void make_qwen2_dir(const std::filesystem::path& dir) {
  HfShape s;
  test_files::write_text(dir / "config.json",
                         R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 16, "num_hidden_layers": 2,
                             "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 24,
                             "vocab_size": 40, "max_position_embeddings": 32, "tie_word_embeddings": true,
                             "rope_theta": 1000000.0, "eos_token_id": 3})");
  test_files::write_weights(dir, test_files::random_tensors(test_files::llama_hf_tensors(s, true, false, false, true), DType::kBF16), 2);
  test_files::write_text(dir / "tokenizer.json",
                         R"({"version": "1.0", "added_tokens": [{"id": 41, "content": "<|x|>"}],
                             "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split"}, {"type": "ByteLevel"}]},
                             "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})");
}

TEST(InspectCli, JsonAndTextForASmallModel) {
  TempDir dir;
  const std::filesystem::path model = dir.path() / "qwen";
  std::filesystem::create_directories(model);
  make_qwen2_dir(model);
  auto r = test::run_strata({"inspect", "--model", model.string(), "--json"}, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["architecture"], "Qwen2ForCausalLM");
  EXPECT_EQ(j["family"], "llama");
  EXPECT_EQ(j["format"], "hf");
  EXPECT_EQ(j["n_layer"], 2);
  EXPECT_EQ(j["n_embd"], 16);
  EXPECT_EQ(j["n_head"], 4);
  EXPECT_EQ(j["n_kv_head"], 2);
  EXPECT_EQ(j["head_dim"], 4);
  EXPECT_EQ(j["n_ff"], 24);
  EXPECT_EQ(j["n_vocab"], 40);
  EXPECT_EQ(j["n_ctx"], 32);
  EXPECT_EQ(j["norm"], "rms_norm");
  EXPECT_EQ(j["tie_embeddings"], true);
  EXPECT_EQ(j["attn_qkv_bias"], true);
  EXPECT_EQ(j["position"]["kind"], "rope");
  EXPECT_EQ(j["position"]["layout"], "half");
  EXPECT_EQ(j["position"]["theta"], 1e6);
  EXPECT_EQ(j["eos_ids"], Json::array({3}));
  const int64_t E = 16, F = 24;
  const int64_t n_params = 40 * E + E + 2 * (2 * E + E * 16 + 16 + 2 * (8 * E + 8) + 16 * E + 3 * E * F);
  EXPECT_EQ(j["n_params"], n_params);
  EXPECT_EQ(j["bytes_per_dtype"]["bf16"], n_params * 2);
  EXPECT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["tokenizer"]["kind"], "BPE");
  EXPECT_EQ(j["tokenizer"]["pre"], "Sequence[Split, ByteLevel]");
  EXPECT_EQ(j["tokenizer"]["n_tokens"], 42);

  r = test::run_strata({"inspect", "--model", model.string()}, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "layers", "2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "hidden size", "16")) << r.out;
  EXPECT_TRUE(has_line(r.out, "vocab size", "40")) << r.out;
  EXPECT_TRUE(has_line(r.out, "tokenizer", "BPE, pre-tokenizer Sequence[Split, ByteLevel], 42 tokens")) << r.out;
  EXPECT_EQ(r.err, "");
}

// Each malformed model: exit status 1, one line on stderr that names the file.
TEST(InspectCli, MalformedModelsFailWithOneLine) {
  TempDir dir;
  struct Case {
    const char* label;
    std::string path;     // passed to --model
    std::string named;    // must appear in the message
  };
  std::vector<Case> cases;
  // GGUF: bad magic, truncated, tensor data past the end.
  {
    test_files::GgufBuilder g;
    g.kv_str("general.architecture", "llama");
    g.tensor_f("w", DType::kF32, {64}, test_files::random_values(64, 1));
    test_files::Bytes good = g.build();
    test_files::Bytes bad = good;
    bad[0] = 'X';
    test_files::write_file(dir / "magic.gguf", bad);
    cases.push_back({"bad magic", dir / "magic.gguf", dir / "magic.gguf"});
    test_files::write_file(dir / "short.gguf", test_files::Bytes(good.begin(), good.begin() + 40));
    cases.push_back({"truncated gguf", dir / "short.gguf", dir / "short.gguf"});
    test_files::write_file(dir / "cut.gguf", test_files::Bytes(good.begin(), good.end() - 4));
    cases.push_back({"tensor past the end", dir / "cut.gguf", dir / "cut.gguf"});
    test_files::write_file(dir / "arch.gguf", good);
    cases.push_back({"gguf without model metadata", dir / "arch.gguf", dir / "arch.gguf"});
  }
  // HF directories: truncated shard, bad config JSON, newline in a tensor name.
  HfShape s;
  const std::string config = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 16, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 24, "vocab_size": 40,
      "max_position_embeddings": 32})";
  const auto tensors = test_files::random_tensors(test_files::llama_hf_tensors(s, false, false, false, false), DType::kF16);
  {
    const auto d = dir.path() / "truncated";
    std::filesystem::create_directories(d);
    test_files::write_text(d / "config.json", config);
    test_files::Bytes st = test_files::safetensors_file(tensors);
    st.resize(st.size() / 2);
    test_files::write_file(d / "model.safetensors", st);
    cases.push_back({"truncated safetensors", d.string(), (d / "model.safetensors").string()});
  }
  {
    const auto d = dir.path() / "badjson";
    std::filesystem::create_directories(d);
    test_files::write_text(d / "config.json", "{\"architectures\": [\"LlamaForCausalLM\"],\n \"hidden_size\": 16,\n");
    test_files::write_weights(d, tensors);
    cases.push_back({"bad config JSON", d.string(), (d / "config.json").string()});
  }
  {
    const auto d = dir.path() / "gpt2";
    std::filesystem::create_directories(d);
    test_files::write_text(d / "config.json", R"({"architectures": ["GPT2LMHeadModel"]})");
    cases.push_back({"unsupported architecture", d.string(), (d / "config.json").string()});
  }
  {
    const auto d = dir.path() / "newline";
    std::filesystem::create_directories(d);
    test_files::write_text(d / "config.json", config);
    auto t = tensors;
    t.push_back(test_files::StTensor{"evil\nname", "I8", {1}, {0}});
    test_files::write_weights(d, t);
    cases.push_back({"newline in a tensor name", d.string(), (d / "model.safetensors").string()});
  }
  {
    const auto d = dir.path() / "shape";
    std::filesystem::create_directories(d);
    test_files::write_text(d / "config.json", config);
    auto t = tensors;
    t[0].shape = {20, 32};  // embed_tokens: same bytes, wrong shape
    test_files::write_weights(d, t);
    cases.push_back({"wrong shape", d.string(), (d / "model.safetensors").string()});
  }
  cases.push_back({"missing path", dir / "does-not-exist", dir / "does-not-exist"});

  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const auto r = test::run_strata({"inspect", "--model", c.path}, dir.path().string());
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.back(), '\n') << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(c.named), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace strata
