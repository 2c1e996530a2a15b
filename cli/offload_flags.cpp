// The placement flags of generate and bench (offload_flags.h): policy from
// flags, a file or the search; budgets; this machine's cached profile.
#include "cli/offload_flags.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "generate/output_file.h"
#include "model/model.h"
#include "generate/driver.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cuda/cuda_device.h"
#include "offload/device.h"
#include "offload/offload_engine.h"
#include "offload/measure.h"
#include "offload/tier_budgets.h"
#include "offload/trace.h"
#include "policy/cost_model.h"
#include "policy/report_json.h"
#include "policy/search.h"

namespace strata::cli {

namespace fs = std::filesystem;

namespace {

// The share of the RAM budget the search may plan with: the engine keeps
// activations and its working memory in f32 where the cost model counts
// f16, and holds the logits of a block.
constexpr double kSearchRamShare = 0.9;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Where profiles of this machine are cached: $XDG_CACHE_HOME/strata or
// ~/.cache/strata, else the offload directory.
std::string cache_dir(const std::string& offload_dir) {
  std::vector<fs::path> candidates;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) candidates.push_back(fs::path(x) / "strata");
  if (const char* h = std::getenv("HOME"); h && *h) candidates.push_back(fs::path(h) / ".cache" / "strata");
  candidates.push_back(fs::path(offload_dir));
  for (const fs::path& c : candidates) {
    std::error_code ec;
    fs::create_directories(c, ec);
    if (!ec && ::access(c.c_str(), W_OK) == 0) return c.string();
  }
  return offload_dir;
}

// The key of this machine and disk: host name, CPU, RAM, and the
// filesystem of the offload directory.
std::string machine_key(const std::string& offload_dir) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  struct stat st {};
  ::stat(offload_dir.c_str(), &st);
  const std::string id = fmt::format("{}|{}|{}|{}", host, cpu_model_name(), total_ram_bytes(),
                                     static_cast<uint64_t>(st.st_dev));
  return fmt::format("{:016x}", fnv1a(id));
}

// Runs `strata profile --quick --disk-bytes 1G` (this executable) into
// `path`: quick compute measurements, but a disk file large enough for reads
// in the pattern of weight loads (64M requests) to reach their steady rate.
void measure_profile(const std::string& offload_dir, const std::string& path) {
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) fail("--policy auto: cannot find the strata executable to measure this machine; pass --hardware FILE");
  std::vector<std::string> args = {exe,     "--log-level",   "warn",      "profile",
                                   "--quick", "--disk-bytes",  "1G",        "--offload-dir",
                                   offload_dir, "-o",          path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) fail("--policy auto: cannot start `strata profile`; pass --hardware FILE");
  if (pid == 0) {
    ::execv(exe, argv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fail("--policy auto: measuring this machine (`strata profile --quick --disk-bytes 1G --offload-dir {}`) "
         "failed; run it yourself to see why, or pass --hardware FILE",
         offload_dir);
  }
}

// This machine's profile: cached, or measured once and cached.
HardwareProfile this_machine(const std::string& offload_dir) {
  std::error_code ec;
  fs::create_directories(offload_dir, ec);
  if (ec) {
    fail("--offload-dir {}: cannot create the directory: {}; choose a directory you can write to",
         offload_dir, ec.message());
  }
  const std::string path =
      (fs::path(cache_dir(offload_dir)) / ("hardware-" + machine_key(offload_dir) + ".yaml")).string();
  if (fs::exists(path)) {
    try {
      HardwareProfile hw = load_hardware_profile(path);
      spdlog::info("policy auto: this machine's profile from {}", path);
      return hw;
    } catch (const Error& e) {
      spdlog::warn("policy auto: the cached profile {} is not usable ({}); measuring again", path,
                   e.what());
    }
  }
  spdlog::info(
      "policy auto: measuring this machine once (strata profile --quick --disk-bytes 1G, disk in {}); cached in {}",
      offload_dir, path);
  measure_profile(offload_dir, path);
  return load_hardware_profile(path);
}

Compression compression_of(const std::optional<DType>& t) {
  Compression c;
  if (!t || !is_quantized(*t)) return c;
  const DTypeInfo& info = dtype_info(*t);
  c.bits = info.bits;
  c.group_size = info.block_elems;
  c.symmetric = info.symmetric;
  return c;
}

std::optional<DType> dtype_of(const Compression& c, const char* what) {
  if (!c.enabled()) return std::nullopt;
  const std::optional<DType> t = quant_dtype(c.bits, c.symmetric, c.group_size);
  if (!t) fail("{} {}: Strata has no such format", what, c.to_string());
  return t;
}

}  // namespace

ModelShape model_shape_of(const Model& model) {
  const ModelDesc& d = model.desc();
  const ModelConfig& c = d.config;
  ModelShape s;
  s.name = d.path;
  s.source = d.path;
  s.n_layer = c.n_layer;
  s.hidden = c.n_embd;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head > 0 ? c.n_kv_head : c.n_head;
  s.head_dim = c.head_dim > 0 ? c.head_dim : (c.n_head > 0 ? c.n_embd / c.n_head : 0);
  s.n_ff = c.n_ff;
  s.vocab = c.n_vocab;
  s.max_context = c.n_ctx;
  s.gated_ffn = c.gated_ffn;
  s.tied_embeddings = c.tie_embeddings;
  s.weight_dtype = c.source_dtype;
  double bytes = 0, elems = 0;
  for (const TensorInfo& t : d.tensors) {
    bytes += static_cast<double>(t.nbytes);
    elems += static_cast<double>(t.n_elems());
  }
  s.weight_bytes = elems > 0 ? bytes / elems : 2.0;
  validate_model_shape(s, d.path);
  return s;
}

std::string describe_device(const std::string& device, int threads) {
  const int index = parse_device_name(device);
  if (index < 0) return describe_cpu(threads);
  return fmt::format("cuda:{} {}; host {}", index, cuda_device_description(index),
                     describe_cpu(threads));
}

DType OffloadFlags::compute_dtype(const std::string& requested) const {
  const bool gpu = parse_device_name(device) >= 0;
  return choose_compute_dtype(requested.empty() && gpu ? "f32" : requested,
                              cpu::cpu_features().avx512_bf16);
}

void OffloadFlags::add(CLI::App& sub, bool with_batch_flags) {
  sub.add_option("--device", device,
                 "Compute device: cpu, or cuda / cuda:N (GPU N; weights, KV cache and activations "
                 "on the gpu tier unless --percent or --policy says otherwise)")
      ->capture_default_str();
  sub.add_option("--policy", policy,
                 "Placement and batch sizes: a policy YAML (see `strata policy -o`), or auto: "
                 "the cost-model search for this machine and these budgets");
  sub.add_option("--percent", percent,
                 "Placement: W_GPU W_CPU KV_GPU KV_CPU ACT_GPU ACT_CPU percentages of weights, "
                 "KV cache and activations on gpu and cpu, disk the rest (on the CPU device gpu "
                 "and cpu are both RAM)")
      ->expected(6);
  if (with_batch_flags) {
    sub.add_option("--gpu-batch-size", gpu_batch_size, "Sequences per micro-batch");
    sub.add_option("--num-gpu-batches", num_gpu_batches, "Micro-batches per block");
  }
  sub.add_flag("--cpu-attention", cpu_attention,
               "Attention on the CPU over a KV cache in RAM (and on disk), between the GPU's "
               "projections (a GPU device, with KV_GPU 0; on the CPU device attention always runs "
               "where the KV is)");
  sub.add_option("--hardware", hardware,
                 "Hardware profile for --policy auto and the predicted throughput: a preset or "
                 "YAML (default: this machine, measured once and cached)");
  sub.add_option("--gpu-mem", gpu_mem, "GPU memory budget, e.g. 15G (default on a GPU: its free memory less 5% of the "
                 "total, at least 512M; on the CPU device: added to RAM)");
  sub.add_option("--cpu-mem", cpu_mem, "RAM budget, e.g. 200G (default: the RAM available)");
  sub.add_option("--disk-mem", disk_mem,
                 "Disk budget in --offload-dir, e.g. 1.5T (default: its free space)");
  sub.add_option("--offload-dir", offload_dir,
                 "Directory of the disk tier: the weight pack (built once, reused while the model "
                 "is unchanged) and KV pages on disk")
      ->capture_default_str();
  sub.add_option("--trace", trace_path,
                 "Write a Chrome/Perfetto trace (JSON) of every load, store and compute span");
}

void OffloadFlags::apply(EngineOptions& eo, const Model& model, const RunShape& run) {
  const auto budget = [](const std::string& text, const char* flag) -> uint64_t {
    if (text.empty()) return 0;
    const uint64_t b = parse_bytes(text, flag);
    if (b == 0) fail("{} {}: a budget must be more than 0", flag, text);
    return b;
  };
  eo.device = device;
  parse_device_name(device);
  eo.gpu_mem = budget(gpu_mem, "--gpu-mem");
  eo.cpu_mem = budget(cpu_mem, "--cpu-mem");
  eo.disk_mem = budget(disk_mem, "--disk-mem");
  if (offload_dir.empty()) fail("--offload-dir: must not be empty");
  eo.offload_dir = offload_dir;
  if (!trace_path.empty()) {
    check_writable_file(trace_path, "--trace");
    trace = std::make_shared<Trace>();
    eo.trace = trace;
  }

  std::optional<Placement> fixed;
  if (!percent.empty()) fixed = Placement::from_percent(percent);

  Policy p;
  p.gpu_batch_size = eo.gpu_batch_size;
  p.num_gpu_batches = eo.num_gpu_batches;
  p.compress_weight = compression_of(eo.weight_dtype);
  p.compress_kv = compression_of(eo.kv_dtype);
  if (!hardware.empty()) hardware_profile = find_hardware_profile(hardware);

  if (policy == "auto") {
    source = "auto";
    const bool gpu = parse_device_name(device) >= 0;
    if (gpu && !hardware_profile) {
      fail("--policy auto on {} needs --hardware FILE|PRESET, a profile of this GPU machine (the "
           "profile `strata profile` measures and caches is the CPU device's)",
           device);
    }
    if (!hardware_profile) hardware_profile = this_machine(offload_dir);
    const HardwareProfile& hw = *hardware_profile;
    if (gpu && hw.unified_memory()) {
      fail("--hardware {}: {} describes a device computing on host RAM, not {}", hardware,
           hw.name, device);
    }
    const ModelShape shape = model_shape_of(model);
    const Workload work{std::max<int64_t>(1, run.max_prompt), std::max<int64_t>(1, run.gen)};
    Budgets b;
    const double ram = static_cast<double>(eo.cpu_mem > 0 ? eo.cpu_mem : available_ram_bytes());
    if (hw.unified_memory()) {
      b.gpu = 0;
      b.cpu = kSearchRamShare * (ram + static_cast<double>(eo.gpu_mem));
    } else {
      b.gpu = eo.gpu_mem > 0 ? static_cast<double>(eo.gpu_mem) : hw.gpu_mem;
      b.cpu = kSearchRamShare * ram;
    }
    if (eo.disk_mem > 0) {
      b.disk = static_cast<double>(eo.disk_mem);
    } else {
      std::error_code ec;
      fs::create_directories(offload_dir, ec);
      b.disk = static_cast<double>(free_disk_bytes(offload_dir));
    }
    SearchOptions so;
    so.gpu_batch_size = gpu_batch_size;
    so.num_gpu_batches = num_gpu_batches;
    if (cpu_attention) so.cpu_attention = true;
    if (gpu) {
      // What this engine runs on a GPU: activations on the device; KV pages
      // on the device or on disk with attention on the device, or (with
      // --cpu-attention) in RAM or on disk with attention on the CPU.
      so.fixed[static_cast<size_t>(Share::kActGpu)] = 1;
      so.fixed[static_cast<size_t>(Share::kActCpu)] = 0;
      if (cpu_attention) {
        so.fixed[static_cast<size_t>(Share::kKvGpu)] = 0;
      } else {
        so.fixed[static_cast<size_t>(Share::kKvCpu)] = 0;
        so.cpu_attention = false;
      }
    }
    so.compress_weight = p.compress_weight;
    so.compress_kv = p.compress_kv;
    if (fixed) {
      for (size_t i = 0; i < kNumShares; ++i) so.fixed[i] = fixed->share[i];
    }
    so.max_block_size = std::max<int64_t>(1, run.max_block);
    const SearchResult r = search_policy(shape, hw, work, b, so);
    p = normalize_policy(r.policy, hw);
    spdlog::info(
        "policy auto: {} on {} for prompt {} + gen {}: gpu batch {} x {} batches, {}; "
        "predicted {:.1f} tok/s total, bound {} ({} LPs; budgets RAM {}, disk {})",
        shape.name, hw.name, work.prompt_len, work.gen_len, p.gpu_batch_size, p.num_gpu_batches,
        p.placement.describe(),
        r.prediction.total_tokens_per_s,
        r.prediction.bound_phase == Phase::kPrefill ? r.prediction.bound_prefill
                                                    : r.prediction.bound_decode,
        r.n_lp_solved, format_bytes(b.cpu), format_bytes(b.disk));
  } else {
    if (!policy.empty()) {
      p = load_policy(policy);
      source = policy;
      if (!p.compress_weight.enabled()) p.compress_weight = compression_of(eo.weight_dtype);
      if (!p.compress_kv.enabled()) p.compress_kv = compression_of(eo.kv_dtype);
    } else {
      source = "flags";
      // Everything where the device computes unless --percent says otherwise.
      p.placement = Placement{};
    }
    if (fixed) p.placement = *fixed;
    if (gpu_batch_size) p.gpu_batch_size = *gpu_batch_size;
    if (num_gpu_batches) p.num_gpu_batches = *num_gpu_batches;
    if (cpu_attention) p.cpu_attention = true;
    validate_policy(p, source == "flags" ? "the placement flags" : source);
  }
  if (p.sparse_attention_budget > 0) {
    fail("{}: sparse_attention_budget {} is not supported by this engine; set it to 0",
         source, p.sparse_attention_budget);
  }
  chosen = p;

  eo.gpu_batch_size = p.gpu_batch_size;
  eo.num_gpu_batches = p.num_gpu_batches;
  eo.placement = p.placement;
  eo.cpu_attention = p.cpu_attention;
  if (!eo.weight_dtype) eo.weight_dtype = dtype_of(p.compress_weight, "compress_weight");
  if (!is_quantized(eo.kv_dtype)) {
    if (const auto t = dtype_of(p.compress_kv, "compress_kv")) eo.kv_dtype = *t;
  }
  eo.plan_prompt_tokens = run.max_prompt;
  eo.plan_new_tokens = run.gen;
}

nlohmann::ordered_json OffloadFlags::report_policy(const EngineOptions& eo) const {
  nlohmann::ordered_json j;
  j["source"] = source;
  j["device"] = eo.device;
  j["gpu_batch_size"] = eo.gpu_batch_size;
  j["num_gpu_batches"] = eo.num_gpu_batches;
  j["block_size"] = eo.gpu_batch_size * eo.num_gpu_batches;
  // As the device runs it (on the CPU device the gpu share is RAM: cpu).
  const Placement placed = eo.placement.folded(parse_device_name(eo.device) < 0);
  j["weights"] = tier_shares<nlohmann::ordered_json>(placed, DataKind::kWeights);
  j["kv_cache"] = tier_shares<nlohmann::ordered_json>(placed, DataKind::kKv);
  j["activations"] = tier_shares<nlohmann::ordered_json>(placed, DataKind::kAct);
  j["cpu_attention"] = eo.cpu_attention;
  j["offload_dir"] = eo.offload_dir;
  if (hardware_profile) j["hardware_profile"] = hardware_profile->name;
  return j;
}

std::optional<PredictedThroughput> OffloadFlags::predict(const Model& model, double prompt_len,
                                                         int64_t gen_len) const {
  if (!hardware_profile) return std::nullopt;
  try {
    const ModelShape shape = model_shape_of(model);
    const Workload work{std::max<int64_t>(1, std::llround(prompt_len)), std::max<int64_t>(1, gen_len)};
    const Prediction pr = strata::predict(shape, *hardware_profile, work, chosen,
                                          budgets_of(*hardware_profile));
    PredictedThroughput t;
    t.prefill_tokens_per_s = pr.prefill_tokens_per_s;
    t.decode_tokens_per_s = pr.decode_tokens_per_s;
    t.total_tokens_per_s = pr.total_tokens_per_s;
    t.bound = fmt::format("{}: {}", phase_name(pr.bound_phase),
                          pr.bound_phase == Phase::kPrefill ? pr.bound_prefill : pr.bound_decode);
    t.prefill_s = pr.prefill_s;
    t.decode_s = pr.decode_s;
    for (const auto& [name, s] : pr.decode_terms) t.decode_layer_terms[name] = s;
    for (const auto& [name, s] : pr.prefill_terms) t.prefill_layer_terms[name] = s;
    t.workload = {{"prompt_len", work.prompt_len}, {"gen_len", work.gen_len},
                  {"block_size", chosen.block_size()}, {"hardware", hardware_profile->name}};
    return t;
  } catch (const Error& e) {
    spdlog::warn("the cost model cannot predict this run: {}", e.what());
    return std::nullopt;
  }
}

void OffloadFlags::finish() const {
  if (trace && !trace_path.empty()) {
    trace->write_json(trace_path);
    spdlog::info("wrote the trace ({} spans) to {}", trace->size(), trace_path);
  }
}

}  // namespace strata::cli
