// Model hyper-parameters for the two families Strata runs, read from a Hugging
// Face config.json or from GGUF metadata. Plain data: the forward pass, the
// offload engine and the policy's model shapes are all derived from it.
//
//   OPT family:   LayerNorm (with bias), learned absolute positions (offset 2),
//                 ReLU MLP (fc1/fc2) with biases, q/k/v/out biases, tied lm_head.
//   Llama family: RMSNorm, RoPE, SwiGLU MLP (gate/up/down), grouped-query
//                 attention; Qwen2 adds q/k/v biases; Mistral is Llama's shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

enum class Family { kOpt, kLlama };
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
  int64_t bos_id = -1;
  std::vector<int64_t> eos_ids;
  std::string source_dtype;  // "f16", "bf16", "f32", "q4_1", "mixed", ... for inspect
};

}  // namespace strata
