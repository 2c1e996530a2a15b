#include "model/model.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "io/gguf.h"
#include "io/mapped_file.h"
#include "io/one_line.h"
#include "io/safetensors.h"
#include "model/family.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

struct Want {
  std::string name;            // canonical
  std::vector<int64_t> shape;  // what the config implies
};

// Every tensor the config implies, globals then layers, in a fixed order.
std::vector<Want> expected_tensors(const ModelConfig& c) {
  std::vector<Want> w;
  const int64_t E = c.n_embd, V = c.n_vocab, F = c.n_ff;
  const int64_t Q = c.n_head * c.head_dim, KV = c.n_kv_head * c.head_dim;
  w.push_back({"token_embd.weight", {V, E}});
  if (c.learned_pos) w.push_back({"position_embd.weight", {c.n_ctx + c.pos_offset, E}});
  w.push_back({"output_norm.weight", {E}});
  if (c.norm_bias) w.push_back({"output_norm.bias", {E}});
  if (!c.tie_embeddings) w.push_back({"output.weight", {V, E}});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    auto add = [&](std::string_view stem, std::vector<int64_t> shape, bool bias) {
      const int64_t rows = shape[0];
      w.push_back({ModelDesc::layer_name(l, fmt::format("{}.weight", stem)), std::move(shape)});
      if (bias) w.push_back({ModelDesc::layer_name(l, fmt::format("{}.bias", stem)), {rows}});
    };
    auto add_norm = [&](std::string_view stem) {
      w.push_back({ModelDesc::layer_name(l, fmt::format("{}.weight", stem)), {E}});
      if (c.norm_bias) w.push_back({ModelDesc::layer_name(l, fmt::format("{}.bias", stem)), {E}});
    };
    add_norm("attn_norm");
    add("attn_q", {Q, E}, c.attn_qkv_bias);
    add("attn_k", {KV, E}, c.attn_qkv_bias);
    add("attn_v", {KV, E}, c.attn_qkv_bias);
    add("attn_output", {E, Q}, c.attn_out_bias);
    add_norm("ffn_norm");
    if (c.gated_ffn) add("ffn_gate", {F, E}, c.ffn_bias);
    add("ffn_up", {F, E}, c.ffn_bias);
    add("ffn_down", {E, F}, c.ffn_bias);
  }
  return w;
}

// The Hugging Face name of a canonical tensor in a family whose names are
// `names`, with `prefix` (names.prefix or names.alt_prefix, as the files say).
std::string hf_name(const std::string& canonical, const HfTensorNames& names,
                    std::string_view prefix) {
  const std::string base(prefix);
  if (canonical == "token_embd.weight") return base + "embed_tokens.weight";
  if (canonical == "position_embd.weight") return base + "embed_positions.weight";
  if (canonical == "output.weight") return "lm_head.weight";
  if (canonical.starts_with("output_norm.")) {
    const std::string suffix = canonical.substr(std::string("output_norm").size());
    return base + std::string(names.output_norm) + suffix;
  }
  // blk.N.stem.suffix
  const size_t dot1 = canonical.find('.');
  const size_t dot2 = canonical.find('.', dot1 + 1);
  const size_t dot3 = canonical.rfind('.');
  STRATA_ASSERT(canonical.starts_with("blk.") && dot2 != std::string::npos && dot3 > dot2);
  const std::string layer = canonical.substr(dot1 + 1, dot2 - dot1 - 1);
  const std::string stem = canonical.substr(dot2 + 1, dot3 - dot2 - 1);
  const std::string suffix = canonical.substr(dot3);  // ".weight" / ".bias"
  const auto it = std::find_if(names.layer.begin(), names.layer.end(),
                               [&](const auto& n) { return n.first == stem; });
  STRATA_ASSERT_MSG(it != names.layer.end(), "no Hugging Face name for {}", canonical);
  return base + "layers." + layer + "." + std::string(it->second) + suffix;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

SourceFile source_file(const MappedFile& f) {
  return SourceFile{f.path(), f.size(), f.mtime_ns()};
}

}  // namespace

int64_t TensorInfo::n_elems() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorInfo* ModelDesc::find(const std::string& name) const {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &tensors[it->second];
}

const TensorInfo& ModelDesc::get(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("{}: the model has no tensor '{}'", path, name);
  return *t;
}

std::string ModelDesc::layer_name(int64_t layer, std::string_view name) {
  return fmt::format("blk.{}.{}", layer, name);
}

int64_t ModelDesc::n_params() const {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.n_elems();
  return n;
}

std::vector<std::pair<std::string, uint64_t>> ModelDesc::bytes_per_dtype() const {
  std::map<std::string, uint64_t> by;
  for (const auto& t : tensors) by[std::string(dtype_name(t.dtype))] += t.nbytes;
  std::vector<std::pair<std::string, uint64_t>> out(by.begin(), by.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

Model::Model() = default;
Model::~Model() = default;

std::unique_ptr<Model> Model::open(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    fail("{}: no such file or directory; pass a Hugging Face model directory or a .gguf file", path);
  }
  std::unique_ptr<Model> m(new Model());
  m->desc_.path = path;
  if (fs::is_directory(st)) {
    m->open_hf_dir(path);
  } else if (fs::is_regular_file(st)) {
    const fs::path p(path);
    if (p.extension() == ".safetensors" || p.filename() == "config.json") {
      fail("{}: pass the model directory that holds config.json and the .safetensors files, not "
           "one file of it",
           path);
    }
    m->open_gguf_file(path);
  } else {
    fail("{}: not a regular file or a directory", path);
  }
  m->finish();
  return m;
}

void Model::open_hf_dir(const std::string& dir) {
  desc_.format = ModelFormat::kHfDirectory;
  const fs::path config_path = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec)) {
    fail("{}: no config.json; expected a Hugging Face model directory (config.json and "
         "*.safetensors) or a .gguf file",
         dir);
  }
  desc_.config = config_from_hf_json(config_path.string());
  const ModelConfig& c = desc_.config;
  safetensors_ = std::make_unique<SafetensorsSet>(SafetensorsSet::open_dir(dir));
  const SafetensorsSet& set = *safetensors_;
  for (const auto& shard : set.shards()) {
    desc_.files.push_back(source_file(shard->file()));
    maps_.push_back(&shard->file());
  }

  const ModelFamily* family = family_by_hf_architecture(c.architecture);
  STRATA_ASSERT(family != nullptr);
  const HfTensorNames& names = family->hf_names;
  std::string_view prefix = names.prefix;
  if (!names.alt_prefix.empty() &&
      !set.find(std::string(names.prefix) + "embed_tokens.weight") &&
      set.find(std::string(names.alt_prefix) + "embed_tokens.weight")) {
    prefix = names.alt_prefix;
  }
  std::set<std::string> used;
  for (const Want& w : expected_tensors(c)) {
    const std::string src = hf_name(w.name, names, prefix);
    const SafetensorsSet::Entry* e = set.find(src);
    if (!e) {
      fail("{}: tensor '{}' is missing; a {} with this config.json needs it", dir, src,
           c.architecture);
    }
    const SafetensorsTensor& t = *e->tensor;
    if (t.shape != w.shape) {
      fail("{}: tensor '{}' has shape {}, but config.json implies {}", set.shards()[e->shard]->path(),
           src, shape_str(t.shape), shape_str(w.shape));
    }
    used.insert(src);
    desc_.tensors.push_back(TensorInfo{w.name, src, t.dtype, t.shape, e->shard, t.offset, t.nbytes});
  }
  for (const std::string& name : set.names()) {
    if (!used.count(name)) spdlog::debug("{}: ignoring tensor '{}', which the model does not use", dir, one_line(name, 200));
  }
}

void Model::open_gguf_file(const std::string& path) {
  desc_.format = ModelFormat::kGguf;
  gguf_ = std::make_unique<GgufFile>(path);
  const GgufFile& g = *gguf_;
  desc_.config = config_from_gguf(g);
  const ModelConfig& c = desc_.config;
  desc_.files.push_back(source_file(g.file()));
  maps_.push_back(&g.file());

  std::set<std::string> used = {"rope_freqs.weight"};  // read into the config
  for (const Want& w : expected_tensors(c)) {
    const GgufTensorInfo* t = g.find_tensor(w.name);
    if (!t) {
      fail("{}: tensor '{}' is missing; a {} model with this metadata needs it", path, w.name,
           c.architecture);
    }
    if (t->shape != w.shape) {
      fail("{}: tensor '{}' has shape {}, but the metadata implies {}", path, w.name,
           shape_str(t->shape), shape_str(w.shape));
    }
    const bool is_float = t->dtype == DType::kF32 || t->dtype == DType::kF16 || t->dtype == DType::kBF16;
    if (!is_float && (w.shape.size() == 1 || !is_quantized(t->dtype))) {
      fail("{}: tensor '{}' has type {}; Strata reads {} tensors only as F32, F16 or BF16{}", path,
           w.name, ggml_type_name(t->ggml_type), w.shape.size() == 1 ? "one-dimensional" : "these",
           w.shape.size() == 1 ? "" : " or a quantized format");
    }
    used.insert(w.name);
    desc_.tensors.push_back(TensorInfo{w.name, t->name, t->dtype, t->shape, 0, t->offset, t->nbytes});
  }
  for (const auto& t : g.tensors()) {
    if (!used.count(t.name)) spdlog::debug("{}: ignoring tensor '{}', which the model does not use", path, one_line(t.name, 200));
  }
}

void Model::finish() {
  for (size_t i = 0; i < desc_.tensors.size(); ++i) desc_.index.emplace(desc_.tensors[i].name, i);
  // Every range was checked by the readers; check again here, where it matters.
  for (const auto& t : desc_.tensors) {
    STRATA_ASSERT(t.file >= 0 && static_cast<size_t>(t.file) < maps_.size());
    STRATA_ASSERT(maps_[t.file]->in_bounds(t.offset, t.nbytes));
  }
  // The dtype of the matrices, for inspect: one name, or "mixed".
  std::set<std::string> matrix_dtypes;
  for (const auto& t : desc_.tensors) {
    if (t.shape.size() >= 2) matrix_dtypes.insert(std::string(dtype_name(t.dtype)));
  }
  desc_.config.source_dtype = matrix_dtypes.size() == 1 ? *matrix_dtypes.begin() : "mixed";
}

std::span<const std::byte> Model::bytes(const TensorInfo& t) const {
  STRATA_ASSERT(t.file >= 0 && static_cast<size_t>(t.file) < maps_.size());
  return maps_[t.file]->slice(t.offset, t.nbytes);
}

}  // namespace strata
