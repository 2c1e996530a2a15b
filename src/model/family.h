// A model family as one descriptor: the Hugging Face architecture and
// model_type it answers to, how its fields of config.json become a
// ModelConfig, the GGUF architecture it is read from (GGUF files are read for
// the llama-shaped families: RMSNorm, SwiGLU, RoPE) with what differs there,
// and the Hugging Face names of its tensors. Adding a family is adding its
// descriptor to model_families() (family.cpp), plus a ModelConfig field and a
// branch of the forward where its computation is new (docs/DESIGN.md §12).
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "model/config.h"

namespace strata {

class JsonObject;

// The Hugging Face names of a family's tensors; GGUF names are the canonical
// ones (token_embd, output_norm, blk.N.attn_q, ...).
struct HfTensorNames {
  std::string_view prefix;  // of the embeddings, final norm and layers: "model."
  std::string_view
      alt_prefix;  // used instead when the files have no prefix+embed_tokens ("" if none)
  std::string_view output_norm;  // the final norm's stem: "norm"
  // Layer stems, canonical -> Hugging Face ("attn_q" -> "self_attn.q_proj").
  std::vector<std::pair<std::string_view, std::string_view>> layer;
};

struct ModelFamily {
  Family family;
  std::string_view hf_architecture;  // "LlamaForCausalLM"
  std::string_view hf_model_type;    // "llama": config.json without architectures
  // The family's fields of config.json into c (c.architecture is set); throws
  // Error naming the file and key for anything missing or unsupported.
  void (*read_hf_config)(const JsonObject& cfg, ModelConfig& c);
  std::string_view gguf_architecture;  // "llama"; "" when GGUF files of it are not read
  bool gguf_qkv_bias = false;          // q/k/v projections with a bias in GGUF files
  RopeLayout gguf_rope_layout = RopeLayout::kInterleaved;  // how the GGUF converter stores q/k rows
  HfTensorNames hf_names;
};

// Every family this build reads, in the order errors list them.
const std::vector<ModelFamily>& model_families();

// The family of a Hugging Face architecture, model_type or GGUF architecture
// name; nullptr when none.
const ModelFamily* family_by_hf_architecture(std::string_view name);
const ModelFamily* family_by_model_type(std::string_view name);
const ModelFamily* family_by_gguf_architecture(std::string_view name);

// The names a field answers to, comma-separated, for error messages.
std::string supported_hf_architectures();
std::string supported_gguf_architectures();

}  // namespace strata
