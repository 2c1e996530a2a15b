#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "io/json.h"
#include "io/one_line.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// A non-negative integer of a JSON array, as safetensors writes sizes.
bool json_size(const Json& v, uint64_t& out) {
  if (!v.is_number_unsigned()) return false;
  out = v.get<uint64_t>();
  return true;
}

}  // namespace

int64_t SafetensorsTensor::n_elems() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated not to overflow at parse time
  return n;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

SafetensorsFile::SafetensorsFile(std::string path) : file_(std::move(path)) {
  try {
    parse();
  } catch (const Error& e) {
    // Names in the header are arbitrary bytes: keep the message on one line.
    throw Error(one_line(e.what()));
  }
}

void SafetensorsFile::parse() {
  const std::string& p = file_.path();
  if (file_.size() < 8) {
    fail("{}: not a safetensors file: {} bytes, too short for the 8-byte header length", p,
         file_.size());
  }
  uint64_t n_header = 0;
  std::memcpy(&n_header, file_.data(), 8);
  if (n_header > file_.size() - 8) {
    fail("{}: safetensors header length {} runs past the end of the file ({} bytes); the file is "
         "truncated or not safetensors",
         p, n_header, file_.size());
  }
  if (n_header > kMaxHeaderBytes) {
    fail("{}: safetensors header length {} is above the limit of {} bytes; the file is corrupt", p,
         n_header, kMaxHeaderBytes);
  }
  data_offset_ = 8 + n_header;
  const uint64_t data_size = file_.size() - data_offset_;
  const Json header = parse_json(
      p, {reinterpret_cast<const char*>(file_.data() + 8), n_header}, "safetensors header");
  if (!header.is_object()) {
    fail("{}: safetensors header is {}, expected a JSON object", p, json_type_name(header));
  }

  tensors_.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object()) {
      fail("{}: tensor '{}' is described by {}, expected an object", p, name, json_type_name(entry));
    }
    auto dt_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto off_it = entry.find("data_offsets");
    if (dt_it == entry.end() || !dt_it->is_string()) {
      fail("{}: tensor '{}' has no dtype string", p, name);
    }
    if (shape_it == entry.end() || !shape_it->is_array()) {
      fail("{}: tensor '{}' has no shape array", p, name);
    }
    if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2) {
      fail("{}: tensor '{}' has no data_offsets pair [begin, end]", p, name);
    }
    const std::string dt_name = dt_it->get<std::string>();
    const auto dt = dtype_from_safetensors(dt_name);
    if (!dt) {
      fail("{}: tensor '{}' has dtype {}, which Strata does not read (supported: F32, F16, BF16)",
           p, name, dt_name);
    }

    SafetensorsTensor t;
    t.name = name;
    t.dtype = *dt;
    uint64_t n_elems = 1;
    for (const Json& d : *shape_it) {
      uint64_t dim = 0;
      if (!json_size(d, dim)) {
        fail("{}: tensor '{}' has a shape entry {} that is not a non-negative integer", p, name,
             d.dump());
      }
      if (dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(n_elems, dim, &n_elems) ||
          n_elems > static_cast<uint64_t>(INT64_MAX)) {
        fail("{}: tensor '{}' shape {} has more elements than can be addressed", p, name,
             shape_it->dump());
      }
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t nbytes = 0;
    const auto elem_bytes = static_cast<uint64_t>(dtype_info(t.dtype).block_bytes);
    if (__builtin_mul_overflow(n_elems, elem_bytes, &nbytes)) {
      fail("{}: tensor '{}' shape {} of {} is too large", p, name, shape_str(t.shape), dt_name);
    }
    uint64_t begin = 0, end = 0;
    if (!json_size((*off_it)[0], begin) || !json_size((*off_it)[1], end)) {
      fail("{}: tensor '{}' data_offsets {} are not non-negative integers", p, name,
           off_it->dump());
    }
    if (begin > end) {
      fail("{}: tensor '{}' data_offsets [{}, {}] are reversed (begin > end)", p, name, begin, end);
    }
    if (end > data_size) {
      fail("{}: tensor '{}' data [{}, {}) lies past the end of the data section ({} bytes); the "
           "file is truncated or corrupt",
           p, name, begin, end, data_size);
    }
    if (end - begin != nbytes) {
      fail("{}: tensor '{}' of shape {} and dtype {} needs {} bytes but data_offsets [{}, {}] hold "
           "{}",
           p, name, shape_str(t.shape), dt_name, nbytes, begin, end, end - begin);
    }
    t.offset = data_offset_ + begin;
    t.nbytes = nbytes;
    tensors_.push_back(std::move(t));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  // Empty tensors hold no bytes and cannot overlap anything.
  const SafetensorsTensor* prev = nullptr;
  for (const auto& t : tensors_) {
    if (t.nbytes == 0) continue;
    if (prev && prev->offset + prev->nbytes > t.offset) {
      fail("{}: tensors '{}' and '{}' overlap in the file", p, prev->name, t.name);
    }
    prev = &t;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- SafetensorsSet ----

SafetensorsSet SafetensorsSet::open_file(const std::string& path) {
  SafetensorsSet set;
  set.shards_.push_back(std::make_unique<SafetensorsFile>(path));
  for (const auto& t : set.shards_[0]->tensors()) set.entries_.emplace(t.name, Entry{&t, 0});
  return set;
}

SafetensorsSet SafetensorsSet::open_index(const std::string& index_path) {
  const Json index = read_json_file(index_path, "safetensors index");
  if (!index.is_object()) fail("{}: the index is {}, expected a JSON object", index_path, json_type_name(index));
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    fail("{}: the index has no 'weight_map' object", index_path);
  }
  if (wm->empty()) fail("{}: the index's weight_map lists no tensors", index_path);
  const fs::path dir = fs::path(index_path).parent_path();

  // Shards in name order, each opened once.
  std::map<std::string, int> shard_of_file;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string()) {
      fail("{}: weight_map entry for tensor '{}' is {}, expected a file name", index_path,
           one_line(name, 200), json_type_name(file));
    }
    const std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos ||
        f.find('\\') != std::string::npos) {
      fail("{}: weight_map names the shard '{}', expected a file name in the same folder",
           index_path, one_line(f, 200));
    }
    shard_of_file.emplace(f, 0);
  }
  SafetensorsSet set;
  for (auto& [f, idx] : shard_of_file) {
    idx = static_cast<int>(set.shards_.size());
    set.shards_.push_back(std::make_unique<SafetensorsFile>((dir / f).string()));
  }
  for (const auto& [name, file] : wm->items()) {
    const int shard = shard_of_file.at(file.get<std::string>());
    const SafetensorsTensor* t = set.shards_[shard]->find(name);
    if (!t) {
      fail("{}: tensor '{}' is listed in the index for {} but that file does not hold it; the "
           "model files are incomplete or from different versions",
           index_path, one_line(name, 200), set.shards_[shard]->path());
    }
    set.entries_.emplace(name, Entry{t, shard});
  }
  for (size_t s = 0; s < set.shards_.size(); ++s) {
    for (const auto& t : set.shards_[s]->tensors()) {
      auto it = set.entries_.find(t.name);
      if (it == set.entries_.end() || it->second.shard != static_cast<int>(s)) {
        spdlog::debug("{}: tensor '{}' is not in the index for this file; ignoring it",
                      set.shards_[s]->path(), one_line(t.name, 200));
      }
    }
  }
  return set;
}

SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  const fs::path d(dir);
  const fs::path index = d / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::is_regular_file(index, ec)) return open_index(index.string());
  std::vector<std::string> files;
  for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors" && it->is_regular_file(ec)) {
      files.push_back(it->path().string());
    }
  }
  if (ec) fail("{}: cannot list the directory: {}", dir, ec.message());
  if (files.empty()) {
    if (fs::exists(d / "pytorch_model.bin", ec) || fs::exists(d / "pytorch_model.bin.index.json", ec)) {
      fail("{}: the weights are in PyTorch .bin files, which Strata does not read; save the model "
           "with safetensors (save_pretrained(..., safe_serialization=True))",
           dir);
    }
    fail("{}: no weights: expected model.safetensors or model.safetensors.index.json", dir);
  }
  if (files.size() > 1) {
    fail("{}: {} .safetensors files but no model.safetensors.index.json to say which tensors each "
         "holds",
         dir, files.size());
  }
  return open_file(files[0]);
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

const SafetensorsSet::Entry* SafetensorsSet::find(std::string_view name) const {
  auto it = entries_.find(std::string(name));
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace strata
