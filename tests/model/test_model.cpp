// Model::open and the configs: each supported architecture from a small
// Hugging Face directory (single file and sharded, f32/f16/bf16) and from
// GGUF, canonical names mapped to the right bytes, and clear errors for
// unsupported architectures, missing tensors and wrong shapes.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "model/model.h"
#include "model/model_dirs.h"

namespace strata {
namespace {

using test_files::HfShape;
using test_files::StTensor;
using test_files::TempDir;

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "no Error thrown";
  return {};
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

// config.json text: the base keys of a Llama-family config, with `extra`
// ('"key": value, ...') merged over them; a null in `extra` removes the key.
std::string llama_config(const HfShape& s, const std::string& extra = "",
                         const std::string& arch = "LlamaForCausalLM") {
  Json j = {{"architectures", {arch}},
            {"hidden_size", s.n_embd},
            {"num_hidden_layers", s.n_layer},
            {"num_attention_heads", s.n_head},
            {"num_key_value_heads", s.n_kv_head},
            {"intermediate_size", s.n_ff},
            {"vocab_size", s.n_vocab},
            {"max_position_embeddings", s.n_ctx},
            {"rms_norm_eps", 1e-5}};
  if (!extra.empty()) {
    const Json patch = Json::parse("{" + extra.substr(extra.find_first_not_of(", ")) + "}");
    for (const auto& [k, v] : patch.items()) {
      if (v.is_null() && k[0] == '-') {
        j.erase(k.substr(1));
      } else {
        j[k] = v;
      }
    }
  }
  return j.dump();
}

std::string opt_config(const HfShape& s, const std::string& extra = "") {
  return "{\"architectures\": [\"OPTForCausalLM\"], \"model_type\": \"opt\", \"hidden_size\": " +
         std::to_string(s.n_embd) + ", \"word_embed_proj_dim\": " + std::to_string(s.n_embd) +
         ", \"num_hidden_layers\": " + std::to_string(s.n_layer) +
         ", \"num_attention_heads\": " + std::to_string(s.n_head) + ", \"ffn_dim\": " + std::to_string(s.n_ff) +
         ", \"vocab_size\": " + std::to_string(s.n_vocab) +
         ", \"max_position_embeddings\": " + std::to_string(s.n_ctx) +
         ", \"do_layer_norm_before\": true, \"activation_function\": \"relu\", \"enable_bias\": true, "
         "\"bos_token_id\": 2, \"eos_token_id\": 2" + extra + "}";
}

// Checks that every canonical tensor's bytes are the ones written under its HF name.
void expect_bytes_match(const Model& m, const std::vector<StTensor>& written) {
  std::map<std::string, const StTensor*> by_name;
  for (const auto& t : written) by_name[t.name] = &t;
  for (const auto& t : m.desc().tensors) {
    auto it = by_name.find(t.source_name);
    ASSERT_NE(it, by_name.end()) << t.source_name;
    const auto bytes = m.bytes(t);
    ASSERT_EQ(bytes.size(), it->second->data.size()) << t.name;
    EXPECT_EQ(std::memcmp(bytes.data(), it->second->data.data(), bytes.size()), 0) << t.name;
    EXPECT_EQ(t.shape, it->second->shape) << t.name;
  }
}

TEST(ModelHf, OptF16WithAndWithoutModelPrefix) {
  for (std::string prefix : {"model.decoder.", "decoder."}) {
    SCOPED_TRACE(prefix);
    TempDir dir;
    HfShape s;
    s.n_head = 4;
    s.head_dim = 4;
    test_files::write_text(dir / "config.json", opt_config(s));
    auto tensors = test_files::random_tensors(test_files::opt_hf_tensors(s, prefix), DType::kF16);
    tensors.push_back(test_files::st_tensor("lm_head.weight", DType::kF16, {s.n_vocab, s.n_embd}, 99));
    test_files::write_weights(dir.path(), tensors);
    const auto m = Model::open(dir.path().string());
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.architecture, "OPTForCausalLM");
    EXPECT_EQ(c.family, Family::kOpt);
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.n_embd, 16);
    EXPECT_EQ(c.n_head, 4);
    EXPECT_EQ(c.n_kv_head, 4);
    EXPECT_EQ(c.head_dim, 4);
    EXPECT_EQ(c.n_ff, 24);
    EXPECT_EQ(c.n_ctx, 32);
    EXPECT_EQ(c.norm, NormKind::kLayerNorm);
    EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
    EXPECT_EQ(c.act, Activation::kRelu);
    EXPECT_FALSE(c.gated_ffn);
    EXPECT_TRUE(c.attn_qkv_bias && c.attn_out_bias && c.ffn_bias && c.norm_bias);
    EXPECT_TRUE(c.tie_embeddings);
    EXPECT_TRUE(c.learned_pos);
    EXPECT_EQ(c.pos_offset, 2);
    EXPECT_EQ(c.rope_layout, RopeLayout::kNone);
    EXPECT_EQ(c.bos_id, 2);
    EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{2}));
    EXPECT_EQ(c.source_dtype, "f16");
    const ModelDesc& d = m->desc();
    EXPECT_EQ(d.format, ModelFormat::kHfDirectory);
    // 4 globals + 16 per layer; the tied lm_head is not listed.
    EXPECT_EQ(d.tensors.size(), 4u + 16u * 2);
    EXPECT_EQ(d.find("output.weight"), nullptr);
    EXPECT_EQ(d.get("position_embd.weight").shape, (std::vector<int64_t>{34, 16}));
    EXPECT_EQ(d.get("blk.1.ffn_up.weight").source_name, prefix + "layers.1.fc1.weight");
    EXPECT_EQ(d.get("blk.1.ffn_down.bias").source_name, prefix + "layers.1.fc2.bias");
    EXPECT_EQ(d.get("blk.0.attn_norm.bias").source_name, prefix + "layers.0.self_attn_layer_norm.bias");
    EXPECT_EQ(d.get("blk.0.ffn_norm.weight").source_name, prefix + "layers.0.final_layer_norm.weight");
    EXPECT_EQ(d.get("blk.0.attn_output.weight").source_name, prefix + "layers.0.self_attn.out_proj.weight");
    EXPECT_EQ(d.get("output_norm.bias").source_name, prefix + "final_layer_norm.bias");
    EXPECT_EQ(d.find("blk.0.ffn_gate.weight"), nullptr);
    expect_bytes_match(*m, tensors);
    // Parameters: embeddings + positions + final norm + layers.
    const int64_t E = 16, F = 24;
    const int64_t per_layer = 4 * (E * E + E) + 4 * E + (F * E + F) + (E * F + E);
    EXPECT_EQ(d.n_params(), 40 * E + 34 * E + 2 * E + 2 * per_layer);
    const auto bytes = d.bytes_per_dtype();
    ASSERT_EQ(bytes.size(), 1u);
    EXPECT_EQ(bytes[0].first, "f16");
    EXPECT_EQ(bytes[0].second, static_cast<uint64_t>(d.n_params()) * 2);
    ASSERT_EQ(d.files.size(), 1u);
    EXPECT_EQ(d.files[0].path, dir / "model.safetensors");
    EXPECT_EQ(d.files[0].size, std::filesystem::file_size(dir / "model.safetensors"));
    EXPECT_GT(d.files[0].mtime_ns, 0);
    EXPECT_THROW(d.get("blk.9.attn_q.weight"), Error);
  }
}

TEST(ModelHf, OptVariantsThatAreRefused) {
  TempDir dir;
  HfShape s;
  test_files::write_weights(dir.path(), test_files::random_tensors(test_files::opt_hf_tensors(s, "model.decoder."), DType::kF16));
  const std::string cfg = dir / "config.json";
  test_files::write_text(cfg, opt_config(s, ", \"do_layer_norm_before\": false"));
  // The duplicate key is refused before anything else.
  EXPECT_CONTAINS(error_of([&] { Model::open(dir.path().string()); }), "twice");
  // OPT-350m: post-LayerNorm and a projected embedding.
  std::string c350 = opt_config(s);
  c350.replace(c350.find("\"do_layer_norm_before\": true"), 28, "\"do_layer_norm_before\": false");
  test_files::write_text(cfg, c350);
  std::string msg = error_of([&] { Model::open(dir.path().string()); });
  EXPECT_CONTAINS(msg, cfg);
  EXPECT_CONTAINS(msg, "do_layer_norm_before");
  std::string proj = opt_config(s);
  proj.replace(proj.find("\"word_embed_proj_dim\": 16"), 25, "\"word_embed_proj_dim\": 8");
  test_files::write_text(cfg, proj);
  msg = error_of([&] { Model::open(dir.path().string()); });
  EXPECT_CONTAINS(msg, "word_embed_proj_dim 8");
  EXPECT_CONTAINS(msg, "hidden_size 16");
  std::string act = opt_config(s);
  act.replace(act.find("\"relu\""), 6, "\"swish\"");
  test_files::write_text(cfg, act);
  EXPECT_CONTAINS(error_of([&] { Model::open(dir.path().string()); }), "swish");
}

TEST(ModelHf, LlamaF32ShardedWithGqaHeadDimAndLlama3Rope) {
  TempDir dir;
  HfShape s;
  s.n_embd = 16;
  s.n_head = 4;
  s.n_kv_head = 2;
  s.head_dim = 8;  // not n_embd / n_head: comes from the head_dim key
  test_files::write_text(dir / "config.json",
                         llama_config(s, ", \"head_dim\": 8, \"mlp_bias\": true, \"tie_word_embeddings\": false, "
                                         "\"rope_theta\": 500000.0, \"bos_token_id\": 1, \"eos_token_id\": [2, 3], "
                                         "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                                         "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                                         "\"original_max_position_embeddings\": 16}"));
  test_files::write_text(dir / "generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [3, 5]})");
  auto tensors = test_files::random_tensors(test_files::llama_hf_tensors(s, false, false, true, false), DType::kF32);
  tensors.push_back(test_files::st_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {4}, 5));
  test_files::write_weights(dir.path(), tensors, 3);
  const auto m = Model::open(dir.path().string());
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.family, Family::kLlama);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.norm, NormKind::kRmsNorm);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.act, Activation::kSilu);
  EXPECT_TRUE(c.gated_ffn);
  EXPECT_FALSE(c.attn_qkv_bias);
  EXPECT_FALSE(c.attn_out_bias);
  EXPECT_TRUE(c.ffn_bias);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalf);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 16);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(c.source_dtype, "f32");
  const ModelDesc& d = m->desc();
  EXPECT_EQ(d.files.size(), 3u);
  EXPECT_EQ(d.get("blk.0.attn_q.weight").shape, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(d.get("blk.0.attn_k.weight").shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(d.get("blk.0.attn_output.weight").shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(d.get("blk.1.ffn_gate.bias").source_name, "model.layers.1.mlp.gate_proj.bias");
  EXPECT_EQ(d.get("output.weight").source_name, "lm_head.weight");
  EXPECT_EQ(d.get("output_norm.weight").source_name, "model.norm.weight");
  EXPECT_EQ(d.find("blk.0.attn_q.bias"), nullptr);
  // Globals first, then layer 0, then layer 1.
  EXPECT_EQ(d.tensors.front().name, "token_embd.weight");
  EXPECT_EQ(d.tensors.back().name, "blk.1.ffn_down.bias");
  std::set<int> files_used;
  for (const auto& t : d.tensors) files_used.insert(t.file);
  EXPECT_EQ(files_used.size(), 3u);
  // The rotary inv_freq buffer is ignored; every other written tensor is used.
  tensors.pop_back();
  expect_bytes_match(*m, tensors);
  EXPECT_EQ(d.tensors.size(), tensors.size());
}

TEST(ModelHf, Qwen2Bf16TiedWithQkvBias) {
  TempDir dir;
  HfShape s;
  test_files::write_text(dir / "config.json",
                         llama_config(s, ", \"tie_word_embeddings\": true, \"rope_theta\": 1000000.0, "
                                         "\"use_sliding_window\": false, \"sliding_window\": null, "
                                         "\"rope_scaling\": null, \"eos_token_id\": 39",
                                      "Qwen2ForCausalLM"));
  const auto tensors = test_files::random_tensors(test_files::llama_hf_tensors(s, true, false, false, true), DType::kBF16);
  test_files::write_weights(dir.path(), tensors);
  const auto m = Model::open(dir.path().string());
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.attn_qkv_bias);
  EXPECT_FALSE(c.attn_out_bias);
  EXPECT_FALSE(c.ffn_bias);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.bos_id, -1);
  EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{39}));
  EXPECT_EQ(c.source_dtype, "bf16");
  EXPECT_EQ(m->desc().get("blk.0.attn_k.bias").shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(m->desc().find("output.weight"), nullptr);
  expect_bytes_match(*m, tensors);
  EXPECT_EQ(m->desc().tensors.size(), tensors.size());
}

TEST(ModelHf, MistralAndRopeVariants) {
  TempDir dir;
  HfShape s;
  const auto tensors = test_files::random_tensors(test_files::llama_hf_tensors(s, false, false, false, false), DType::kF32);
  test_files::write_weights(dir.path(), tensors);
  const std::string cfg = dir / "config.json";
  test_files::write_text(cfg, llama_config(s, ", \"head_dim\": null", "MistralForCausalLM"));
  auto m = Model::open(dir.path().string());
  EXPECT_EQ(m->config().sliding_window, 4096);
  EXPECT_EQ(m->config().head_dim, 4);
  EXPECT_FLOAT_EQ(m->config().rope_theta, 10000.0f);
  test_files::write_text(cfg, llama_config(s, ", \"sliding_window\": null", "MistralForCausalLM"));
  EXPECT_EQ(Model::open(dir.path().string())->config().sliding_window, 0);

  test_files::write_text(cfg, llama_config(s, ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}"));
  m = Model::open(dir.path().string());
  EXPECT_EQ(m->config().rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_FLOAT_EQ(m->config().rope_scaling.factor, 2.0f);
  // The nested layout of newer configs.
  test_files::write_text(cfg, llama_config(s, ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 250000.0}"));
  m = Model::open(dir.path().string());
  EXPECT_EQ(m->config().rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FLOAT_EQ(m->config().rope_theta, 250000.0f);
  // Unsupported scaling and activation; a model_type without architectures.
  test_files::write_text(cfg, llama_config(s, ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}"));
  EXPECT_CONTAINS(error_of([&] { Model::open(dir.path().string()); }), "'yarn'");
  test_files::write_text(cfg, llama_config(s, ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}"));
  EXPECT_CONTAINS(error_of([&] { Model::open(dir.path().string()); }), "rope_scaling.low_freq_factor");
  test_files::write_text(cfg, llama_config(s, ", \"hidden_act\": \"gelu\""));
  EXPECT_CONTAINS(error_of([&] { Model::open(dir.path().string()); }), "gelu");
  test_files::write_text(cfg, llama_config(s, ", \"model_type\": \"llama\", \"-architectures\": null"));
  EXPECT_EQ(Model::open(dir.path().string())->config().architecture, "LlamaForCausalLM");
}

TEST(ModelHf, ConfigErrorsNameTheFileAndKey) {
  TempDir dir;
  HfShape s;
  test_files::write_weights(dir.path(), test_files::random_tensors(test_files::llama_hf_tensors(s, false, false, false, false), DType::kF32));
  const std::string cfg = dir / "config.json";
  auto expect_msg = [&](const std::string& text, std::initializer_list<std::string> parts) {
    test_files::write_text(cfg, text);
    const std::string msg = error_of([&] { Model::open(dir.path().string()); });
    EXPECT_CONTAINS(msg, cfg);
    for (const auto& p : parts) EXPECT_CONTAINS(msg, p);
  };
  expect_msg(R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 8})",
             {"architecture 'GPT2LMHeadModel' is not supported (supported: OPTForCausalLM, LlamaForCausalLM, "
              "MistralForCausalLM, Qwen2ForCausalLM)"});
  expect_msg(R"({"model_type": "gpt2"})", {"model_type 'gpt2' is not supported"});
  expect_msg(R"({"hidden_size": 8})", {"architectures"});
  expect_msg("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,", {"not valid JSON"});
  expect_msg("[1]", {"expected a JSON object"});
  expect_msg(llama_config(s, ", \"-intermediate_size\": null"), {"'intermediate_size' is missing"});
  expect_msg(llama_config(s, ", \"hidden_size\": \"16\""), {"'hidden_size' is a string, expected an integer"});
  expect_msg(llama_config(s, ", \"num_hidden_layers\": 0"), {"'num_hidden_layers' is 0"});
  expect_msg(llama_config(s, ", \"rms_norm_eps\": -1"), {"norm epsilon -1"});
  expect_msg(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 16, "hidden_size": 16})", {"'hidden_size' twice"});
  expect_msg(llama_config(s, ", \"num_key_value_heads\": 3"), {"n_head 4 is not a multiple of n_kv_head 3"});
  expect_msg(llama_config(s, ", \"eos_token_id\": 40"), {"eos token id 40"});
  expect_msg(llama_config(s, ", \"eos_token_id\": [2, \"x\"]"), {"eos_token_id"});
  expect_msg(llama_config(s, ", \"head_dim\": 5"), {"head_dim 5 is odd"});
}

TEST(ModelHf, MissingTensorsAndWrongShapes) {
  TempDir dir;
  HfShape s;
  test_files::write_text(dir / "config.json", llama_config(s));
  auto list = test_files::llama_hf_tensors(s, false, false, false, false);
  // Missing tensor.
  {
    auto l = list;
    l.erase(std::remove_if(l.begin(), l.end(), [](const auto& t) { return t.first == "model.layers.1.mlp.up_proj.weight"; }), l.end());
    test_files::write_weights(dir.path(), test_files::random_tensors(l, DType::kF32));
    const std::string msg = error_of([&] { Model::open(dir.path().string()); });
    EXPECT_CONTAINS(msg, dir.path().string());
    EXPECT_CONTAINS(msg, "'model.layers.1.mlp.up_proj.weight' is missing");
  }
  // Wrong shape.
  {
    auto l = list;
    for (auto& t : l) {
      if (t.first == "model.layers.0.self_attn.k_proj.weight") t.second = {12, 16};
    }
    test_files::write_weights(dir.path(), test_files::random_tensors(l, DType::kF32));
    const std::string msg = error_of([&] { Model::open(dir.path().string()); });
    EXPECT_CONTAINS(msg, "model.safetensors");
    EXPECT_CONTAINS(msg, "'model.layers.0.self_attn.k_proj.weight' has shape [12, 16], but config.json implies [8, 16]");
  }
  // Untied model without lm_head.
  {
    auto l = list;
    l.erase(std::remove_if(l.begin(), l.end(), [](const auto& t) { return t.first == "lm_head.weight"; }), l.end());
    test_files::write_weights(dir.path(), test_files::random_tensors(l, DType::kF32));
    EXPECT_CONTAINS(error_of([&] { Model::open(dir.path().string()); }), "'lm_head.weight' is missing");
  }
}

TEST(ModelOpen, PathErrors) {
  TempDir dir;
  EXPECT_CONTAINS(error_of([&] { Model::open(dir / "nothing"); }), "no such file or directory");
  EXPECT_CONTAINS(error_of([&] { Model::open(dir.path().string()); }), "no config.json");
  test_files::write_file(dir / "model.safetensors", test_files::safetensors_file({}));
  EXPECT_CONTAINS(error_of([&] { Model::open(dir / "model.safetensors"); }), "pass the model directory");
  test_files::write_text(dir / "notes.txt", "hello");
  EXPECT_CONTAINS(error_of([&] { Model::open(dir / "notes.txt"); }), "not a GGUF file");
  HfShape s;
  test_files::write_text(dir / "config.json", llama_config(s));
  std::filesystem::remove(dir / "model.safetensors");
  EXPECT_CONTAINS(error_of([&] { Model::open(dir.path().string()); }), "no weights");
}

// ---- GGUF ----

void add_llama_gguf_metadata(test_files::GgufBuilder& g, const HfShape& s, const std::string& arch = "llama") {
  g.kv_str("general.architecture", arch);
  g.kv_u32(arch + ".block_count", static_cast<uint32_t>(s.n_layer));
  g.kv_u32(arch + ".context_length", static_cast<uint32_t>(s.n_ctx));
  g.kv_u32(arch + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  g.kv_u32(arch + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  g.kv_u32(arch + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  g.kv_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(s.n_kv_head));
  g.kv_f32(arch + ".rope.freq_base", 100000.0f);
  g.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  g.kv_u32(arch + ".rope.dimension_count", static_cast<uint32_t>(s.head_dim));
  g.kv_str("tokenizer.ggml.model", "gpt2");
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < s.n_vocab; ++i) tokens.push_back("t" + std::to_string(i));
  g.kv_str_array("tokenizer.ggml.tokens", tokens);
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  g.kv_u32("tokenizer.ggml.eos_token_id", 2);
}

// Q8_0 blocks for `rows` x `cols` (cols a multiple of 32), arbitrary contents.
test_files::GgufTensorSpec q8_tensor(const std::string& name, int64_t rows, int64_t cols) {
  test_files::GgufTensorSpec t;
  t.name = name;
  t.ne = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)};
  t.type = test_files::kGgmlQ8_0;
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    const uint16_t d = f32_to_f16(0.001f * static_cast<float>(b + 1));
    t.data.push_back(static_cast<uint8_t>(d));
    t.data.push_back(static_cast<uint8_t>(d >> 8));
    for (int i = 0; i < 32; ++i) t.data.push_back(static_cast<uint8_t>((b * 7 + i) & 0xff));
  }
  return t;
}

void add_llama_gguf_tensors(test_files::GgufBuilder& g, const HfShape& s, bool output, bool qkv_bias) {
  const int64_t E = s.n_embd, Q = s.n_head * s.head_dim, KV = s.n_kv_head * s.head_dim;
  uint32_t seed = 1;
  g.tensor(q8_tensor("token_embd.weight", s.n_vocab, E));
  g.tensor_f("output_norm.weight", DType::kF32, {E}, test_files::random_values(E, seed++));
  if (output) g.tensor_f("output.weight", DType::kF16, {s.n_vocab, E}, test_files::random_values(s.n_vocab * E, seed++));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    g.tensor_f(p + "attn_norm.weight", DType::kF32, {E}, test_files::random_values(E, seed++));
    g.tensor(q8_tensor(p + "attn_q.weight", Q, E));
    g.tensor(q8_tensor(p + "attn_k.weight", KV, E));
    g.tensor(q8_tensor(p + "attn_v.weight", KV, E));
    if (qkv_bias) {
      g.tensor_f(p + "attn_q.bias", DType::kF32, {Q}, test_files::random_values(Q, seed++));
      g.tensor_f(p + "attn_k.bias", DType::kF32, {KV}, test_files::random_values(KV, seed++));
      g.tensor_f(p + "attn_v.bias", DType::kF32, {KV}, test_files::random_values(KV, seed++));
    }
    g.tensor_f(p + "attn_output.weight", DType::kF16, {E, Q}, test_files::random_values(E * Q, seed++));
    g.tensor_f(p + "ffn_norm.weight", DType::kF32, {E}, test_files::random_values(E, seed++));
    g.tensor(q8_tensor(p + "ffn_gate.weight", s.n_ff, E));
    g.tensor(q8_tensor(p + "ffn_up.weight", s.n_ff, E));
    g.tensor_f(p + "ffn_down.weight", DType::kBF16, {E, s.n_ff}, test_files::random_values(E * s.n_ff, seed++));
  }
}

HfShape gguf_shape() {
  HfShape s;
  s.n_embd = 64;  // Q8_0 rows need multiples of 32
  s.n_head = 4;
  s.n_kv_head = 2;
  s.head_dim = 16;
  s.n_ff = 96;
  s.n_vocab = 50;
  return s;
}

TEST(ModelGguf, LlamaTiedInterleavedRope) {
  TempDir dir;
  const HfShape s = gguf_shape();
  test_files::GgufBuilder g;
  add_llama_gguf_metadata(g, s);
  add_llama_gguf_tensors(g, s, /*output=*/false, /*qkv_bias=*/false);
  g.tensor_f("rope_freqs.weight", DType::kF32, {8}, {1, 1, 1, 1.5f, 2.5f, 4, 8, 8});
  g.tensor_f("unused.extra", DType::kF32, {3}, {1, 2, 3});
  const std::string path = dir / "tiny.gguf";
  test_files::write_file(path, g.build());
  const auto m = Model::open(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.n_ff, 96);
  EXPECT_EQ(c.n_vocab, 50);  // from the token list: no llama.vocab_size
  EXPECT_EQ(c.n_ctx, 32);
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.rope_freq_factors, (std::vector<float>{1, 1, 1, 1.5f, 2.5f, 4, 8, 8}));
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.attn_qkv_bias);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.source_dtype, "mixed");
  ASSERT_NE(m->gguf(), nullptr);
  const ModelDesc& d = m->desc();
  EXPECT_EQ(d.format, ModelFormat::kGguf);
  EXPECT_EQ(d.find("output.weight"), nullptr);
  EXPECT_EQ(d.find("rope_freqs.weight"), nullptr);
  EXPECT_EQ(d.tensors.size(), 2u + 2u * 9);
  const TensorInfo& q = d.get("blk.1.attn_q.weight");
  EXPECT_EQ(q.dtype, kQ8_0);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(q.nbytes, 64u * 2 * 34);
  const GgufTensorInfo* gi = m->gguf()->find_tensor("blk.1.attn_q.weight");
  EXPECT_EQ(m->bytes(q).data(), m->gguf()->file().data() + gi->offset);
  const auto expected = q8_tensor("x", 64, 64).data;
  EXPECT_EQ(std::memcmp(m->bytes(q).data(), expected.data(), expected.size()), 0);
  EXPECT_EQ(d.get("blk.0.ffn_down.weight").dtype, DType::kBF16);
  const int64_t E = 64, F = 96;
  EXPECT_EQ(d.n_params(), 50 * E + E + 2 * (2 * E + E * 64 + 2 * 32 * E + E * 64 + 3 * E * F));
  uint64_t sum = 0;
  for (const auto& [dt, n] : d.bytes_per_dtype()) sum += n;
  uint64_t want = 0;
  for (const auto& t : d.tensors) want += t.nbytes;
  EXPECT_EQ(sum, want);
}

TEST(ModelGguf, Qwen2HalfRopeWithBiasesAndOutput) {
  TempDir dir;
  HfShape s = gguf_shape();
  test_files::GgufBuilder g;
  add_llama_gguf_metadata(g, s, "qwen2");
  g.kv_u32("qwen2.vocab_size", 50);
  add_llama_gguf_tensors(g, s, /*output=*/true, /*qkv_bias=*/true);
  const std::string path = dir / "qwen.gguf";
  test_files::write_file(path, g.build());
  const auto m = Model::open(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalf);
  EXPECT_TRUE(c.attn_qkv_bias);
  EXPECT_FALSE(c.attn_out_bias);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(m->desc().get("output.weight").dtype, DType::kF16);
  EXPECT_EQ(m->desc().get("blk.1.attn_v.bias").shape, (std::vector<int64_t>{32}));
}

TEST(ModelGguf, ErrorsNameTheFile) {
  TempDir dir;
  const HfShape s = gguf_shape();
  const std::string path = dir / "bad.gguf";
  auto msg_of = [&](const test_files::GgufBuilder& g) {
    test_files::write_file(path, g.build());
    const std::string msg = error_of([&] { Model::open(path); });
    EXPECT_CONTAINS(msg, path);
    return msg;
  };
  {
    test_files::GgufBuilder g;
    g.kv_str("general.architecture", "gpt2");
    EXPECT_CONTAINS(msg_of(g), "architecture 'gpt2' is not supported (supported: llama, qwen2)");
  }
  {
    test_files::GgufBuilder g;
    g.kv_u32("llama.block_count", 2);
    EXPECT_CONTAINS(msg_of(g), "general.architecture");
  }
  {
    test_files::GgufBuilder g;
    g.kv_str("general.architecture", "llama");
    g.kv_u32("llama.block_count", 2);
    EXPECT_CONTAINS(msg_of(g), "'llama.embedding_length' is missing");
  }
  {
    test_files::GgufBuilder g;
    add_llama_gguf_metadata(g, s);
    add_llama_gguf_tensors(g, s, false, false);
    g.kv_str("llama.rope.scaling.type", "yarn");
    EXPECT_CONTAINS(msg_of(g), "'yarn'");
  }
  {
    HfShape bad = s;
    bad.n_ff = 64;  // metadata says 64, tensors hold 96
    test_files::GgufBuilder g;
    add_llama_gguf_metadata(g, bad);
    add_llama_gguf_tensors(g, s, false, false);
    EXPECT_CONTAINS(msg_of(g), "tensor 'blk.0.ffn_gate.weight' has shape [96, 64], but the metadata implies [64, 64]");
  }
  {
    test_files::GgufBuilder g;
    add_llama_gguf_metadata(g, s);
    g.tensor(q8_tensor("token_embd.weight", s.n_vocab, s.n_embd));
    EXPECT_CONTAINS(msg_of(g), "tensor 'output_norm.weight' is missing");
  }
  {
    // A quantized norm.
    test_files::GgufBuilder g;
    add_llama_gguf_metadata(g, s);
    g.tensor(q8_tensor("token_embd.weight", s.n_vocab, s.n_embd));
    test_files::GgufTensorSpec n = q8_tensor("output_norm.weight", 1, 64);
    n.ne = {64};
    g.tensor(n);
    EXPECT_CONTAINS(msg_of(g), "'output_norm.weight' has type Q8_0");
  }
  {
    test_files::GgufBuilder g;
    add_llama_gguf_metadata(g, s);
    g.kv_u32("tokenizer.ggml.unused", 0);
    g.kv_u32("llama.rope.dimension_count_x", 0);
    add_llama_gguf_tensors(g, s, false, false);
    g.tensor_f("rope_freqs.weight", DType::kF32, {5}, {1, 1, 1, 1, 1});
    EXPECT_CONTAINS(msg_of(g), "rope_freqs.weight");
  }
}

}  // namespace
}  // namespace strata
