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
#include "model/family.h"

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
constexpr int64_t kMaxCtx = kMaxModelContext;

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

}  // namespace

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
    const ModelFamily* family = nullptr;
    std::string first;
    auto arch_it = j.find("architectures");
    if (arch_it != j.end() && !arch_it->is_null()) {
      if (!arch_it->is_array()) fail("{} is {}, expected a list of names", cfg.where("architectures"), json_type_name(*arch_it));
      for (const Json& a : *arch_it) {
        if (!a.is_string()) continue;
        const std::string name = a.get<std::string>();
        if (first.empty()) first = name;
        if (!family) family = family_by_hf_architecture(name);
      }
    }
    if (!family && first.empty()) {
      const std::string mt = cfg.get_string("model_type").value_or("");
      family = family_by_model_type(mt);
      if (!family) {
        if (mt.empty()) {
          fail("{}: no 'architectures' or 'model_type'; cannot tell which model this is", path);
        }
        fail("{}: model_type '{}' is not supported (supported: {})", path, one_line(mt, 100),
             supported_hf_architectures());
      }
    }
    if (!family) {
      fail("{}: architecture '{}' is not supported (supported: {})", path, one_line(first, 100),
           supported_hf_architectures());
    }
    c.architecture = family->hf_architecture;
    family->read_hf_config(cfg, c);

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
  const ModelFamily* family = family_by_gguf_architecture(*arch);
  if (!family) {
    fail("{}: architecture '{}' is not supported (supported: {})", p, one_line(*arch, 100),
         supported_gguf_architectures());
  }
  auto key = [&](std::string_view k) { return fmt::format("{}.{}", *arch, k); };
  auto req = [&](std::string_view k) -> int64_t {
    const std::string full = key(k);
    auto v = g.get_int(full);
    if (!v) fail("{}: metadata '{}' is missing; it is required", p, full);
    return *v;
  };

  c.architecture = family->hf_architecture;
  c.family = family->family;
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
  c.attn_qkv_bias = family->gguf_qkv_bias;
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
  // Qwen2 rows are not permuted by the converter: they keep the half layout
  // (ModelFamily::gguf_rope_layout).
  c.rope_layout = family->gguf_rope_layout;
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
