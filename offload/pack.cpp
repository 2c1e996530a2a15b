// Weight pack format: the layout rules, the manifest in JSON and back, the
// checks of a manifest against weights.bin and against a model, checksums.
#include "offload/pack.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "io/one_line.h"
#include "model/config_json.h"
#include "model/model.h"
#include "offload/aligned_buffer.h"
#include "offload/checksum.h"
#include "offload/disk_io.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kDamaged = "; the pack is damaged: rebuild it with strata convert";

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Rank of a layer tensor's stem in the documented order ("attn_q.weight").
int layer_tensor_rank(std::string_view stem) {
  static const std::vector<std::string_view> kOrder = {
      // one-dimensional, forward order
      "attn_norm.weight", "attn_norm.bias", "attn_q.bias", "attn_k.bias", "attn_v.bias",
      "attn_output.bias", "ffn_norm.weight", "ffn_norm.bias", "ffn_gate.bias", "ffn_up.bias",
      "ffn_down.bias",
      // matrices, forward order
      "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
      "ffn_up.weight", "ffn_down.weight"};
  auto it = std::find(kOrder.begin(), kOrder.end(), stem);
  return it == kOrder.end() ? -1 : static_cast<int>(it - kOrder.begin());
}

// "blk.12.attn_q.weight" -> (12, "attn_q.weight"); layer -1 for globals.
std::pair<int64_t, std::string_view> split_layer_name(std::string_view name) {
  if (!name.starts_with("blk.")) return {-1, name};
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos) return {-1, name};
  int64_t layer = 0;
  for (char c : name.substr(4, dot - 4)) {
    if (c < '0' || c > '9') return {-1, name};
    layer = layer * 10 + (c - '0');
  }
  return {layer, name.substr(dot + 1)};
}

}  // namespace

std::string PackOptions::to_string() const {
  return weight_dtype ? std::string(dtype_name(*weight_dtype)) : "source";
}

const PackTensor* PackUnit::find(std::string_view tensor_name) const {
  for (const auto& t : tensors) {
    if (t.name == tensor_name) return &t;
  }
  return nullptr;
}

uint64_t PackUnit::tail_bytes(size_t first) const {
  STRATA_ASSERT(first <= tensors.size());
  if (first == tensors.size()) return 0;
  return offset + length - tensors[first].offset;
}

std::vector<PackLayoutUnit> pack_layout(const ModelDesc& desc) {
  std::vector<PackLayoutUnit> units;
  auto add_global = [&](std::string name, std::initializer_list<const char*> tensor_names) {
    PackLayoutUnit u{std::move(name), -1, {}};
    for (const char* t : tensor_names) {
      if (const TensorInfo* ti = desc.find(t)) u.tensors.push_back(ti);
    }
    if (!u.tensors.empty()) units.push_back(std::move(u));
  };
  add_global("embed", {"token_embd.weight", "position_embd.weight"});
  add_global("output_norm", {"output_norm.weight", "output_norm.bias"});
  add_global("output", {"output.weight"});
  const size_t n_globals_units = units.size();
  const int64_t n_layer = desc.config.n_layer;
  for (int64_t l = 0; l < n_layer; ++l)
    units.push_back(PackLayoutUnit{fmt::format("blk.{}", l), l, {}});
  size_t n_placed = 0;
  for (const auto& u : units) n_placed += u.tensors.size();
  for (const TensorInfo& t : desc.tensors) {
    const auto [layer, stem] = split_layer_name(t.name);
    if (layer < 0) continue;
    STRATA_ASSERT_MSG(layer < n_layer && layer_tensor_rank(stem) >= 0,
                      "pack layout: unexpected tensor {}", t.name);
    units[n_globals_units + layer].tensors.push_back(&t);
    ++n_placed;
  }
  STRATA_ASSERT_MSG(n_placed == desc.tensors.size(), "pack layout: {} of {} tensors placed",
                    n_placed, desc.tensors.size());
  for (size_t i = n_globals_units; i < units.size(); ++i) {
    std::stable_sort(units[i].tensors.begin(), units[i].tensors.end(),
                     [](const TensorInfo* a, const TensorInfo* b) {
                       return layer_tensor_rank(split_layer_name(a->name).second) <
                              layer_tensor_rank(split_layer_name(b->name).second);
                     });
  }
  return units;
}

DType pack_dtype(std::string_view name, const std::vector<int64_t>& shape, DType source,
                 const PackOptions& options) {
  if (!options.weight_dtype) return source;
  const bool matrix =
      shape.size() == 2 && name.ends_with(".weight") && name != "position_embd.weight";
  if (!matrix || !row_elems_ok(*options.weight_dtype, shape.back())) return source;
  return *options.weight_dtype;
}

uint64_t packed_bytes(const TensorInfo& t, const PackOptions& options) {
  const DType dt = pack_dtype(t.name, t.shape, t.dtype, options);
  if (dt == t.dtype) return t.nbytes;
  return static_cast<uint64_t>(t.shape[0]) * row_bytes(dt, t.shape[1]);
}

Json PackManifest::to_json() const {
  Json j;
  j["format"] = "strata-pack";
  j["version"] = version;
  Json files = Json::array();
  for (const auto& f : source.files) {
    files.push_back({{"path", f.path},
                     {"size", f.size},
                     {"mtime_ns", f.mtime_ns},
                     {"header_checksum", checksum_to_string(f.header_checksum)}});
  }
  j["source"] = {{"path", source.path}, {"format", source.format}, {"files", files}};
  j["options"] = {{"weights", options.to_string()}};
  j["config"] = config;
  j["weights_file"] = kPackWeightsName;
  j["weights_bytes"] = weights_bytes;
  j["unit_align"] = kPackUnitAlign;
  j["tensor_align"] = kPackTensorAlign;
  Json us = Json::array();
  for (const auto& u : units) {
    Json ts = Json::array();
    for (const auto& t : u.tensors) {
      ts.push_back({{"name", t.name},
                    {"shape", t.shape},
                    {"dtype", dtype_name(t.dtype)},
                    {"offset", t.offset},
                    {"nbytes", t.nbytes},
                    {"checksum", checksum_to_string(t.checksum)}});
    }
    us.push_back({{"name", u.name},
                  {"layer", u.layer},
                  {"offset", u.offset},
                  {"length", u.length},
                  {"checksum", checksum_to_string(u.checksum)},
                  {"tensors", ts}});
  }
  j["units"] = us;
  return j;
}

namespace {

const Json& require_field(const JsonObject& o, std::string_view key, Json::value_t type,
                          const char* type_name) {
  auto it = o.json().find(std::string(key));
  if (it == o.json().end() || it->is_null()) fail("{} is missing; it is required", o.where(key));
  const bool ok =
      type == Json::value_t::number_unsigned ? it->is_number_integer() : it->type() == type;
  if (!ok) fail("{} is {}, expected {}", o.where(key), json_type_name(*it), type_name);
  return *it;
}

std::string require_string(const JsonObject& o, std::string_view key) {
  return require_field(o, key, Json::value_t::string, "a string").get<std::string>();
}

uint64_t require_u64(const JsonObject& o, std::string_view key) {
  return static_cast<uint64_t>(o.require_int(key, 0));
}

uint64_t require_checksum(const JsonObject& o, std::string_view key) {
  const std::string s = require_string(o, key);
  auto h = checksum_from_string(s);
  if (!h) fail("{} is '{}', expected \"xxh64:\" and 16 hex digits", o.where(key), one_line(s, 80));
  return *h;
}

PackManifest parse_manifest_fields(const Json& j, const std::string& path,
                                   const std::string& weights_path, uint64_t file_bytes) {
  if (!j.is_object())
    fail("{}: the manifest is {}, expected a JSON object", path, json_type_name(j));
  const JsonObject o(j, path);
  PackManifest m;
  const std::string format = require_string(o, "format");
  if (format != "strata-pack")
    fail("{}: format is '{}', not a Strata weight pack", path, one_line(format, 80));
  m.version = static_cast<int>(o.require_int("version", 0));
  if (m.version != kPackFormatVersion) {
    fail("{}: pack format version {}, this strata reads version {}", path, m.version,
         kPackFormatVersion);
  }

  const JsonObject src(require_field(o, "source", Json::value_t::object, "an object"), path,
                       "source");
  m.source.path = require_string(src, "path");
  m.source.format = require_string(src, "format");
  if (m.source.format != "gguf" && m.source.format != "hf") {
    fail("{} is '{}', expected \"gguf\" or \"hf\"", src.where("format"),
         one_line(m.source.format, 80));
  }
  const Json& files = require_field(src, "files", Json::value_t::array, "an array");
  for (size_t i = 0; i < files.size(); ++i) {
    if (!files[i].is_object())
      fail("{}: source.files[{}] is {}, expected an object", path, i, json_type_name(files[i]));
    const JsonObject f(files[i], path, fmt::format("source.files[{}]", i));
    PackSourceFile sf;
    sf.path = require_string(f, "path");
    sf.size = require_u64(f, "size");
    sf.mtime_ns = f.require_int("mtime_ns", INT64_MIN);
    sf.header_checksum = require_checksum(f, "header_checksum");
    m.source.files.push_back(std::move(sf));
  }

  const JsonObject opts(require_field(o, "options", Json::value_t::object, "an object"), path,
                        "options");
  const std::string weights = require_string(opts, "weights");
  if (weights != "source") {
    auto t = dtype_from_name(weights);
    if (!t || !is_quantized(*t)) {
      fail("{} is '{}', expected \"source\" or a quantized dtype name", opts.where("weights"),
           one_line(weights, 80));
    }
    m.options.weight_dtype = *t;
  }
  m.config = require_field(o, "config", Json::value_t::object, "an object");

  if (require_string(o, "weights_file") != kPackWeightsName) {
    fail("{} is not \"{}\"", o.where("weights_file"), kPackWeightsName);
  }
  if (require_u64(o, "unit_align") != kPackUnitAlign ||
      require_u64(o, "tensor_align") != kPackTensorAlign) {
    fail("{}: unit_align/tensor_align are not {}/{}", path, kPackUnitAlign, kPackTensorAlign);
  }
  m.weights_bytes = require_u64(o, "weights_bytes");
  if (m.weights_bytes != file_bytes) {
    fail("{}: the file has {} bytes but the manifest {} says {}: the pack is truncated or damaged",
         weights_path, file_bytes, path, m.weights_bytes);
  }
  if (m.weights_bytes % kPackUnitAlign != 0) {
    fail("{}: weights_bytes {} is not a multiple of {}", path, m.weights_bytes, kPackUnitAlign);
  }

  const Json& units = require_field(o, "units", Json::value_t::array, "an array");
  std::set<std::string> unit_names, tensor_names;
  uint64_t prev_end = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    if (!units[i].is_object())
      fail("{}: units[{}] is {}, expected an object", path, i, json_type_name(units[i]));
    const JsonObject uo(units[i], path, fmt::format("units[{}]", i));
    PackUnit u;
    u.name = require_string(uo, "name");
    if (!unit_names.insert(u.name).second)
      fail("{}: unit '{}' appears twice", path, one_line(u.name, 80));
    u.layer = uo.require_int("layer", -1);
    u.offset = require_u64(uo, "offset");
    u.length = require_u64(uo, "length");
    u.checksum = require_checksum(uo, "checksum");
    const std::string un = one_line(u.name, 80);
    if (u.offset % kPackUnitAlign != 0) {
      fail("{}: unit '{}' offset {} is not a multiple of {}", path, un, u.offset, kPackUnitAlign);
    }
    if (u.offset < prev_end)
      fail("{}: unit '{}' offset {} overlaps the unit before it", path, un, u.offset);
    if (u.offset > m.weights_bytes || u.length > m.weights_bytes - u.offset) {
      fail("{}: unit '{}' [{}, +{}) runs past the end of {} ({} bytes)", path, un, u.offset,
           u.length, weights_path, m.weights_bytes);
    }
    const uint64_t unit_end = u.offset + u.length;
    prev_end = unit_end;
    const Json& tensors = require_field(uo, "tensors", Json::value_t::array, "an array");
    if (tensors.empty()) fail("{}: unit '{}' has no tensors", path, un);
    uint64_t prev_tensor_end = u.offset;
    for (size_t k = 0; k < tensors.size(); ++k) {
      if (!tensors[k].is_object()) {
        fail("{}: units[{}].tensors[{}] is {}, expected an object", path, i, k,
             json_type_name(tensors[k]));
      }
      const JsonObject to(tensors[k], path, fmt::format("units[{}].tensors[{}]", i, k));
      PackTensor t;
      t.name = require_string(to, "name");
      const std::string tn = one_line(t.name, 120);
      if (!tensor_names.insert(t.name).second) fail("{}: tensor '{}' appears twice", path, tn);
      const Json& shape = require_field(to, "shape", Json::value_t::array, "an array");
      if (shape.empty() || shape.size() > 4)
        fail("{}: tensor '{}' has {} dimensions, expected 1 to 4", path, tn, shape.size());
      int64_t n_elems = 1;
      for (const Json& d : shape) {
        if (!d.is_number_integer() || d.get<int64_t>() < 1 ||
            d.get<int64_t>() > (int64_t{1} << 40)) {
          fail("{}: tensor '{}' has a bad shape {}", path, tn, one_line(shape.dump(), 120));
        }
        t.shape.push_back(d.get<int64_t>());
        if (n_elems > (int64_t{1} << 50) / t.shape.back())
          fail("{}: tensor '{}' shape {} is too large", path, tn, shape_str(t.shape));
        n_elems *= t.shape.back();
      }
      const std::string dt = require_string(to, "dtype");
      auto dtype = dtype_from_name(dt);
      if (!dtype) fail("{}: tensor '{}' has unknown dtype '{}'", path, tn, one_line(dt, 40));
      t.dtype = *dtype;
      t.offset = require_u64(to, "offset");
      t.nbytes = require_u64(to, "nbytes");
      t.checksum = require_checksum(to, "checksum");
      const int64_t row = t.shape.back();
      if (!row_elems_ok(t.dtype, row)) {
        fail("{}: tensor '{}' rows of {} are not a multiple of the {} block", path, tn, row,
             dtype_name(t.dtype));
      }
      const uint64_t want = static_cast<uint64_t>(n_elems / row) * row_bytes(t.dtype, row);
      if (t.nbytes != want) {
        fail("{}: tensor '{}' has {} bytes, but {} {} needs {}", path, tn, t.nbytes,
             dtype_name(t.dtype), shape_str(t.shape), want);
      }
      if (t.offset % kPackTensorAlign != 0) {
        fail("{}: tensor '{}' offset {} is not a multiple of {}", path, tn, t.offset,
             kPackTensorAlign);
      }
      if (t.offset < prev_tensor_end || t.offset > unit_end || t.nbytes > unit_end - t.offset) {
        fail(
            "{}: tensor '{}' [{}, +{}) is outside unit '{}' [{}, {}) or overlaps the tensor before "
            "it",
            path, tn, t.offset, t.nbytes, un, u.offset, unit_end);
      }
      prev_tensor_end = t.offset + t.nbytes;
      u.tensors.push_back(std::move(t));
    }
    if (prev_tensor_end != unit_end) {
      fail("{}: unit '{}' length {} does not end at its last tensor (offset {})", path, un,
           u.length, prev_tensor_end - u.offset);
    }
    m.units.push_back(std::move(u));
  }
  return m;
}

}  // namespace

PackManifest parse_pack_manifest(const Json& j, const std::string& manifest_path,
                                 const std::string& weights_path, uint64_t weights_file_bytes) {
  try {
    return parse_manifest_fields(j, manifest_path, weights_path, weights_file_bytes);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + std::string(kDamaged));
  }
}

// ---- Pack ----

std::string Pack::manifest_path() const {
  return (fs::path(dir_) / kPackManifestName).string();
}
std::string Pack::weights_path() const {
  return (fs::path(dir_) / kPackWeightsName).string();
}

Pack Pack::open(const std::string& dir, const Model* model) {
  Pack p;
  p.dir_ = dir;
  const std::string mpath = p.manifest_path(), wpath = p.weights_path();
  std::error_code ec;
  if (!fs::exists(mpath, ec)) {
    fail("{}: no weight pack here (no {}); build one with strata convert --model MODEL --out {}",
         dir, kPackManifestName, dir);
  }
  const Json j = read_json_file(mpath, "pack manifest");
  const auto wsize = fs::file_size(wpath, ec);
  if (ec)
    fail("{}: cannot read ({}); the pack is incomplete: rebuild it with strata convert", wpath,
         ec.message());
  p.m_ = parse_pack_manifest(j, mpath, wpath, wsize);
  if (model) p.check_against(*model);
  return p;
}

const PackUnit* Pack::find_unit(std::string_view name) const {
  for (const auto& u : m_.units) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

const PackUnit& Pack::layer(int64_t j) const {
  const PackUnit* u = find_unit(fmt::format("blk.{}", j));
  STRATA_ASSERT_MSG(u != nullptr, "pack {} has no layer {}", dir_, j);
  return *u;
}

const PackTensor* Pack::find_tensor(std::string_view name) const {
  for (const auto& u : m_.units) {
    if (const PackTensor* t = u.find(name)) return t;
  }
  return nullptr;
}

void Pack::check_against(const Model& model) const {
  const std::string mpath = manifest_path();
  const ModelDesc& d = model.desc();
  if (m_.config != config_to_json(d.config)) {
    fail(
        "{}: the model config differs from that of {}; the pack was built from another model: "
        "rebuild it",
        mpath, d.path);
  }
  const std::vector<PackLayoutUnit> layout = pack_layout(d);
  if (layout.size() != m_.units.size()) {
    fail("{}: {} units, but {} implies {}; rebuild the pack", mpath, m_.units.size(), d.path,
         layout.size());
  }
  for (size_t i = 0; i < layout.size(); ++i) {
    const PackLayoutUnit& want = layout[i];
    const PackUnit& have = m_.units[i];
    if (have.name != want.name || have.layer != want.layer ||
        have.tensors.size() != want.tensors.size()) {
      fail("{}: unit {} is '{}' with {} tensors, but {} implies '{}' with {}; rebuild the pack",
           mpath, i, one_line(have.name, 80), have.tensors.size(), d.path, want.name,
           want.tensors.size());
    }
    for (size_t k = 0; k < want.tensors.size(); ++k) {
      const TensorInfo& src = *want.tensors[k];
      const PackTensor& t = have.tensors[k];
      if (t.name != src.name) {
        fail("{}: unit '{}' tensor {} is '{}', expected '{}'; rebuild the pack", mpath, have.name,
             k, one_line(t.name, 120), src.name);
      }
      if (t.shape != src.shape) {
        fail("{}: tensor '{}' has shape {} in the pack but {} in {}; rebuild the pack", mpath,
             t.name, shape_str(t.shape), shape_str(src.shape), d.path);
      }
      const DType dt = pack_dtype(src.name, src.shape, src.dtype, m_.options);
      if (t.dtype != dt) {
        fail(
            "{}: tensor '{}' is {} in the pack, but {} with weights '{}' implies {}; rebuild the "
            "pack",
            mpath, t.name, dtype_name(t.dtype), d.path, m_.options.to_string(), dtype_name(dt));
      }
    }
  }
}

void Pack::verify_unit(const PackUnit& unit, std::span<const std::byte> bytes) const {
  STRATA_ASSERT(bytes.size() >= unit.length);
  const uint64_t h = xxh64(bytes.data(), unit.length);
  if (h != unit.checksum) {
    fail("{}: unit '{}' (offset {}, {} bytes) has checksum {} but the manifest says {}{}",
         weights_path(), unit.name, unit.offset, unit.length, checksum_to_string(h),
         checksum_to_string(unit.checksum), kDamaged);
  }
}

std::optional<std::string> Pack::check_tensor(const PackUnit& unit, const PackTensor& t,
                                              const std::byte* data) const {
  const uint64_t h = xxh64(data, t.nbytes);
  if (h == t.checksum) return std::nullopt;
  return fmt::format(
      "tensor '{}' of unit '{}' ({} bytes at offset {}) has checksum {} but the "
      "manifest says {}",
      t.name, unit.name, t.nbytes, t.offset, checksum_to_string(h), checksum_to_string(t.checksum));
}

std::optional<std::string> Pack::check_tensors(const PackUnit& unit, size_t first,
                                               std::span<const std::byte> bytes,
                                               uint64_t bytes_offset) const {
  for (size_t k = first; k < unit.tensors.size(); ++k) {
    const PackTensor& t = unit.tensors[k];
    STRATA_ASSERT(t.offset >= bytes_offset && t.offset - bytes_offset + t.nbytes <= bytes.size());
    if (auto bad = check_tensor(unit, t, bytes.data() + (t.offset - bytes_offset))) return bad;
  }
  return std::nullopt;
}

void Pack::fail_damaged(const std::string& mismatch) const {
  std::error_code ec;
  std::filesystem::rename(manifest_path(), manifest_path() + ".damaged", ec);
  fail("{}: {}; the pack is damaged: {}", weights_path(), mismatch,
       ec ? "rebuild it with strata convert --force"
          : "its manifest was set aside, and the next run builds the pack again");
}

void Pack::verify(DiskIo& engine) const {
  const DiskFile f = DiskFile::open(weights_path(), OpenMode::kRead);
  // Pieces of at most kPiece bytes, two buffers: read the next while hashing this one.
  constexpr uint64_t kPiece = uint64_t{16} << 20;
  struct Piece {
    size_t unit;
    uint64_t offset, len;  // len: bytes to hash
    bool last;             // the unit's last piece
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < m_.units.size(); ++i) {
    const PackUnit& u = m_.units[i];
    for (uint64_t o = 0; o < u.length; o += kPiece) {
      pieces.push_back({i, u.offset + o, std::min(kPiece, u.length - o), o + kPiece >= u.length});
    }
  }
  AlignedBuffer buf[2] = {AlignedBuffer(kPiece), AlignedBuffer(kPiece)};
  Ticket t[2];
  auto issue = [&](size_t k) {
    const Piece& p = pieces[k];
    // Whole pages: weights.bin is padded, so they are inside the file.
    const uint64_t n = std::min<uint64_t>(align_up(p.len, kPackUnitAlign), kPiece);
    t[k % 2] = engine.read(f, p.offset, buf[k % 2].data(), n);
  };
  if (!pieces.empty()) issue(0);
  Xxh64Stream h;
  for (size_t k = 0; k < pieces.size(); ++k) {
    engine.wait(t[k % 2]);
    if (k + 1 < pieces.size()) issue(k + 1);
    const Piece& p = pieces[k];
    h.update(buf[k % 2].data(), p.len);
    if (p.last) {
      const PackUnit& u = m_.units[p.unit];
      const uint64_t got = h.digest();
      h.reset();
      if (got != u.checksum) {
        if (k + 1 < pieces.size()) engine.wait(t[(k + 1) % 2]);
        fail("{}: unit '{}' (offset {}, {} bytes) has checksum {} but the manifest says {}{}",
             weights_path(), u.name, u.offset, u.length, checksum_to_string(got),
             checksum_to_string(u.checksum), kDamaged);
      }
    }
  }
}

void Pack::verify() const {
  DiskIo engine;
  verify(engine);
}

}  // namespace strata
