// The model families Strata reads (family.h): their config.json readers and
// their descriptors.
#include "model/family.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "io/json.h"
#include "io/one_line.h"

namespace strata {

namespace {

float read_positive(const JsonObject& o, std::string_view key) {
  auto v = o.get_number(key);
  if (!v) fail("{} is missing; it is required", o.where(key));
  if (!(std::isfinite(*v) && *v > 0))
    fail("{} is {}, expected a positive number", o.where(key), *v);
  return static_cast<float>(*v);
}

// A rope_scaling (or rope_parameters) object; null or "default" -> none.
RopeScaling read_rope_scaling(const JsonObject& s) {
  RopeScaling r;
  std::string type;
  if (auto t = s.get_string("rope_type")) {
    type = *t;
  } else if (auto t2 = s.get_string("type")) {
    type = *t2;
  } else {
    fail("{} is missing; it is required", s.where("rope_type"));
  }
  if (type == "default") return r;
  if (type == "linear") {
    r.type = RopeScaling::Type::kLinear;
    r.factor = read_positive(s, "factor");
    return r;
  }
  if (type == "llama3") {
    r.type = RopeScaling::Type::kLlama3;
    r.factor = read_positive(s, "factor");
    r.low_freq_factor = read_positive(s, "low_freq_factor");
    r.high_freq_factor = read_positive(s, "high_freq_factor");
    r.original_max_position = s.require_int("original_max_position_embeddings", 1);
    return r;
  }
  fail("{} is '{}', which Strata does not support (supported: default, linear, llama3)",
       s.where("rope_type"), one_line(type, 100));
}

// rope_theta and rope_scaling, in either the flat layout (rope_theta,
// rope_scaling) or the nested one (rope_parameters {rope_type, rope_theta, ...}).
void read_rope(const JsonObject& cfg, ModelConfig& c) {
  c.rope_layout = RopeLayout::kHalf;
  if (auto f = cfg.get_number("partial_rotary_factor"); f && *f != 1.0) {
    fail("{} is {}; Strata rotates whole heads only", cfg.where("partial_rotary_factor"), *f);
  }
  const Json& j = cfg.json();
  if (cfg.has("rope_parameters")) {
    JsonObject rp(j.at("rope_parameters"), cfg.path(), "rope_parameters");
    if (rp.has("rope_theta"))
      c.rope_theta = read_positive(rp, "rope_theta");
    else if (cfg.has("rope_theta"))
      c.rope_theta = read_positive(cfg, "rope_theta");
    c.rope_scaling = read_rope_scaling(rp);
    return;
  }
  if (cfg.has("rope_theta")) c.rope_theta = read_positive(cfg, "rope_theta");
  if (cfg.has("rope_scaling")) {
    JsonObject rs(j.at("rope_scaling"), cfg.path(), "rope_scaling");
    c.rope_scaling = read_rope_scaling(rs);
  }
}

void read_opt(const JsonObject& cfg, ModelConfig& c) {
  const std::string& p = cfg.path();
  if (!cfg.get_bool("do_layer_norm_before").value_or(true)) {
    fail(
        "{}: do_layer_norm_before is false (post-LayerNorm OPT, e.g. OPT-350m); Strata runs "
        "pre-LayerNorm OPT models only",
        p);
  }
  c.n_embd = cfg.require_int("hidden_size");
  const int64_t proj = cfg.get_int("word_embed_proj_dim").value_or(c.n_embd);
  if (proj != c.n_embd) {
    fail(
        "{}: word_embed_proj_dim {} differs from hidden_size {} (projected embeddings, e.g. "
        "OPT-350m); Strata does not support this OPT variant",
        p, proj, c.n_embd);
  }
  if (cfg.get_bool("_remove_final_layer_norm").value_or(false)) {
    fail("{}: _remove_final_layer_norm is true; Strata runs OPT models with a final LayerNorm", p);
  }
  if (!cfg.get_bool("layer_norm_elementwise_affine").value_or(true)) {
    fail(
        "{}: layer_norm_elementwise_affine is false; Strata runs OPT models with LayerNorm "
        "weights",
        p);
  }
  const std::string act = cfg.get_string("activation_function").value_or("relu");
  if (act == "relu") {
    c.act = Activation::kRelu;
  } else if (act == "gelu") {
    c.act = Activation::kGelu;
  } else {
    fail("{} is '{}' (supported: relu, gelu)", cfg.where("activation_function"),
         one_line(act, 100));
  }
  c.family = Family::kOpt;
  c.n_layer = cfg.require_int("num_hidden_layers");
  c.n_head = cfg.require_int("num_attention_heads");
  c.n_kv_head = c.n_head;
  c.n_ff = cfg.require_int("ffn_dim");
  c.n_vocab = cfg.require_int("vocab_size");
  c.n_ctx = cfg.require_int("max_position_embeddings");
  if (c.n_embd % c.n_head != 0) {
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", p, c.n_embd, c.n_head);
  }
  c.head_dim = c.n_embd / c.n_head;
  c.norm = NormKind::kLayerNorm;
  c.norm_eps = 1e-5f;  // torch.nn.LayerNorm's default, which OPT uses
  c.norm_bias = true;
  c.gated_ffn = false;
  const bool bias = cfg.get_bool("enable_bias").value_or(true);
  c.attn_qkv_bias = c.attn_out_bias = c.ffn_bias = bias;
  c.tie_embeddings = cfg.get_bool("tie_word_embeddings").value_or(true);
  c.learned_pos = true;
  c.pos_offset = 2;
  c.rope_layout = RopeLayout::kNone;
}

void read_llama_family(const JsonObject& cfg, ModelConfig& c) {
  const std::string& p = cfg.path();
  const std::string& a = c.architecture;
  const bool qwen2 = a == "Qwen2ForCausalLM";
  const bool mistral = a == "MistralForCausalLM";
  c.family = Family::kLlama;
  c.n_embd = cfg.require_int("hidden_size");
  c.n_layer = cfg.require_int("num_hidden_layers");
  c.n_head = cfg.require_int("num_attention_heads");
  c.n_kv_head = cfg.get_int("num_key_value_heads").value_or(c.n_head);
  c.n_ff = cfg.require_int("intermediate_size");
  c.n_vocab = cfg.require_int("vocab_size");
  c.n_ctx = cfg.require_int("max_position_embeddings");
  if (auto hd = cfg.get_int("head_dim")) {
    c.head_dim = *hd;
  } else {
    if (c.n_embd % c.n_head != 0) {
      fail(
          "{}: hidden_size {} is not a multiple of num_attention_heads {} and there is no head_dim",
          p, c.n_embd, c.n_head);
    }
    c.head_dim = c.n_embd / c.n_head;
  }
  const std::string act = cfg.get_string("hidden_act").value_or("silu");
  if (act != "silu")
    fail("{} is '{}' (supported: silu)", cfg.where("hidden_act"), one_line(act, 100));
  c.act = Activation::kSilu;
  c.gated_ffn = true;
  c.norm = NormKind::kRmsNorm;
  c.norm_bias = false;
  c.norm_eps = static_cast<float>(cfg.get_number("rms_norm_eps").value_or(1e-6));
  if (qwen2) {
    // Qwen2's q/k/v projections always have a bias, its output projection none.
    c.attn_qkv_bias = true;
    c.attn_out_bias = false;
    if (cfg.get_bool("use_sliding_window").value_or(false)) {
      fail("{}: use_sliding_window is true; Strata runs Qwen2 models with full attention only", p);
    }
  } else {
    const bool bias = cfg.get_bool("attention_bias").value_or(false);
    c.attn_qkv_bias = c.attn_out_bias = bias;
  }
  c.ffn_bias = !qwen2 && !mistral && cfg.get_bool("mlp_bias").value_or(false);
  c.tie_embeddings = cfg.get_bool("tie_word_embeddings").value_or(false);
  if (mistral) {
    // MistralConfig's default window is 4096; null means none.
    auto it = cfg.json().find("sliding_window");
    if (it == cfg.json().end()) {
      c.sliding_window = 4096;
    } else if (!it->is_null()) {
      c.sliding_window = cfg.get_int_in("sliding_window", 0, kMaxModelContext).value();
    }
  }
  read_rope(cfg, c);
}

const HfTensorNames kLlamaNames = {"model.",
                                   "",
                                   "norm",
                                   {{"attn_norm", "input_layernorm"},
                                    {"attn_q", "self_attn.q_proj"},
                                    {"attn_k", "self_attn.k_proj"},
                                    {"attn_v", "self_attn.v_proj"},
                                    {"attn_output", "self_attn.o_proj"},
                                    {"ffn_norm", "post_attention_layernorm"},
                                    {"ffn_gate", "mlp.gate_proj"},
                                    {"ffn_up", "mlp.up_proj"},
                                    {"ffn_down", "mlp.down_proj"}}};

const HfTensorNames kOptNames = {"model.decoder.",
                                 "decoder.",
                                 "final_layer_norm",
                                 {{"attn_norm", "self_attn_layer_norm"},
                                  {"attn_q", "self_attn.q_proj"},
                                  {"attn_k", "self_attn.k_proj"},
                                  {"attn_v", "self_attn.v_proj"},
                                  {"attn_output", "self_attn.out_proj"},
                                  {"ffn_norm", "final_layer_norm"},
                                  {"ffn_up", "fc1"},
                                  {"ffn_down", "fc2"}}};

template <class Field>
const ModelFamily* find_family(std::string_view name, Field field) {
  if (name.empty()) return nullptr;
  for (const ModelFamily& f : model_families()) {
    if (f.*field == name) return &f;
  }
  return nullptr;
}

template <class Field>
std::string names_of(Field field) {
  std::string s;
  for (const ModelFamily& f : model_families()) {
    if ((f.*field).empty()) continue;
    if (!s.empty()) s += ", ";
    s += f.*field;
  }
  return s;
}

}  // namespace

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> kFamilies = {
      {Family::kOpt, "OPTForCausalLM", "opt", read_opt, "", false, RopeLayout::kNone, kOptNames},
      {Family::kLlama, "LlamaForCausalLM", "llama", read_llama_family, "llama", false,
       RopeLayout::kInterleaved, kLlamaNames},
      {Family::kLlama, "MistralForCausalLM", "mistral", read_llama_family, "", false,
       RopeLayout::kInterleaved, kLlamaNames},
      // llama.cpp's converter does not permute Qwen2's q/k rows: they keep the
      // half layout.
      {Family::kLlama, "Qwen2ForCausalLM", "qwen2", read_llama_family, "qwen2", true,
       RopeLayout::kHalf, kLlamaNames},
  };
  return kFamilies;
}

const ModelFamily* family_by_hf_architecture(std::string_view name) {
  return find_family(name, &ModelFamily::hf_architecture);
}
const ModelFamily* family_by_model_type(std::string_view name) {
  return find_family(name, &ModelFamily::hf_model_type);
}
const ModelFamily* family_by_gguf_architecture(std::string_view name) {
  return find_family(name, &ModelFamily::gguf_architecture);
}

std::string supported_hf_architectures() {
  return names_of(&ModelFamily::hf_architecture);
}
std::string supported_gguf_architectures() {
  return names_of(&ModelFamily::gguf_architecture);
}

}  // namespace strata
