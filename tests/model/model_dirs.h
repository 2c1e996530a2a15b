// Builders of small model directories and GGUF files for the model tests:
// a config.json text plus safetensors files holding every tensor the
// architecture needs under its Hugging Face names, with random values.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/file_writers.h"

namespace strata::test_files {

struct HfShape {
  int64_t n_layer = 2, n_embd = 16, n_head = 4, n_kv_head = 2, head_dim = 4, n_ff = 24, n_vocab = 40,
          n_ctx = 32;
};

// HF tensor names and shapes of a Llama-family model (Llama, Mistral, Qwen2).
inline std::vector<std::pair<std::string, std::vector<int64_t>>> llama_hf_tensors(
    const HfShape& s, bool qkv_bias, bool out_bias, bool mlp_bias, bool tied) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  const int64_t Q = s.n_head * s.head_dim, KV = s.n_kv_head * s.head_dim;
  t.push_back({"model.embed_tokens.weight", {s.n_vocab, s.n_embd}});
  t.push_back({"model.norm.weight", {s.n_embd}});
  if (!tied) t.push_back({"lm_head.weight", {s.n_vocab, s.n_embd}});
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {s.n_embd}});
    t.push_back({p + "post_attention_layernorm.weight", {s.n_embd}});
    t.push_back({p + "self_attn.q_proj.weight", {Q, s.n_embd}});
    t.push_back({p + "self_attn.k_proj.weight", {KV, s.n_embd}});
    t.push_back({p + "self_attn.v_proj.weight", {KV, s.n_embd}});
    t.push_back({p + "self_attn.o_proj.weight", {s.n_embd, Q}});
    if (qkv_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {Q}});
      t.push_back({p + "self_attn.k_proj.bias", {KV}});
      t.push_back({p + "self_attn.v_proj.bias", {KV}});
    }
    if (out_bias) t.push_back({p + "self_attn.o_proj.bias", {s.n_embd}});
    t.push_back({p + "mlp.gate_proj.weight", {s.n_ff, s.n_embd}});
    t.push_back({p + "mlp.up_proj.weight", {s.n_ff, s.n_embd}});
    t.push_back({p + "mlp.down_proj.weight", {s.n_embd, s.n_ff}});
    if (mlp_bias) {
      t.push_back({p + "mlp.gate_proj.bias", {s.n_ff}});
      t.push_back({p + "mlp.up_proj.bias", {s.n_ff}});
      t.push_back({p + "mlp.down_proj.bias", {s.n_embd}});
    }
  }
  return t;
}

// HF names of an OPT model; `prefix` is "model.decoder." or "decoder.".
inline std::vector<std::pair<std::string, std::vector<int64_t>>> opt_hf_tensors(const HfShape& s,
                                                                                const std::string& prefix) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  const int64_t E = s.n_embd;
  t.push_back({prefix + "embed_tokens.weight", {s.n_vocab, E}});
  t.push_back({prefix + "embed_positions.weight", {s.n_ctx + 2, E}});
  t.push_back({prefix + "final_layer_norm.weight", {E}});
  t.push_back({prefix + "final_layer_norm.bias", {E}});
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = prefix + "layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"}) {
      t.push_back({p + n + ".weight", {E, E}});
      t.push_back({p + n + ".bias", {E}});
    }
    for (const char* n : {"self_attn_layer_norm", "final_layer_norm"}) {
      t.push_back({p + n + ".weight", {E}});
      t.push_back({p + n + ".bias", {E}});
    }
    t.push_back({p + "fc1.weight", {s.n_ff, E}});
    t.push_back({p + "fc1.bias", {s.n_ff}});
    t.push_back({p + "fc2.weight", {E, s.n_ff}});
    t.push_back({p + "fc2.bias", {E}});
  }
  return t;
}

// StTensors with random values for a list of names and shapes.
inline std::vector<StTensor> random_tensors(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& list, DType dt, uint32_t seed = 7) {
  std::vector<StTensor> out;
  for (const auto& [name, shape] : list) out.push_back(st_tensor(name, dt, shape, seed++));
  return out;
}

// Writes the tensors into `n_shards` files plus model.safetensors.index.json
// (n_shards > 1), or into model.safetensors.
inline void write_weights(const std::filesystem::path& dir, const std::vector<StTensor>& tensors,
                          int n_shards = 1) {
  if (n_shards == 1) {
    write_file(dir / "model.safetensors", safetensors_file(tensors));
    return;
  }
  std::vector<std::vector<StTensor>> shards(static_cast<size_t>(n_shards));
  std::string map;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t s = i % static_cast<size_t>(n_shards);
    shards[s].push_back(tensors[i]);
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05d.safetensors", s + 1, n_shards);
    map += (map.empty() ? "" : ",\n    ") + json_quote(tensors[i].name) + ": " + json_quote(name);
  }
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05d.safetensors", s + 1, n_shards);
    write_file(dir / name, safetensors_file(shards[s]));
  }
  write_text(dir / "model.safetensors.index.json",
             "{\"metadata\": {\"total_size\": 0},\n  \"weight_map\": {\n    " + map + "}}\n");
}

}  // namespace strata::test_files
