// Model shapes: the numbers of a transformer that the cost model needs, and
// nothing about its tensors. Presets live in policies/models/ (OPT, Llama,
// Qwen, SmolLM2; taken from the published config.json of each model), so a
// user can plan a 175B run before downloading it. A loaded model's config is
// turned into a ModelShape in cli/.
//
// Invariant: a shape returned by parse/find/validated has positive sizes,
// n_head a multiple of n_kv_head, and a positive weight_bytes.
//
// YAML schema (policies/models/<name>.yaml):
//   name: opt-30b            # required; matched case-insensitively
//   aliases: [facebook/opt-30b]
//   source: "facebook/opt-30b config.json"   # optional, where the numbers come from
//   n_layer: 48
//   hidden: 7168             # hidden_size
//   n_head: 56
//   n_kv_head: 56            # optional, default n_head (grouped-query attention when fewer)
//   head_dim: 128            # optional, default hidden / n_head
//   n_ff: 28672              # intermediate size
//   vocab: 50272
//   max_context: 2048        # optional
//   gated_ffn: false         # SwiGLU (gate, up, down) when true; two matrices when false
//   tied_embeddings: true    # the output head is the token embedding
//   weight_dtype: f16        # f32, f16, bf16 or a quantized format (q4a32, ...)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct ModelShape {
  std::string name;
  std::vector<std::string> aliases;
  std::string source;
  int64_t n_layer = 0;
  int64_t hidden = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t vocab = 0;
  int64_t max_context = 0;  // 0 = not known
  bool gated_ffn = false;
  bool tied_embeddings = false;
  std::string weight_dtype = "f16";
  double weight_bytes = 2.0;  // bytes per weight element as stored

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_kv_head * head_dim; }
  // Elements of the matrices of one layer: q, k, v, o and the FFN. Norms and
  // biases (under 0.1% of a layer) are left out, as in FlexGen's model.
  int64_t layer_weight_elems() const;
  // The largest matrix of a layer, counted as if q, k and v were one
  // tensor (some formats fuse them) beside the FFN's.
  int64_t largest_layer_matrix_elems() const;
  // The output head [vocab, hidden].
  int64_t head_weight_elems() const { return vocab * hidden; }
  // Token embedding plus the output head when it is not tied.
  int64_t global_weight_elems() const;
  int64_t n_params() const { return n_layer * layer_weight_elems() + global_weight_elems(); }
};

ModelShape parse_model_shape(const std::string& yaml_text, const std::string& source);
ModelShape load_model_shape(const std::string& path);
// A preset by name or alias ("opt-30b", "facebook/OPT-30B"); unknown names list
// the presets.
ModelShape find_model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
// Throws Error naming `source` and the field when a value is out of range
// (defaults such as head_dim = hidden / n_head are filled in by the parser).
void validate_model_shape(const ModelShape& shape, const std::string& source);
// Bytes per element of a dtype name ("f16" -> 2, "q4a32" -> 0.625); Error
// naming `what` for an unknown name.
double dtype_bytes_per_elem(const std::string& dtype, const std::string& what);

}  // namespace strata
