// Hardware profiles: YAML load/save and checks; see hardware.h.
#include "policy/hardware.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "core/units.h"
#include "policy/presets.h"
#include "policy/yaml_fields.h"

namespace strata {

namespace {

constexpr double kTera = 1e12;

using yaml_fields::Map;

void require_positive(double v, const std::string& source, const char* key, const char* what) {
  if (!(v > 0) || !std::isfinite(v)) {
    fail(
        "{}: {}: must be a positive {} (is {}); set it in the profile or measure it with "
        "`strata profile`",
        source, key, what, v);
  }
}

void require_non_negative(double v, const std::string& source, const char* key) {
  if (!(v >= 0) || !std::isfinite(v)) fail("{}: {}: must not be negative (is {})", source, key, v);
}

// A byte size or rate in the shortest form that reads back to the same
// value: "12.89G" when the value is a whole number of bytes that a unit form
// reproduces, else a plain number.
std::string size_text(double bytes) {
  std::string best = fmt::format("{}", bytes);
  for (int digits = 1; digits <= 17; ++digits) {
    const std::string sci = fmt::format("{:.{}g}", bytes, digits);
    if (std::strtod(sci.c_str(), nullptr) == bytes) {
      if (sci.size() < best.size()) best = sci;
      break;
    }
  }
  if (bytes == std::floor(bytes) && bytes < 1.8e19) {
    static const std::pair<const char*, double> kUnits[] = {
        {"T", 1099511627776.0}, {"G", 1073741824.0}, {"M", 1048576.0}, {"K", 1024.0}};
    for (const auto& [unit, scale] : kUnits) {
      for (int decimals = 0; decimals <= 12; ++decimals) {
        std::string num = fmt::format("{:.{}f}", bytes / scale, decimals);
        if (num.find('.') != std::string::npos) {
          while (num.back() == '0') num.pop_back();
          if (num.back() == '.') num.pop_back();
        }
        const std::string text = num + unit;
        if (static_cast<double>(parse_bytes(text)) == bytes) {
          if (text.size() < best.size()) best = text;
          break;
        }
      }
    }
  }
  return best;
}

}  // namespace

namespace {

// A rate by request size (sizes increasing), interpolated in the logarithm
// of the size, its end values beyond its ends; `fallback` when empty.
double rate_by_size(const std::vector<std::pair<double, double>>& table, double request_bytes,
                    double fallback) {
  if (table.empty()) return fallback;
  if (request_bytes <= table.front().first) return table.front().second;
  if (request_bytes >= table.back().first) return table.back().second;
  size_t i = 0;
  while (table[i + 1].first < request_bytes) ++i;
  const auto [x0, y0] = table[i];
  const auto [x1, y1] = table[i + 1];
  const double t = std::log(request_bytes / x0) / std::log(x1 / x0);
  return y0 + t * (y1 - y0);
}

}  // namespace

double HardwareProfile::kv_read_rate(double request_bytes, double batch) const {
  const double rate = rate_by_size(disk_to_cpu_kv, request_bytes, disk_to_cpu);
  if (batch <= 0 || disk_to_cpu_kv_batches.empty()) return rate;
  const double at_size = rate_by_size(disk_to_cpu_kv, kKvBatchRequestBytes, disk_to_cpu);
  return rate * rate_by_size(disk_to_cpu_kv_batches, batch, at_size) / at_size;
}

double HardwareProfile::weight_read_rate(double request_bytes) const {
  return rate_by_size(disk_to_cpu_weights, request_bytes, disk_to_cpu);
}

double HardwareProfile::disk_share_beside_compute(double request_bytes) const {
  if (disk_to_cpu_beside_compute.empty()) return 1;
  return std::min(1.0, rate_by_size(disk_to_cpu_beside_compute, request_bytes, disk_to_cpu) /
                           weight_read_rate(request_bytes));
}

double HardwareProfile::cpu_attention_rate(int64_t gpu_batch_size, int64_t hidden) const {
  const double lb =
      std::max(0.0, std::log2(64.0 / static_cast<double>(std::max<int64_t>(1, gpu_batch_size))));
  const double lh =
      std::max(0.0, std::log2(4096.0 / static_cast<double>(std::max<int64_t>(1, hidden))));
  const auto& c = cpu_attention_fit;
  const double factor = std::max(0.1, 1 + c[0] * lb * lh - c[1] * lb - c[2] * lh);
  return cpu_attention_flops * factor;
}

void validate_hardware_profile(const HardwareProfile& hw, const std::string& source) {
  if (hw.name.empty()) fail("{}: name: missing; every profile has a name", source);
  require_non_negative(hw.gpu_mem, source, "memory.gpu");
  require_non_negative(hw.cpu_mem, source, "memory.cpu");
  require_non_negative(hw.disk_mem, source, "memory.disk");
  require_positive(hw.disk_to_cpu, source, "links.disk_to_cpu", "rate in bytes per second");
  require_positive(hw.cpu_to_disk, source, "links.cpu_to_disk", "rate in bytes per second");
  require_positive(hw.cpu_to_disk_kv, source, "links.cpu_to_disk_kv", "rate in bytes per second");
  for (const auto& [table, name] :
       {std::pair{&hw.disk_to_cpu_kv, "links.disk_to_cpu_kv"},
        std::pair{&hw.disk_to_cpu_kv_batches, "links.disk_to_cpu_kv_batches"},
        std::pair{&hw.disk_to_cpu_weights, "links.disk_to_cpu_weights"},
        std::pair{&hw.disk_to_cpu_beside_compute, "links.disk_to_cpu_beside_compute"}}) {
    const bool batches = table == &hw.disk_to_cpu_kv_batches;
    for (size_t i = 0; i < table->size(); ++i) {
      const auto& [size, rate] = (*table)[i];
      if (!(size > 0) || (i > 0 && !(size > (*table)[i - 1].first))) {
        fail("{}: {}: {} must be positive and different", source, name,
             batches ? "batch sizes" : "request sizes");
      }
      require_positive(rate, source, name, "rate in bytes per second");
    }
  }
  if (hw.device == DeviceKind::kGpu) {
    require_positive(hw.cpu_to_gpu, source, "links.cpu_to_gpu", "rate in bytes per second");
    require_positive(hw.gpu_to_cpu, source, "links.gpu_to_cpu", "rate in bytes per second");
    require_positive(hw.gpu_to_cpu_kv, source, "links.gpu_to_cpu_kv", "rate in bytes per second");
  }
  require_positive(hw.gemm_prefill_flops, source, "device_compute.gemm_prefill_tflops", "rate");
  require_positive(hw.gemm_decode_flops, source, "device_compute.gemm_decode_tflops", "rate");
  require_positive(hw.attention_prefill_flops, source, "device_compute.attention_prefill_tflops",
                   "rate");
  require_positive(hw.attention_decode_flops, source, "device_compute.attention_decode_tflops",
                   "rate");
  require_non_negative(hw.device_mem_bandwidth, source, "device_compute.mem_bandwidth");
  require_non_negative(hw.cpu_gemm_flops, source, "cpu_compute.gemm_tflops");
  require_positive(hw.cpu_attention_flops, source, "cpu_compute.attention_tflops", "rate");
  require_non_negative(hw.cpu_mem_bandwidth, source, "cpu_compute.mem_bandwidth");
  for (double c : hw.cpu_attention_fit) {
    if (!std::isfinite(c)) fail("{}: cpu_compute.attention_fit: values must be finite", source);
  }
}

HardwareProfile parse_hardware_profile(const std::string& yaml_text, const std::string& source) {
  const Map root(yaml_fields::parse(yaml_text, source), source, "");
  root.check_keys({"name", "aliases", "description", "device", "memory", "links", "device_compute",
                   "cpu_compute"});
  HardwareProfile hw;
  hw.name = root.string("name");
  if (root.has("aliases")) {
    const YAML::Node aliases = root.node("aliases");
    if (!aliases.IsSequence()) root.fail_at("aliases", "expected a list of names, e.g. [t4]");
    for (const auto& a : aliases) {
      if (!a.IsScalar()) root.fail_at("aliases", "expected a list of names, e.g. [t4]");
      hw.aliases.push_back(a.Scalar());
    }
  }
  hw.description = root.optional_string("description").value_or("");
  const std::string device = root.optional_string("device").value_or("gpu");
  if (device == "gpu") {
    hw.device = DeviceKind::kGpu;
  } else if (device == "cpu") {
    hw.device = DeviceKind::kCpu;
  } else {
    root.fail_at("device", "'" + device + "' is not a compute device; use gpu or cpu");
  }

  const Map memory = root.map("memory");
  memory.check_keys({"gpu", "cpu", "disk"});
  hw.gpu_mem = hw.device == DeviceKind::kGpu ? memory.bytes("gpu")
                                             : memory.optional_bytes("gpu").value_or(0);
  hw.cpu_mem = memory.bytes("cpu");
  hw.disk_mem = memory.optional_bytes("disk").value_or(0);

  const Map links = root.map("links");
  links.check_keys({"disk_to_cpu", "cpu_to_disk", "cpu_to_gpu", "gpu_to_cpu", "gpu_to_cpu_kv",
                    "cpu_to_disk_kv", "disk_to_cpu_kv", "disk_to_cpu_kv_batches",
                    "disk_to_cpu_weights", "disk_to_cpu_beside_compute"});
  hw.disk_to_cpu = links.bytes("disk_to_cpu");
  hw.cpu_to_disk = links.bytes("cpu_to_disk");
  if (hw.device == DeviceKind::kGpu) {
    hw.cpu_to_gpu = links.bytes("cpu_to_gpu");
    hw.gpu_to_cpu = links.bytes("gpu_to_cpu");
  } else {
    hw.cpu_to_gpu = links.optional_bytes("cpu_to_gpu").value_or(0);
    hw.gpu_to_cpu = links.optional_bytes("gpu_to_cpu").value_or(0);
  }
  hw.gpu_to_cpu_kv = links.optional_bytes("gpu_to_cpu_kv").value_or(hw.gpu_to_cpu);
  hw.cpu_to_disk_kv = links.optional_bytes("cpu_to_disk_kv").value_or(hw.cpu_to_disk);
  for (const auto& [table, key] :
       {std::pair{&hw.disk_to_cpu_kv, "disk_to_cpu_kv"},
        std::pair{&hw.disk_to_cpu_weights, "disk_to_cpu_weights"},
        std::pair{&hw.disk_to_cpu_beside_compute, "disk_to_cpu_beside_compute"}}) {
    const auto by_size = links.optional_map(key);
    if (!by_size) continue;
    for (const auto& item : links.node(key)) {
      const std::string size_key = item.first.IsScalar() ? item.first.Scalar() : std::string();
      double size = 0;
      try {
        size = static_cast<double>(parse_bytes(size_key));
      } catch (const Error&) {
        links.fail_at(
            key, "'" + yaml_fields::printable(size_key) + "' is not a request size such as 16K");
      }
      table->emplace_back(size, by_size->bytes(size_key));
    }
    std::sort(table->begin(), table->end());
  }
  if (const auto by_batch = links.optional_map("disk_to_cpu_kv_batches")) {
    for (const auto& item : links.node("disk_to_cpu_kv_batches")) {
      const std::string n_key = item.first.IsScalar() ? item.first.Scalar() : std::string();
      int64_t n = 0;
      try {
        size_t used = 0;
        n = std::stoll(n_key, &used);
        if (used != n_key.size() || n < 1) n = 0;
      } catch (const std::exception&) {
        n = 0;
      }
      if (n == 0) {
        links.fail_at("disk_to_cpu_kv_batches", "'" + yaml_fields::printable(n_key) +
                                                    "' is not a number of requests such as 4");
      }
      hw.disk_to_cpu_kv_batches.emplace_back(static_cast<double>(n), by_batch->bytes(n_key));
    }
    std::sort(hw.disk_to_cpu_kv_batches.begin(), hw.disk_to_cpu_kv_batches.end());
  }

  const Map cpu = root.map("cpu_compute");
  cpu.check_keys({"gemm_tflops", "attention_tflops", "mem_bandwidth", "attention_fit"});
  hw.cpu_gemm_flops = hw.device == DeviceKind::kCpu
                          ? cpu.number("gemm_tflops") * kTera
                          : cpu.optional_number("gemm_tflops").value_or(0) * kTera;
  hw.cpu_attention_flops = cpu.number("attention_tflops") * kTera;
  hw.cpu_mem_bandwidth = cpu.optional_bytes("mem_bandwidth").value_or(0);
  if (cpu.has("attention_fit")) {
    const YAML::Node fit = cpu.node("attention_fit");
    if (!fit.IsSequence() || fit.size() != 3) {
      cpu.fail_at("attention_fit", "expected a list of three numbers [c1, c2, c3]");
    }
    for (size_t i = 0; i < 3; ++i) {
      const std::string text = fit[i].IsScalar() ? fit[i].Scalar() : std::string();
      try {
        size_t used = 0;
        hw.cpu_attention_fit[i] = std::stod(text, &used);
        if (used != text.size()) throw std::invalid_argument(text);
      } catch (const std::exception&) {
        cpu.fail_at("attention_fit", "'" + yaml_fields::scalar_text(fit[i]) + "' is not a number");
      }
    }
  }

  if (auto dev = root.optional_map("device_compute")) {
    dev->check_keys({"gemm_prefill_tflops", "gemm_decode_tflops", "attention_prefill_tflops",
                     "attention_decode_tflops", "mem_bandwidth"});
    hw.gemm_prefill_flops = dev->number("gemm_prefill_tflops") * kTera;
    hw.gemm_decode_flops = dev->number("gemm_decode_tflops") * kTera;
    hw.attention_prefill_flops = dev->number("attention_prefill_tflops") * kTera;
    hw.attention_decode_flops = dev->number("attention_decode_tflops") * kTera;
    hw.device_mem_bandwidth = dev->optional_bytes("mem_bandwidth").value_or(0);
  } else if (hw.device == DeviceKind::kCpu) {
    hw.gemm_prefill_flops = hw.cpu_gemm_flops;
    hw.gemm_decode_flops = hw.cpu_gemm_flops;
    hw.attention_prefill_flops = hw.cpu_attention_flops;
    hw.attention_decode_flops = hw.cpu_attention_flops;
    hw.device_mem_bandwidth = hw.cpu_mem_bandwidth;
  } else {
    root.fail_at("device_compute",
                 "missing; a GPU profile needs the device's GEMM and attention rates");
  }
  validate_hardware_profile(hw, source);
  return hw;
}

HardwareProfile load_hardware_profile(const std::string& path) {
  return parse_hardware_profile(yaml_fields::read_text(path), path);
}

std::vector<std::string> hardware_preset_names() {
  std::vector<std::string> names;
  for (const EmbeddedPreset& p : presets_in("hardware")) {
    names.push_back(
        parse_hardware_profile(std::string(p.text), "preset " + std::string(p.path)).name);
  }
  return names;
}

HardwareProfile find_hardware_profile(const std::string& arg) {
  if (looks_like_path(arg)) return load_hardware_profile(arg);
  const std::string want = normalize_preset_name(arg);
  for (const EmbeddedPreset& p : presets_in("hardware")) {
    HardwareProfile hw =
        parse_hardware_profile(std::string(p.text), "preset " + std::string(p.path));
    bool match = normalize_preset_name(hw.name) == want;
    for (const std::string& a : hw.aliases) match = match || normalize_preset_name(a) == want;
    if (match) return hw;
  }
  fail("--hardware: '{}' is neither a hardware preset nor a YAML file; presets: {}",
       yaml_fields::printable(arg), fmt::join(hardware_preset_names(), ", "));
}

std::string hardware_profile_to_yaml(const HardwareProfile& hw) {
  auto tflops = [](double flops) { return fmt::format("{}", flops / kTera); };
  std::string out;
  out += fmt::format(
      "# Strata hardware profile (schema: policy/hardware.h). Sizes and rates in\n"
      "# bytes (per second), K/M/G/T = 2^10/2^20/2^30/2^40; TFLOP/s = 10^12.\n");
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << hw.name;
  if (!hw.aliases.empty()) e << YAML::Key << "aliases" << YAML::Value << YAML::Flow << hw.aliases;
  if (!hw.description.empty()) e << YAML::Key << "description" << YAML::Value << hw.description;
  e << YAML::Key << "device" << YAML::Value << (hw.device == DeviceKind::kGpu ? "gpu" : "cpu");
  e << YAML::Key << "memory" << YAML::Value << YAML::BeginMap;
  if (hw.device == DeviceKind::kGpu)
    e << YAML::Key << "gpu" << YAML::Value << size_text(hw.gpu_mem);
  e << YAML::Key << "cpu" << YAML::Value << size_text(hw.cpu_mem);
  e << YAML::Key << "disk" << YAML::Value << size_text(hw.disk_mem);
  e << YAML::EndMap;
  e << YAML::Key << "links" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "disk_to_cpu" << YAML::Value << size_text(hw.disk_to_cpu);
  e << YAML::Key << "cpu_to_disk" << YAML::Value << size_text(hw.cpu_to_disk);
  if (hw.device == DeviceKind::kGpu) {
    e << YAML::Key << "cpu_to_gpu" << YAML::Value << size_text(hw.cpu_to_gpu);
    e << YAML::Key << "gpu_to_cpu" << YAML::Value << size_text(hw.gpu_to_cpu);
    e << YAML::Key << "gpu_to_cpu_kv" << YAML::Value << size_text(hw.gpu_to_cpu_kv);
  }
  e << YAML::Key << "cpu_to_disk_kv" << YAML::Value << size_text(hw.cpu_to_disk_kv);
  for (const auto& [table, key] :
       {std::pair{&hw.disk_to_cpu_kv, "disk_to_cpu_kv"},
        std::pair{&hw.disk_to_cpu_weights, "disk_to_cpu_weights"},
        std::pair{&hw.disk_to_cpu_beside_compute, "disk_to_cpu_beside_compute"}}) {
    if (table->empty()) continue;
    e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [size, rate] : *table) {
      e << YAML::Key << size_text(size) << YAML::Value << size_text(rate);
    }
    e << YAML::EndMap;
  }
  if (!hw.disk_to_cpu_kv_batches.empty()) {
    e << YAML::Key << "disk_to_cpu_kv_batches" << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [n, rate] : hw.disk_to_cpu_kv_batches) {
      e << YAML::Key << fmt::format("{}", static_cast<int64_t>(n)) << YAML::Value
        << size_text(rate);
    }
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  e << YAML::Key << "device_compute" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "gemm_prefill_tflops" << YAML::Value << tflops(hw.gemm_prefill_flops);
  e << YAML::Key << "gemm_decode_tflops" << YAML::Value << tflops(hw.gemm_decode_flops);
  e << YAML::Key << "attention_prefill_tflops" << YAML::Value << tflops(hw.attention_prefill_flops);
  e << YAML::Key << "attention_decode_tflops" << YAML::Value << tflops(hw.attention_decode_flops);
  if (hw.device_mem_bandwidth > 0) {
    e << YAML::Key << "mem_bandwidth" << YAML::Value << size_text(hw.device_mem_bandwidth);
  }
  e << YAML::EndMap;
  e << YAML::Key << "cpu_compute" << YAML::Value << YAML::BeginMap;
  if (hw.cpu_gemm_flops > 0)
    e << YAML::Key << "gemm_tflops" << YAML::Value << tflops(hw.cpu_gemm_flops);
  e << YAML::Key << "attention_tflops" << YAML::Value << tflops(hw.cpu_attention_flops);
  if (hw.cpu_mem_bandwidth > 0) {
    e << YAML::Key << "mem_bandwidth" << YAML::Value << size_text(hw.cpu_mem_bandwidth);
  }
  if (hw.cpu_attention_fit != std::array<double, 3>{0, 0, 0}) {
    e << YAML::Key << "attention_fit" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (double c : hw.cpu_attention_fit) e << fmt::format("{}", c);
    e << YAML::EndSeq;
  }
  e << YAML::EndMap;
  e << YAML::EndMap;
  out += e.c_str();
  out += "\n";
  return out;
}

}  // namespace strata
