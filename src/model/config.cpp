#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/one_line.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

// Limits far above any real model; they keep products of sizes inside int64.
constexpr int64_t kMaxLayers = 1 << 16;
constexpr int64_t kMaxEmbd = 1 << 20;
constexpr int64_t kMaxHeads = 1 << 12;
constexpr int64_t kMaxHeadDim = 1 << 14;
constexpr int64_t kMaxFf = 1 << 24;
constexpr int64_t kMaxVocab = 1 << 26;
constexpr int64_t kMaxCtx = int64_t{1} << 30;

// Token ids under `key`: absent or null -> {}, an integer -> {id}, a list of integers.
std::vector<int64_t> read_ids(const JsonObject& o, std::string_view key) {
  auto it = o.json().find(key);
  if (it == o.json().end() || it->is_null()) return {};
  if (it->is_array()) {
    std::vector<int64_t> ids;
    for (const Json& v : *it) {
      if (!v.is_number_integer()) {
        fail("{} holds {}, expected token ids (integers)", o.where(key), json_type_name(v));
      }
      ids.push_back(v.get<int64_t>());
    }
    return ids;
  }
  auto id = o.get_int(key);
  return {*id};
}

void append_unique(std::vector<int64_t>& out, const std::vector<int64_t>& ids) {
  for (int64_t id : ids) {
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
}

float read_positive(const JsonObject& o, std::string_view key) {
  auto v = o.get_number(key);
  if (!v) fail("{} is missing; it is required", o.where(key));
  if (!(std::isfinite(*v) && *v > 0)) fail("{} is {}, expected a positive number", o.where(key), *v);
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
    if (rp.has("rope_theta")) c.rope_theta = read_positive(rp, "rope_theta");
    else if (cfg.has("rope_theta")) c.rope_theta = read_positive(cfg, "rope_theta");
    c.rope_scaling = read_rope_scaling(rp);
    return;
  }
  if (cfg.has("rope_theta")) c.rope_theta = read_positive(cfg, "rope_theta");
  if (cfg.has("rope_scaling")) {
    JsonObject rs(j.at("rope_scaling"), cfg.path(), "rope_scaling");
    c.rope_scaling = read_rope_scaling(rs);
  }
}

std::string arch_for_model_type(std::string_view t) {
  if (t == "opt") return "OPTForCausalLM";
  if (t == "llama") return "LlamaForCausalLM";
  if (t == "mistral") return "MistralForCausalLM";
  if (t == "qwen2") return "Qwen2ForCausalLM";
  return {};
}

std::string supported_list() {
  std::string s;
  for (auto a : supported_architectures()) {
    if (!s.empty()) s += ", ";
    s += a;
  }
  return s;
}

void read_opt(const JsonObject& cfg, ModelConfig& c) {
  const std::string& p = cfg.path();
  if (!cfg.get_bool("do_layer_norm_before").value_or(true)) {
    fail("{}: do_layer_norm_before is false (post-LayerNorm OPT, e.g. OPT-350m); Strata runs "
         "pre-LayerNorm OPT models only",
         p);
  }
  c.n_embd = cfg.require_int("hidden_size");
  const int64_t proj = cfg.get_int("word_embed_proj_dim").value_or(c.n_embd);
  if (proj != c.n_embd) {
    fail("{}: word_embed_proj_dim {} differs from hidden_size {} (projected embeddings, e.g. "
         "OPT-350m); Strata does not support this OPT variant",
         p, proj, c.n_embd);
  }
  if (cfg.get_bool("_remove_final_layer_norm").value_or(false)) {
    fail("{}: _remove_final_layer_norm is true; Strata runs OPT models with a final LayerNorm", p);
  }
  if (!cfg.get_bool("layer_norm_elementwise_affine").value_or(true)) {
    fail("{}: layer_norm_elementwise_affine is false; Strata runs OPT models with LayerNorm "
         "weights",
         p);
  }
  const std::string act = cfg.get_string("activation_function").value_or("relu");
  if (act == "relu") {
    c.act = Activation::kRelu;
  } else if (act == "gelu") {
    c.act = Activation::kGelu;
  } else {
    fail("{} is '{}' (supported: relu, gelu)", cfg.where("activation_function"), one_line(act, 100));
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
      fail("{}: hidden_size {} is not a multiple of num_attention_heads {} and there is no head_dim",
           p, c.n_embd, c.n_head);
    }
    c.head_dim = c.n_embd / c.n_head;
  }
  const std::string act = cfg.get_string("hidden_act").value_or("silu");
  if (act != "silu") fail("{} is '{}' (supported: silu)", cfg.where("hidden_act"), one_line(act, 100));
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
      c.sliding_window = cfg.get_int_in("sliding_window", 0, kMaxCtx).value();
    }
  }
  read_rope(cfg, c);
}

}  // namespace

const std::vector<std::string_view>& supported_architectures() {
  static const std::vector<std::string_view> kArchs = {"OPTForCausalLM", "LlamaForCausalLM",
                                                       "MistralForCausalLM", "Qwen2ForCausalLM"};
  return kArchs;
}

std::string_view family_name(Family f) {
  switch (f) {
    case Family::kOpt: return "opt";
    case Family::kLlama: return "llama";
  }
  return "unknown";
}

std::string_view norm_name(NormKind n) {
  switch (n) {
    case NormKind::kLayerNorm: return "layer_norm";
    case NormKind::kRmsNorm: return "rms_norm";
  }
  return "unknown";
}

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kSilu: return "silu";
  }
  return "unknown";
}

std::string_view rope_layout_name(RopeLayout l) {
  switch (l) {
    case RopeLayout::kNone: return "none";
    case RopeLayout::kHalf: return "half";
    case RopeLayout::kInterleaved: return "interleaved";
  }
  return "unknown";
}

std::string_view rope_scaling_name(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::kNone: return "none";
    case RopeScaling::Type::kLinear: return "linear";
    case RopeScaling::Type::kLlama3: return "llama3";
  }
  return "unknown";
}

void validate_config(const ModelConfig& c, const std::string& source) {
  auto check_range = [&](std::string_view what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) fail("{}: {} is {}, expected a value in [{}, {}]", source, what, v, lo, hi);
  };
  check_range("n_layer", c.n_layer, 1, kMaxLayers);
  check_range("hidden size", c.n_embd, 1, kMaxEmbd);
  check_range("n_head", c.n_head, 1, kMaxHeads);
  check_range("n_kv_head", c.n_kv_head, 1, c.n_head);
  check_range("head_dim", c.head_dim, 1, kMaxHeadDim);
  check_range("intermediate size", c.n_ff, 1, kMaxFf);
  check_range("vocab size", c.n_vocab, 1, kMaxVocab);
  check_range("context length", c.n_ctx, 1, kMaxCtx);
  if (c.n_head % c.n_kv_head != 0) {
    fail("{}: n_head {} is not a multiple of n_kv_head {}", source, c.n_head, c.n_kv_head);
  }
  if (!(std::isfinite(c.norm_eps) && c.norm_eps > 0)) {
    fail("{}: norm epsilon {} is not a positive number", source, c.norm_eps);
  }
  if (c.rope_layout != RopeLayout::kNone) {
    if (c.head_dim % 2 != 0) fail("{}: head_dim {} is odd; RoPE needs pairs", source, c.head_dim);
    if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0)) {
      fail("{}: rope theta {} is not a positive number", source, c.rope_theta);
    }
    const RopeScaling& r = c.rope_scaling;
    if (r.type != RopeScaling::Type::kNone && !(std::isfinite(r.factor) && r.factor > 0)) {
      fail("{}: rope scaling factor {} is not a positive number", source, r.factor);
    }
    if (r.type == RopeScaling::Type::kLlama3 && !(r.high_freq_factor > r.low_freq_factor)) {
      fail("{}: llama3 rope scaling needs high_freq_factor ({}) above low_freq_factor ({})", source,
           r.high_freq_factor, r.low_freq_factor);
    }
    if (!c.rope_freq_factors.empty()) {
      if (static_cast<int64_t>(c.rope_freq_factors.size()) != c.head_dim / 2) {
        fail("{}: {} rope frequency factors, expected head_dim/2 = {}", source,
             c.rope_freq_factors.size(), c.head_dim / 2);
      }
      for (float f : c.rope_freq_factors) {
        if (!(std::isfinite(f) && f > 0)) fail("{}: rope frequency factor {} is not positive", source, f);
      }
    }
  }
  if (c.learned_pos && c.pos_offset < 0) fail("{}: position offset {} is negative", source, c.pos_offset);
  if (c.bos_id < -1 || c.bos_id >= c.n_vocab) {
    fail("{}: bos token id {} is outside the vocabulary of {} tokens", source, c.bos_id, c.n_vocab);
  }
  for (int64_t id : c.eos_ids) {
    if (id < 0 || id >= c.n_vocab) {
      fail("{}: eos token id {} is outside the vocabulary of {} tokens", source, id, c.n_vocab);
    }
  }
  if (c.sliding_window < 0) fail("{}: sliding window {} is negative", source, c.sliding_window);
}

ModelConfig config_from_hf_json(const std::string& path) {
  ModelConfig c;
  try {
    const Json j = read_json_file(path, "config");
    const JsonObject cfg(j, path);

    // The first architecture this build supports; else the model_type.
    std::string first;
    auto arch_it = j.find("architectures");
    if (arch_it != j.end() && !arch_it->is_null()) {
      if (!arch_it->is_array()) fail("{} is {}, expected a list of names", cfg.where("architectures"), json_type_name(*arch_it));
      for (const Json& a : *arch_it) {
        if (!a.is_string()) continue;
        const std::string name = a.get<std::string>();
        if (first.empty()) first = name;
        for (auto s : supported_architectures()) {
          if (s == name && c.architecture.empty()) c.architecture = name;
        }
      }
    }
    if (c.architecture.empty() && first.empty()) {
      const std::string mt = cfg.get_string("model_type").value_or("");
      c.architecture = arch_for_model_type(mt);
      if (c.architecture.empty()) {
        if (mt.empty()) {
          fail("{}: no 'architectures' or 'model_type'; cannot tell which model this is", path);
        }
        fail("{}: model_type '{}' is not supported (supported: {})", path, one_line(mt, 100),
             supported_list());
      }
    }
    if (c.architecture.empty()) {
      fail("{}: architecture '{}' is not supported (supported: {})", path, one_line(first, 100),
           supported_list());
    }

    if (c.architecture == "OPTForCausalLM") {
      read_opt(cfg, c);
    } else {
      read_llama_family(cfg, c);
    }

    c.bos_id = cfg.get_int("bos_token_id").value_or(-1);
    c.eos_ids = read_ids(cfg, "eos_token_id");
    // generation_config.json is what generation reads; its EOS ids join the config's.
    const fs::path gen = fs::path(path).parent_path() / "generation_config.json";
    std::error_code ec;
    if (fs::is_regular_file(gen, ec)) {
      const Json gj = read_json_file(gen.string(), "generation config");
      const JsonObject g(gj, gen.string());
      append_unique(c.eos_ids, read_ids(g, "eos_token_id"));
      if (c.bos_id < 0) c.bos_id = g.get_int("bos_token_id").value_or(-1);
    }
  } catch (const Error& e) {
    throw Error(one_line(e.what()));
  }
  validate_config(c, path);
  return c;
}

ModelConfig config_from_gguf(const GgufFile& g) {
  const std::string& p = g.path();
  ModelConfig c;
  const auto arch = g.get_string("general.architecture");
  if (!arch) fail("{}: no general.architecture in the metadata; this GGUF does not describe a model", p);
  const bool qwen2 = *arch == "qwen2";
  if (*arch != "llama" && !qwen2) {
    fail("{}: architecture '{}' is not supported (supported: llama, qwen2)", p, one_line(*arch, 100));
  }
  auto key = [&](std::string_view k) { return fmt::format("{}.{}", *arch, k); };
  auto req = [&](std::string_view k) -> int64_t {
    const std::string full = key(k);
    auto v = g.get_int(full);
    if (!v) fail("{}: metadata '{}' is missing; it is required", p, full);
    return *v;
  };

  c.architecture = qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.family = Family::kLlama;
  c.n_layer = req("block_count");
  c.n_embd = req("embedding_length");
  c.n_ff = req("feed_forward_length");
  c.n_head = req("attention.head_count");
  c.n_kv_head = g.get_int(key("attention.head_count_kv")).value_or(c.n_head);
  c.n_ctx = req("context_length");
  if (c.n_head <= 0) fail("{}: metadata '{}' is {}", p, key("attention.head_count"), c.n_head);
  if (auto kl = g.get_int(key("attention.key_length"))) {
    c.head_dim = *kl;
    if (auto vl = g.get_int(key("attention.value_length")); vl && *vl != *kl) {
      fail("{}: value_length {} differs from key_length {}; Strata needs equal key and value heads",
           p, *vl, *kl);
    }
  } else {
    if (c.n_embd % c.n_head != 0) {
      fail("{}: embedding_length {} is not a multiple of head_count {}", p, c.n_embd, c.n_head);
    }
    c.head_dim = c.n_embd / c.n_head;
  }
  if (auto rd = g.get_int(key("rope.dimension_count")); rd && *rd != c.head_dim) {
    fail("{}: rope.dimension_count {} differs from head_dim {}; Strata rotates whole heads only", p,
         *rd, c.head_dim);
  }
  if (auto v = g.get_int(key("vocab_size"))) {
    c.n_vocab = *v;
  } else if (const GgufValue* tokens = g.find("tokenizer.ggml.tokens");
             tokens && tokens->type == GgufType::kArray) {
    c.n_vocab = static_cast<int64_t>(tokens->n_elems);
  } else if (const GgufTensorInfo* emb = g.find_tensor("token_embd.weight")) {
    c.n_vocab = emb->shape[0];
  } else {
    fail("{}: no {}, tokenizer.ggml.tokens or token_embd.weight to tell the vocabulary size", p,
         key("vocab_size"));
  }

  c.norm = NormKind::kRmsNorm;
  const auto eps = g.get_float(key("attention.layer_norm_rms_epsilon"));
  if (!eps) fail("{}: metadata '{}' is missing; it is required", p, key("attention.layer_norm_rms_epsilon"));
  c.norm_eps = static_cast<float>(*eps);
  c.act = Activation::kSilu;
  c.gated_ffn = true;
  c.attn_qkv_bias = qwen2;
  c.attn_out_bias = false;
  c.ffn_bias = false;
  c.norm_bias = false;
  c.tie_embeddings = g.find_tensor("output.weight") == nullptr;

  // RoPE. llama.cpp's converter permutes the rows of attn_q / attn_k of llama
  // models, per head, from Hugging Face's rotate-half order (dimension i pairs
  // with i + head_dim/2) into the interleaved order (2i pairs with 2i + 1):
  // stored row 2i is HF row i and stored row 2i+1 is HF row i + head_dim/2,
  // both rotated by frequency i. Rotating the stored rows as interleaved pairs
  // therefore gives the same vectors as HF's RoPE, with the dimensions of
  // every head permuted in the same way for q and k; a dot product does not
  // change when both sides are permuted alike, so the attention scores (and V,
  // which is not permuted) are identical and no rows need to be moved back.
  // Qwen2 rows are not permuted by the converter: they keep the half layout.
  c.rope_layout = qwen2 ? RopeLayout::kHalf : RopeLayout::kInterleaved;
  c.rope_theta = static_cast<float>(g.get_float(key("rope.freq_base")).value_or(10000.0));
  const std::string scaling(g.get_string(key("rope.scaling.type")).value_or(""));
  if (scaling == "linear") {
    c.rope_scaling.type = RopeScaling::Type::kLinear;
    const auto f = g.get_float(key("rope.scaling.factor"));
    if (!f) fail("{}: rope.scaling.type is linear but {} is missing", p, key("rope.scaling.factor"));
    c.rope_scaling.factor = static_cast<float>(*f);
  } else if (!scaling.empty() && scaling != "none") {
    fail("{}: rope scaling '{}' is not supported (supported: none, linear)", p, one_line(scaling, 100));
  } else if (auto lin = g.get_float(key("rope.scale_linear")); lin && *lin != 1.0) {
    c.rope_scaling.type = RopeScaling::Type::kLinear;
    c.rope_scaling.factor = static_cast<float>(*lin);
  }
  if (const GgufTensorInfo* rf = g.find_tensor("rope_freqs.weight")) {
    if (rf->dtype != DType::kF32 || rf->shape.size() != 1 || rf->shape[0] != c.head_dim / 2) {
      fail("{}: rope_freqs.weight is {} of {} elements, expected f32 of head_dim/2 = {}", p,
           dtype_name(rf->dtype), rf->shape.empty() ? 0 : rf->shape[0], c.head_dim / 2);
    }
    const auto bytes = g.file().slice(rf->offset, rf->nbytes);
    c.rope_freq_factors.resize(static_cast<size_t>(rf->shape[0]));
    std::memcpy(c.rope_freq_factors.data(), bytes.data(), bytes.size());
  }

  c.bos_id = g.get_int("tokenizer.ggml.bos_token_id").value_or(-1);
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                        "tokenizer.ggml.eom_token_id"}) {
    if (auto id = g.get_int(k)) append_unique(c.eos_ids, {*id});
  }
  validate_config(c, p);
  return c;
}

}  // namespace strata
