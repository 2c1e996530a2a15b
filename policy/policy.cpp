// Policy data, checks and YAML; see policy.h.
#include "policy/policy.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/kv_layout.h"
#include "io/atomic_file.h"
#include "policy/yaml_fields.h"

namespace strata {

namespace {


std::optional<DType> compression_dtype(const Compression& c) {
  return quant_dtype(c.bits, c.symmetric, c.group_size);
}

void check_compression(const Compression& c, const std::string& where) {
  if (!c.enabled()) return;
  if (c.bits != 4 && c.bits != 8) fail("{}: {} bits is not a format; use 4 or 8", where, c.bits);
  if (!compression_dtype(c)) {
    fail("{}: there is no {}-bit {} format with groups of {}; use groups of 32, 64 or 128{}", where,
         c.bits, c.symmetric ? "symmetric" : "asymmetric", c.group_size,
         c.symmetric && c.bits == 4 ? " (symmetric 4-bit: 32 only)" : "");
  }
}

Compression read_compression(const yaml_fields::Map& parent, std::string_view key) {
  if (!parent.has(key)) return {};
  const YAML::Node n = parent.node(key);
  if (n.IsScalar())
    return parse_compression(n.Scalar(), parent.source() + ": " + parent.key_path(key));
  if (!n.IsMap()) parent.fail_at(key, "expected none, q4, q8 or {bits: 4, group_size: 64}");
  const yaml_fields::Map m = parent.map(key);
  m.check_keys({"bits", "group_size", "symmetric"});
  Compression c;
  c.bits = static_cast<int>(m.integer("bits", 0));
  c.group_size = static_cast<int>(m.optional_integer("group_size", 1).value_or(64));
  c.symmetric = m.optional_boolean("symmetric").value_or(false);
  check_compression(c, parent.source() + ": " + parent.key_path(key));
  return c;
}

void read_fractions(const yaml_fields::Map& root, std::string_view key, DataKind kind,
                    Placement& placement) {
  const yaml_fields::Map m = root.map(key);
  m.check_keys({"gpu", "cpu", "disk"});
  auto frac = [&](std::string_view k) {
    const double v = m.optional_number(k).value_or(0);
    if (!(v >= 0 && v <= 1)) {
      m.fail_at(k, fmt::format("{} is not a fraction; use a number from 0 to 1", v));
    }
    return v;
  };
  const double gpu = frac("gpu");
  const double cpu = frac("cpu");
  placement.set(kind, gpu, cpu);
  if (gpu + cpu > 1 + kShareSlack) {
    root.fail_at(key, fmt::format("gpu {} + cpu {} is more than 1; the fractions of the tiers add "
                                  "up to 1 (disk holds the rest)",
                                  gpu, cpu));
  }
  if (m.has("disk")) {
    const double disk = frac("disk");
    if (std::fabs(gpu + cpu + disk - 1) > 1e-6) {
      root.fail_at(key, fmt::format("gpu {} + cpu {} + disk {} is not 1", gpu, cpu, disk));
    }
  }
}

void emit_compression(YAML::Emitter& e, const Compression& c) {
  if (!c.enabled()) {
    e << "none";
    return;
  }
  e << YAML::Flow << YAML::BeginMap;
  e << YAML::Key << "bits" << YAML::Value << c.bits;
  e << YAML::Key << "group_size" << YAML::Value << c.group_size;
  e << YAML::Key << "symmetric" << YAML::Value << c.symmetric;
  e << YAML::EndMap;
}

void emit_fractions(YAML::Emitter& e, const char* key, DataKind kind, const Placement& p) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  e << YAML::Key << "gpu" << YAML::Value << fmt::format("{}", p.on(kind, Tier::kGpu));
  e << YAML::Key << "cpu" << YAML::Value << fmt::format("{}", p.on(kind, Tier::kCpu));
  e << YAML::Key << "disk" << YAML::Value << fmt::format("{}", p.disk(kind));
  e << YAML::EndMap;
}

}  // namespace

double Compression::bytes_per_elem(double uncompressed) const {
  if (!enabled()) return uncompressed;
  const std::optional<DType> t = compression_dtype(*this);
  STRATA_ASSERT_MSG(t.has_value(), "unchecked compression {}", to_string());
  const DTypeInfo& info = dtype_info(*t);
  return static_cast<double>(info.block_bytes) / static_cast<double>(info.block_elems);
}

double Compression::kv_bytes_per_elem(double uncompressed) const {
  if (!enabled()) return uncompressed;
  const std::optional<DType> t = compression_dtype(*this);
  STRATA_ASSERT_MSG(t.has_value(), "unchecked compression {}", to_string());
  // A page of the KV cache's 16 tokens and one head of 128 (every group
  // divides it), per element.
  constexpr int64_t kPageTokens = 16, kHeadDim = 128;
  return static_cast<double>(kv_quant_page_bytes(*t, kPageTokens, 1, kHeadDim)) /
         static_cast<double>(kPageTokens * kHeadDim);
}

std::string Compression::to_string() const {
  if (!enabled()) return "none";
  return fmt::format("q{}{} (group {})", bits, symmetric ? "s" : "", group_size);
}

Compression parse_compression(std::string_view text, std::string_view what) {
  const std::string t(text);
  Compression c;
  if (t == "none" || t == "off" || t == "f16") return c;
  auto bad = [&]() {
    fail("{}: '{}' is not a compression; use none, q4, q8, q4:128 or q8s:32 (s = symmetric)", what,
         yaml_fields::printable(text));
  };
  if (t.size() < 2 || t[0] != 'q') bad();
  size_t pos = 1;
  if (t[pos] == '4') {
    c.bits = 4;
  } else if (t[pos] == '8') {
    c.bits = 8;
  } else {
    bad();
  }
  ++pos;
  if (pos < t.size() && t[pos] == 's') {
    c.symmetric = true;
    ++pos;
  }
  // Symmetric 4-bit exists with groups of 32 only.
  c.group_size = c.symmetric && c.bits == 4 ? 32 : 64;
  if (pos < t.size()) {
    if (t[pos] != ':') bad();
    ++pos;
    int g = 0;
    auto [ptr, ec] = std::from_chars(t.data() + pos, t.data() + t.size(), g);
    if (ec != std::errc() || ptr != t.data() + t.size()) bad();
    c.group_size = g;
  }
  check_compression(c, std::string(what));
  return c;
}

void validate_policy(const Policy& p, const std::string& source) {
  if (p.gpu_batch_size < 1)
    fail("{}: gpu_batch_size: must be at least 1 (is {})", source, p.gpu_batch_size);
  if (p.num_gpu_batches < 1) {
    fail("{}: num_gpu_batches: must be at least 1 (is {})", source, p.num_gpu_batches);
  }
  p.placement.validate(source);
  check_compression(p.compress_weight, source + ": compress_weight");
  check_compression(p.compress_kv, source + ": compress_kv");
  if (p.sparse_attention_budget < 0) {
    fail("{}: sparse_attention_budget: must not be negative (is {})", source,
         p.sparse_attention_budget);
  }
}

Policy parse_policy(const std::string& yaml_text, const std::string& source) {
  const yaml_fields::Map root(yaml_fields::parse(yaml_text, source), source, "");
  root.check_keys({"gpu_batch_size", "num_gpu_batches", "weights", "kv_cache", "activations",
                   "cpu_attention", "compress_weight", "compress_kv", "sparse_attention_budget"});
  Policy p;
  p.gpu_batch_size = root.integer("gpu_batch_size", 1);
  p.num_gpu_batches = root.integer("num_gpu_batches", 1);
  read_fractions(root, "weights", DataKind::kWeights, p.placement);
  read_fractions(root, "kv_cache", DataKind::kKv, p.placement);
  read_fractions(root, "activations", DataKind::kAct, p.placement);
  p.cpu_attention = root.optional_boolean("cpu_attention").value_or(false);
  p.compress_weight = read_compression(root, "compress_weight");
  p.compress_kv = read_compression(root, "compress_kv");
  p.sparse_attention_budget = root.optional_integer("sparse_attention_budget", 0).value_or(0);
  validate_policy(p, source);
  return p;
}

Policy load_policy(const std::string& path) {
  return parse_policy(yaml_fields::read_text(path), path);
}

std::string policy_to_yaml(const Policy& p, const std::string& header) {
  std::string out;
  size_t start = 0;
  while (start < header.size()) {
    size_t end = header.find('\n', start);
    if (end == std::string::npos) end = header.size();
    out += "# " + header.substr(start, end - start) + "\n";
    start = end + 1;
  }
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "gpu_batch_size" << YAML::Value << p.gpu_batch_size;
  e << YAML::Key << "num_gpu_batches" << YAML::Value << p.num_gpu_batches;
  emit_fractions(e, "weights", DataKind::kWeights, p.placement);
  emit_fractions(e, "kv_cache", DataKind::kKv, p.placement);
  emit_fractions(e, "activations", DataKind::kAct, p.placement);
  e << YAML::Key << "cpu_attention" << YAML::Value << p.cpu_attention;
  e << YAML::Key << "compress_weight" << YAML::Value;
  emit_compression(e, p.compress_weight);
  e << YAML::Key << "compress_kv" << YAML::Value;
  emit_compression(e, p.compress_kv);
  e << YAML::Key << "sparse_attention_budget" << YAML::Value << p.sparse_attention_budget;
  e << YAML::EndMap;
  out += e.c_str();
  out += "\n";
  return out;
}

void save_policy(const Policy& p, const std::string& path, const std::string& header) {
  const std::string text = policy_to_yaml(p, header);
  write_file_atomically(path, text, "the policy");
}

}  // namespace strata
