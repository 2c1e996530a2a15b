// Model hyper-parameters for the two families Strata runs, read from a Hugging
// Face config.json or from GGUF metadata (each family's readers and names:
// model/family.h). Plain data: the forward pass, the
// offload engine and the policy's model shapes are all derived from it.
//
//   OPT family:   LayerNorm (with bias), learned absolute positions (offset 2),
//                 ReLU MLP (fc1/fc2) with biases, q/k/v/out biases, tied lm_head.
//   Llama family: RMSNorm, RoPE, SwiGLU MLP (gate/up/down), grouped-query
//                 attention; Qwen2 adds q/k/v biases; Mistral is Llama's shape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class GgufFile;

enum class Family { kOpt, kLlama };

// The longest context a config may state: far above any real model, it
// keeps products of sizes inside int64.
inline constexpr int64_t kMaxModelContext = int64_t{1} << 30;
enum class NormKind { kLayerNorm, kRmsNorm };
enum class Activation { kRelu, kGelu, kSilu };

// How RoPE pairs the dimensions of a head.
//   kHalf:        (i, i + head_dim/2), Hugging Face's rotate_half layout.
//   kInterleaved: (2i, 2i + 1), the layout of Q/K rows in GGUF llama files
//                 (its converter permutes HF rows into it). Attention scores
//                 are the same either way, so GGUF weights are used as stored.
enum class RopeLayout { kNone, kHalf, kInterleaved };

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int64_t original_max_position = 8192;  // llama3
};

struct ModelConfig {
  std::string architecture;  // "OPTForCausalLM", "LlamaForCausalLM", ...
  Family family = Family::kLlama;
  int64_t n_layer = 0;
  int64_t n_embd = 0;        // hidden size
  int64_t n_head = 0;
  int64_t n_kv_head = 0;     // == n_head without GQA
  int64_t head_dim = 0;      // usually n_embd / n_head
  int64_t n_ff = 0;          // intermediate size
  int64_t n_vocab = 0;
  int64_t n_ctx = 0;         // max positions
  NormKind norm = NormKind::kRmsNorm;
  float norm_eps = 1e-5f;
  Activation act = Activation::kSilu;
  bool gated_ffn = true;     // SwiGLU: down(act(gate(x)) * up(x))
  bool attn_qkv_bias = false;
  bool attn_out_bias = false;
  bool ffn_bias = false;
  bool norm_bias = false;    // LayerNorm has a bias
  bool tie_embeddings = false;
  // OPT: learned positions, looked up at position + pos_offset.
  bool learned_pos = false;
  int64_t pos_offset = 0;
  RopeLayout rope_layout = RopeLayout::kNone;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  // GGUF llama files converted from a model with llama3 RoPE scaling carry the
  // scaling as per-dimension divisors of the inverse frequencies (tensor
  // rope_freqs.weight): inv_freq[i] = theta^(-2i/head_dim) / rope_freq_factors[i].
  // Empty otherwise; when set, rope_scaling.type is kNone.
  std::vector<float> rope_freq_factors;  // [head_dim/2]
  // Mistral: each token attends to at most this many previous positions
  // (itself included); 0 = no window.
  int64_t sliding_window = 0;
  int64_t bos_id = -1;
  std::vector<int64_t> eos_ids;
  std::string source_dtype;  // "f16", "bf16", "f32", "q4a32", "mixed", ... for inspect
};

// Reads a Hugging Face config.json (and generation_config.json beside it, for
// extra EOS ids). Supported: OPTForCausalLM (pre-LayerNorm, no projection),
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM. Throws Error naming
// the file and the key for anything missing, malformed or unsupported.
ModelConfig config_from_hf_json(const std::string& config_path);

// Reads GGUF metadata ("llama", "qwen2"). Tied embeddings when the file has no
// output.weight; llama3 RoPE factors from rope_freqs.weight when present.
ModelConfig config_from_gguf(const GgufFile& gguf);

// Checks the invariants the rest of Strata relies on (positive sizes, n_head a
// multiple of n_kv_head, even head_dim with RoPE, ids inside the vocabulary);
// throws Error naming `source` otherwise.
void validate_config(const ModelConfig& c, const std::string& source);

std::string_view family_name(Family f);         // "opt", "llama"
std::string_view norm_name(NormKind n);         // "layer_norm", "rms_norm"
std::string_view activation_name(Activation a); // "relu", "gelu", "silu"
std::string_view rope_layout_name(RopeLayout l); // "none", "half", "interleaved"
std::string_view rope_scaling_name(RopeScaling::Type t);  // "none", "linear", "llama3"

}  // namespace strata
