// Model shapes: presets and checks; see model_shape.h.
#include "policy/model_shape.h"

#include <algorithm>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/dtype.h"
#include "core/error.h"
#include "policy/presets.h"
#include "policy/yaml_fields.h"

namespace strata {

int64_t ModelShape::layer_weight_elems() const {
  const int64_t attn = hidden * q_dim()         // q
                       + 2 * hidden * kv_dim()  // k, v
                       + q_dim() * hidden;      // o
  const int64_t ffn = (gated_ffn ? 3 : 2) * hidden * n_ff;
  return attn + ffn;
}

int64_t ModelShape::largest_layer_matrix_elems() const {
  return hidden * std::max(q_dim() + 2 * kv_dim(), n_ff);
}

int64_t ModelShape::global_weight_elems() const {
  return head_weight_elems() * (tied_embeddings ? 1 : 2);
}

double dtype_bytes_per_elem(const std::string& dtype, const std::string& what) {
  const std::optional<DType> t = dtype_from_name(dtype);
  if (!t) {
    fail("{}: '{}' is not a dtype; use f32, f16, bf16 or a quantized format like q4a32", what,
         yaml_fields::printable(dtype));
  }
  const DTypeInfo& info = dtype_info(*t);
  return static_cast<double>(info.block_bytes) / static_cast<double>(info.block_elems);
}

void validate_model_shape(const ModelShape& s, const std::string& source) {
  auto positive = [&](int64_t v, const char* key) {
    if (v <= 0) fail("{}: {}: must be positive (is {})", source, key, v);
  };
  if (s.name.empty()) fail("{}: name: missing; every model shape has a name", source);
  positive(s.n_layer, "n_layer");
  positive(s.hidden, "hidden");
  positive(s.n_head, "n_head");
  positive(s.n_kv_head, "n_kv_head");
  positive(s.head_dim, "head_dim");
  positive(s.n_ff, "n_ff");
  positive(s.vocab, "vocab");
  if (s.max_context < 0)
    fail("{}: max_context: must not be negative (is {})", source, s.max_context);
  if (s.n_head % s.n_kv_head != 0) {
    fail(
        "{}: n_kv_head: {} does not divide n_head {}; grouped-query attention shares each KV head "
        "among a whole number of query heads",
        source, s.n_kv_head, s.n_head);
  }
  if (!(s.weight_bytes > 0)) fail("{}: weight_dtype: bytes per element must be positive", source);
  // Keep every product the cost model forms far from int64 overflow.
  const double params =
      static_cast<double>(s.n_layer) *
          (static_cast<double>(s.hidden) *
           (2.0 * s.n_head * s.head_dim + 2.0 * s.n_kv_head * s.head_dim + 3.0 * s.n_ff)) +
      2.0 * static_cast<double>(s.vocab) * s.hidden;
  if (params > 1e15)
    fail("{}: the shape has {:.3g} parameters; that is not a real model", source, params);
}

ModelShape parse_model_shape(const std::string& yaml_text, const std::string& source) {
  using yaml_fields::Map;
  const Map root(yaml_fields::parse(yaml_text, source), source, "");
  root.check_keys({"name", "aliases", "source", "n_layer", "hidden", "n_head", "n_kv_head",
                   "head_dim", "n_ff", "vocab", "max_context", "gated_ffn", "tied_embeddings",
                   "weight_dtype"});
  ModelShape s;
  s.name = root.string("name");
  if (root.has("aliases")) {
    const YAML::Node aliases = root.node("aliases");
    if (!aliases.IsSequence()) root.fail_at("aliases", "expected a list of names");
    for (const auto& a : aliases) {
      if (!a.IsScalar()) root.fail_at("aliases", "expected a list of names");
      s.aliases.push_back(a.Scalar());
    }
  }
  s.source = root.optional_string("source").value_or("");
  s.n_layer = root.integer("n_layer", 1);
  s.hidden = root.integer("hidden", 1);
  s.n_head = root.integer("n_head", 1);
  s.n_kv_head = root.optional_integer("n_kv_head", 1).value_or(s.n_head);
  if (!root.has("head_dim") && s.hidden % s.n_head != 0) {
    root.fail_at("head_dim", fmt::format("missing, and hidden {} is not a multiple of n_head {}; "
                                         "give head_dim",
                                         s.hidden, s.n_head));
  }
  s.head_dim = root.optional_integer("head_dim", 1).value_or(s.hidden / s.n_head);
  s.n_ff = root.integer("n_ff", 1);
  s.vocab = root.integer("vocab", 1);
  s.max_context = root.optional_integer("max_context", 0).value_or(0);
  s.gated_ffn = root.boolean("gated_ffn");
  s.tied_embeddings = root.boolean("tied_embeddings");
  s.weight_dtype = root.optional_string("weight_dtype").value_or("f16");
  s.weight_bytes = dtype_bytes_per_elem(s.weight_dtype, source + ": weight_dtype");
  validate_model_shape(s, source);
  return s;
}

ModelShape load_model_shape(const std::string& path) {
  return parse_model_shape(yaml_fields::read_text(path), path);
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const EmbeddedPreset& p : presets_in("models")) {
    names.push_back(parse_model_shape(std::string(p.text), "preset " + std::string(p.path)).name);
  }
  return names;
}

ModelShape find_model_preset(const std::string& name) {
  const std::string want = normalize_preset_name(name);
  for (const EmbeddedPreset& p : presets_in("models")) {
    ModelShape s = parse_model_shape(std::string(p.text), "preset " + std::string(p.path));
    bool match = normalize_preset_name(s.name) == want;
    for (const std::string& a : s.aliases) match = match || normalize_preset_name(a) == want;
    if (match) return s;
  }
  fail("--model: '{}' is not a model preset, a shape YAML or a model path; presets: {}",
       yaml_fields::printable(name), fmt::join(model_preset_names(), ", "));
}

}  // namespace strata
