// `strata inspect --model PATH [--json]`: what a model is, read from its files
// without loading weights: architecture and hyper-parameters, parameter count,
// bytes per dtype, and what kind of tokenizer it carries (read from the
// tokenizer metadata directly, so inspect works for any tokenizer).
#include <filesystem>

#include "cli/command.h"
#include "core/error.h"
#include "core/units.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/one_line.h"
#include "model/config_json.h"
#include "model/model.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

struct TokenizerSummary {
  std::string kind = "none";  // "BPE", "gpt2", "llama", ...
  std::string pre;            // pre-tokenizer (GGUF tokenizer.ggml.pre, or tokenizer.json's)
  std::string source;         // the file it was read from
  int64_t n_tokens = -1;      // vocabulary entries (+ added tokens), -1 when unknown
};

// tokenizer.json's pre_tokenizer as one word: "ByteLevel", "Sequence[Split, ByteLevel]".
std::string pre_tokenizer_name(const Json& pre) {
  if (!pre.is_object()) return pre.is_null() ? "" : "?";
  auto type = pre.find("type");
  if (type == pre.end() || !type->is_string()) return "?";
  std::string s = type->get<std::string>();
  auto inner = pre.find("pretokenizers");
  if (s == "Sequence" && inner != pre.end() && inner->is_array()) {
    s += "[";
    bool first = true;
    for (const Json& p : *inner) {
      if (!first) s += ", ";
      s += pre_tokenizer_name(p);
      first = false;
    }
    s += "]";
  }
  return s;
}

TokenizerSummary tokenizer_summary(const Model& model) {
  TokenizerSummary t;
  if (const GgufFile* g = model.gguf()) {
    t.source = g->path();
    if (auto m = g->get_string("tokenizer.ggml.model")) t.kind = std::string(*m);
    if (auto pre = g->get_string("tokenizer.ggml.pre")) t.pre = std::string(*pre);
    if (const GgufValue* tokens = g->find("tokenizer.ggml.tokens");
        tokens && tokens->type == GgufType::kArray) {
      t.n_tokens = static_cast<int64_t>(tokens->n_elems);
    }
    return t;
  }
  const fs::path dir(model.desc().path);
  std::error_code ec;
  const fs::path tj = dir / "tokenizer.json";
  if (fs::is_regular_file(tj, ec)) {
    t.source = tj.string();
    const Json j = read_json_file(t.source, "tokenizer");
    if (!j.is_object())
      fail("{}: the tokenizer is {}, expected a JSON object", t.source, json_type_name(j));
    auto m = j.find("model");
    if (m == j.end() || !m->is_object()) fail("{}: the tokenizer has no 'model' object", t.source);
    auto type = m->find("type");
    t.kind = type != m->end() && type->is_string() ? type->get<std::string>() : "BPE";
    if (auto pre = j.find("pre_tokenizer"); pre != j.end()) t.pre = pre_tokenizer_name(*pre);
    if (auto vocab = m->find("vocab");
        vocab != m->end() && (vocab->is_object() || vocab->is_array())) {
      t.n_tokens = static_cast<int64_t>(vocab->size());
      // Added tokens not already in the vocabulary (ids past it) count too.
      if (auto added = j.find("added_tokens"); added != j.end() && added->is_array()) {
        int64_t max_id = t.n_tokens - 1;
        for (const Json& a : *added) {
          if (a.is_object() && a.contains("id") && a["id"].is_number_integer()) {
            max_id = std::max(max_id, a["id"].get<int64_t>());
          }
        }
        t.n_tokens = max_id + 1;
      }
    }
    return t;
  }
  if (fs::is_regular_file(dir / "tokenizer.model", ec)) {
    t.kind = "sentencepiece";
    t.source = (dir / "tokenizer.model").string();
  }
  return t;
}

std::string count_str(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1000000) return fmt::format("{:.1f}M", n / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", n / 1e3);
  return std::to_string(n);
}

std::string biases_str(const ModelConfig& c) {
  std::vector<std::string> b;
  if (c.attn_qkv_bias) b.push_back("qkv");
  if (c.attn_out_bias) b.push_back("attn_output");
  if (c.ffn_bias) b.push_back("ffn");
  if (c.norm_bias) b.push_back("norm");
  return b.empty() ? "none" : fmt::format("{}", fmt::join(b, ", "));
}

std::string rope_scaling_str(const RopeScaling& r, const ModelConfig& c) {
  if (!c.rope_freq_factors.empty()) {
    return fmt::format("per-dimension factors ({} from rope_freqs.weight)",
                       c.rope_freq_factors.size());
  }
  switch (r.type) {
    case RopeScaling::Type::kNone:
      return "none";
    case RopeScaling::Type::kLinear:
      return fmt::format("linear, factor {}", r.factor);
    case RopeScaling::Type::kLlama3:
      return fmt::format(
          "llama3, factor {}, low_freq_factor {}, high_freq_factor {}, original context {}",
          r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position);
  }
  return "unknown";
}

Json to_json(const Model& model, const TokenizerSummary& tok) {
  const ModelDesc& d = model.desc();
  const ModelConfig& c = d.config;
  Json j;
  j["path"] = d.path;
  j["format"] = d.format == ModelFormat::kGguf ? "gguf" : "hf";
  j.update(config_to_json(c));
  // Positions as one object instead of the config's flat fields.
  for (const char* k : {"learned_pos", "pos_offset", "rope_layout", "rope_theta", "rope_scaling",
                        "rope_freq_factors"}) {
    j.erase(k);
  }
  if (c.learned_pos) {
    j["position"] = {{"kind", "learned"}, {"offset", c.pos_offset}};
  } else {
    Json scaling = {{"type", rope_scaling_name(c.rope_scaling.type)}};
    if (c.rope_scaling.type != RopeScaling::Type::kNone) scaling["factor"] = c.rope_scaling.factor;
    if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
      scaling["low_freq_factor"] = c.rope_scaling.low_freq_factor;
      scaling["high_freq_factor"] = c.rope_scaling.high_freq_factor;
      scaling["original_max_position"] = c.rope_scaling.original_max_position;
    }
    if (!c.rope_freq_factors.empty()) scaling["freq_factors"] = c.rope_freq_factors;
    j["position"] = {{"kind", "rope"},
                     {"layout", rope_layout_name(c.rope_layout)},
                     {"theta", c.rope_theta},
                     {"scaling", scaling}};
  }
  j["n_params"] = d.n_params();
  Json bytes = Json::object();
  uint64_t total = 0;
  for (const auto& [dt, n] : d.bytes_per_dtype()) {
    bytes[dt] = n;
    total += n;
  }
  j["bytes_per_dtype"] = bytes;
  j["bytes"] = total;
  Json files = Json::array();
  for (const auto& f : d.files) files.push_back({{"path", f.path}, {"size", f.size}});
  j["files"] = files;
  j["tokenizer"] = {{"kind", tok.kind}, {"pre", tok.pre}, {"source", tok.source}};
  if (tok.n_tokens >= 0) j["tokenizer"]["n_tokens"] = tok.n_tokens;
  return j;
}

void print_text(const Model& model, const TokenizerSummary& tok) {
  const ModelDesc& d = model.desc();
  const ModelConfig& c = d.config;
  auto line = [](std::string_view key, const std::string& value) {
    fmt::print("{:<20}{}\n", fmt::format("{}:", key), value);
  };
  uint64_t file_bytes = 0;
  for (const auto& f : d.files) file_bytes += f.size;
  line("model", d.path);
  line("format", fmt::format("{} ({} file{}, {})",
                             d.format == ModelFormat::kGguf ? "GGUF" : "Hugging Face safetensors",
                             d.files.size(), d.files.size() == 1 ? "" : "s",
                             format_bytes(double(file_bytes))));
  line("architecture", c.architecture);
  line("family", std::string(family_name(c.family)));
  line("layers", std::to_string(c.n_layer));
  line("hidden size", std::to_string(c.n_embd));
  line("heads", fmt::format("{} query, {} key/value{}", c.n_head, c.n_kv_head,
                            c.n_kv_head != c.n_head ? " (grouped-query)" : ""));
  line("head dim", std::to_string(c.head_dim));
  line("intermediate size",
       fmt::format("{} ({}{})", c.n_ff, activation_name(c.act), c.gated_ffn ? ", gated" : ""));
  line("vocab size", std::to_string(c.n_vocab));
  line("context length", std::to_string(c.n_ctx));
  if (c.learned_pos) {
    line("positions", fmt::format("learned, offset {}", c.pos_offset));
  } else {
    line("rope", fmt::format("theta {}, layout {}, scaling {}", c.rope_theta,
                             rope_layout_name(c.rope_layout), rope_scaling_str(c.rope_scaling, c)));
  }
  if (c.sliding_window > 0) line("sliding window", std::to_string(c.sliding_window));
  line("norm", fmt::format("{} (eps {})", norm_name(c.norm), c.norm_eps));
  line("biases", biases_str(c));
  line("tied embeddings", c.tie_embeddings ? "yes" : "no");
  line("bos / eos",
       fmt::format("{} / {}", c.bos_id,
                   c.eos_ids.empty() ? "none" : fmt::format("{}", fmt::join(c.eos_ids, ", "))));
  line("parameters", fmt::format("{} ({})", count_str(d.n_params()), d.n_params()));
  std::vector<std::string> parts;
  uint64_t total = 0;
  for (const auto& [dt, n] : d.bytes_per_dtype()) {
    // GGUF's names for the formats it shares with Strata.
    const auto t = dtype_from_name(dt);
    const char* gguf = !t            ? nullptr
                       : *t == kQ4_0 ? "Q4_0"
                       : *t == kQ4_1 ? "Q4_1"
                       : *t == kQ8_0 ? "Q8_0"
                                     : nullptr;
    parts.push_back(gguf ? fmt::format("{} (GGUF {}) {}", dt, gguf, format_bytes(double(n)))
                         : fmt::format("{} {}", dt, format_bytes(double(n))));
    total += n;
  }
  line("weights", fmt::format("{} ({})", format_bytes(double(total)), fmt::join(parts, ", ")));
  std::string t = tok.kind;
  if (!tok.pre.empty()) t += fmt::format(", pre-tokenizer {}", tok.pre);
  if (tok.n_tokens >= 0) t += fmt::format(", {} tokens", tok.n_tokens);
  line("tokenizer", one_line(t, 300));
}

const Command kInspect{
    "inspect", "Describe a model: architecture, sizes, parameters, dtypes, tokenizer", 60,
    [](CLI::App& sub) -> Runner {
      auto model_path = std::make_shared<std::string>();
      auto as_json = std::make_shared<bool>(false);
      sub.add_option("--model,-m", *model_path, "Hugging Face model directory or .gguf file")
          ->required();
      sub.add_flag("--json", *as_json, "Print JSON instead of text");
      return [model_path, as_json]() {
        const auto model = Model::open(*model_path);
        const TokenizerSummary tok = tokenizer_summary(*model);
        if (*as_json) {
          fmt::print("{}\n", to_json(*model, tok).dump(2));
        } else {
          print_text(*model, tok);
        }
        return 0;
      };
    }};

}  // namespace
}  // namespace strata::cli
