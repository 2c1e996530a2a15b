// Measuring this machine (machine_profile.h).
#include "plan/machine_profile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "generate/driver.h"
#include "io/atomic_file.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_features.h"
#include "offload/measure.h"
#include "offload/offload_engine.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

constexpr double kGiB = 1073741824.0;
constexpr double kTera = 1e12;

// What to run: the shapes and how long to repeat them. --quick runs the same
// shapes with fewer repeats, a smaller disk file and RAM buffer, and skips
// the comparison in the other compute dtype.
struct Plan {
  TimingPlan timing;
  uint64_t disk_bytes = 0;
  int disk_repeats = 3;
  size_t ram_bytes = 0;
  size_t copy_bytes = 0;
  GemmShape gemm_prefill, gemm_decode;
  AttentionShape attention_decode, attention_prefill;
  bool other_dtype = true;  // also the GEMMs in the other compute dtype (header only)
};

Plan make_plan(bool quick, uint64_t disk_bytes, DType compute, DType kv) {
  Plan p;
  p.timing.warmup = quick ? 1 : 2;
  p.timing.min_reps = quick ? 3 : 5;
  p.timing.min_seconds = quick ? 0.15 : 1.0;
  p.disk_bytes = disk_bytes;
  p.disk_repeats = quick ? 2 : 3;
  p.ram_bytes = size_t{quick ? 256u : 512u} << 20;
  p.copy_bytes = size_t{256} << 20;
  // A 4096-wide linear layer (Llama-2-7B's attention projections), weights
  // in bf16 as most checkpoints store them: a prefill micro-batch of 512
  // tokens, and a decode micro-batch of 32 sequences (the weights stream
  // from RAM: 32M per call, beyond the caches).
  p.gemm_prefill = {512, 4096, 4096, DType::kBF16, compute};
  p.gemm_decode = {32, 4096, 4096, DType::kBF16, compute};
  // One layer of a Llama-3-8B-like model (32 query heads, 8 KV heads of
  // 128) in the KV dtype `strata generate` uses with this compute dtype,
  // pages of 16 tokens: a decode step of 32 sequences at context 1024 (128M
  // of f16 KV), and the prefill of two 512-token prompts.
  p.attention_decode = {32, 1, 1024, 32, 8, 128, 16, kv};
  p.attention_prefill = {2, 512, 512, 32, 8, 128, 16, kv};
  p.other_dtype = !quick;
  return p;
}

// A rate rounded to 4 significant digits in G (2^30) per second, so that the
// YAML shows "2.134G" and reads back to the same value.
double round_rate(double bytes_per_s) {
  return static_cast<double>(parse_bytes(fmt::format("{:.4g}G", bytes_per_s / kGiB)));
}

// A capacity rounded down to 3 significant digits in its largest unit (a
// budget must not exceed what is there).
double round_down_size(double bytes) {
  static const std::pair<const char*, double> kUnits[] = {
      {"T", kGiB * 1024}, {"G", kGiB}, {"M", 1048576.0}, {"K", 1024.0}};
  for (const auto& [unit, scale] : kUnits) {
    const double v = bytes / scale;
    if (v < 1) continue;
    const double step = std::pow(10.0, std::floor(std::log10(v)) - 2);  // 3 digits
    const double down = std::floor(v / step) * step;
    const auto text = fmt::format("{:.{}f}{}", down,
                                  std::max(0, static_cast<int>(-std::log10(step) + 0.5)), unit);
    return static_cast<double>(parse_bytes(text));
  }
  return std::floor(bytes);
}

// FLOP/s rounded to 4 significant digits.
double round_flops(double flops) {
  return std::stod(fmt::format("{:.4g}", flops));
}

std::string gbs(double bytes_per_s) {
  return format_bytes(bytes_per_s) + "/s";
}

std::string tflops(double flops) {
  return fmt::format("{:.3g} TFLOP/s", flops / kTera);
}

// "2.13G/s [2.10-2.19, 3 runs]" for an amount per run.
std::string rate_with_range(const RunTimes& t, double amount) {
  return fmt::format("{} [{}-{}, {} runs]", gbs(t.rate(amount)), format_bytes(t.rate_lo(amount)),
                     format_bytes(t.rate_hi(amount)), t.n);
}

std::string flops_with_range(const RunTimes& t, double flops) {
  return fmt::format("{} [{:.3g}-{:.3g}, {} runs]", tflops(t.rate(flops)), t.rate_lo(flops) / kTera,
                     t.rate_hi(flops) / kTera, t.n);
}

// "y[512,4096] = x[512,4096] . W[4096,4096]^T, W bf16, bf16 compute"
std::string gemm_text(const GemmShape& g) {
  return fmt::format("y[{},{}] = x[{},{}] . W[{},{}]^T, W {}, {} compute", g.m, g.n, g.m, g.k, g.n,
                     g.k, dtype_name(g.weight), dtype_name(g.compute));
}

// "32 sequences x 1024 keys, 32/8 heads of 128,\n#     f16 KV in shuffled pages of 16"
std::string attention_text(const AttentionShape& s) {
  return fmt::format(
      "{} sequence{} x {} {}, {}/{} heads of {},\n#     {} KV in shuffled pages of {}", s.n_seq,
      s.n_seq == 1 ? "" : "s", s.ctx, s.n_new == 1 ? "keys" : "tokens", s.n_head, s.n_kv_head,
      s.head_dim, dtype_name(s.kv), s.page_size);
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// The key of this machine and disk: host, CPU and RAM (host_key), and the
// filesystem of the offload directory.
std::string machine_key(const std::string& offload_dir) {
  struct stat st {};
  ::stat(offload_dir.c_str(), &st);
  return fmt::format("{:016x}",
                     fnv1a(fmt::format("{}|{}", host_key(), static_cast<uint64_t>(st.st_dev))));
}

}  // namespace

std::string profile_cache_dir(const std::string& offload_dir) {
  std::vector<fs::path> candidates;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    candidates.push_back(fs::path(x) / "strata");
  if (const char* h = std::getenv("HOME"); h && *h)
    candidates.push_back(fs::path(h) / ".cache" / "strata");
  candidates.push_back(fs::path(offload_dir));
  for (const fs::path& c : candidates) {
    std::error_code ec;
    fs::create_directories(c, ec);
    if (!ec && ::access(c.c_str(), W_OK) == 0) return c.string();
  }
  return offload_dir;
}

std::string host_key() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}|{}|{}", host, cpu_model_name(), total_ram_bytes());
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string choose_profile_dir(const std::string& dir, uint64_t disk_bytes) {
  if (!dir.empty()) {
    check_offload_dir(dir, disk_bytes);
    return dir;
  }
  const std::string cwd = fs::current_path().string();
  try {
    check_offload_dir(cwd, disk_bytes);
    return cwd;
  } catch (const Error& e) {
    spdlog::info("profile: not measuring the disk in the current directory ({}); using /tmp",
                 e.what());
  }
  check_offload_dir("/tmp", disk_bytes);
  return "/tmp";
}

std::string measure_machine(const ProfileRequest& a) {
  const auto t_start = std::chrono::steady_clock::now();
  // ---- inputs, all checked before anything is measured ----
  const uint64_t disk_bytes = a.disk_bytes.value_or(uint64_t{a.quick ? 256u : 1024u} << 20);
  if (disk_bytes < (uint64_t{32} << 20)) {
    fail("--disk-bytes {}: too small to measure a disk at depth; use at least 32M",
         format_bytes(static_cast<double>(disk_bytes)));
  }
  if (a.threads < 0) fail("--threads {}: use 0 (all cores) or more", a.threads);
  if (a.name.empty()) fail("--name: must not be empty");
  const std::string dir = choose_profile_dir(a.offload_dir, disk_bytes);

  const DType compute = choose_compute_dtype(a.compute_dtype, cpu::cpu_features().avx512_bf16);
  const DType kv = default_kv_dtype(compute);
  const DType other = compute == DType::kBF16 ? DType::kF32 : DType::kBF16;
  const Plan plan = make_plan(a.quick, disk_bytes, compute, kv);

  // The compute backend: the CPU. (A GPU machine's profile — links to and
  // from the GPU, its GEMM and attention rates — is written by hand, as
  // policies/hardware/t4-flexgen.yaml is; this command measures the CPU
  // device.)
  CpuBackend backend(a.threads);
  const uint64_t ram = total_ram_bytes();
  spdlog::info("profile: {}, {}, RAM {}; compute device: the CPU ({} compute, {} KV)",
               cpu_model_name(), backend.name(), format_bytes(static_cast<double>(ram)),
               dtype_name(compute), dtype_name(kv));

  // ---- disk ----
  DiskMeasureOptions dopt;
  dopt.file_bytes = plan.disk_bytes;
  dopt.repeats = plan.disk_repeats;
  dopt.kv_bytes = plan.disk_bytes;  // the same pass size as the large writes, to compare
  dopt.kv_batch_size = static_cast<size_t>(kKvBatchRequestBytes);
  // The weight stream again while the cores compute as a decode does (the
  // engine loads the next layer beside this one's products).
  GemmRunner beside_load(backend, plan.gemm_decode);
  dopt.beside = [&](const std::atomic<bool>& stop) {
    while (!stop.load(std::memory_order_relaxed)) beside_load.run();
  };
  spdlog::info("profile: disk in {}: {} file, {} blocks, {} in flight...", dir,
               format_bytes(static_cast<double>(plan.disk_bytes)),
               format_bytes(static_cast<double>(dopt.block_bytes)), dopt.queue_depth);
  const DiskRates disk = measure_disk(dir, dopt);
  const double disk_free = static_cast<double>(free_disk_bytes(dir));
  spdlog::info(
      "profile: disk ({}{}): read {} ({} requests: {}; beside compute {}), write {}, {} writes {}",
      disk.backend, disk.direct ? ", O_DIRECT" : ", buffered", gbs(disk.read_bytes_per_s()),
      format_bytes(static_cast<double>(disk.stream_bytes)), gbs(disk.read_stream_bytes_per_s()),
      gbs(disk.read_stream_beside_bytes_per_s()), gbs(disk.write_bytes_per_s()),
      format_bytes(static_cast<double>(disk.kv_block_bytes)), gbs(disk.write_kv_bytes_per_s()));
  if (!disk.direct) {
    spdlog::warn(
        "profile: the filesystem of {} has no O_DIRECT: the page cache was in the way, so the "
        "disk numbers are too high; pass --offload-dir on the disk you will offload to",
        dir);
  }

  // ---- memory and copies ----
  const RunTimes ram_read = measure_ram_read(plan.ram_bytes, backend.threads(), plan.timing);
  const double ram_bw = ram_read.rate(static_cast<double>(plan.ram_bytes));
  const CopyTimes copies = measure_copies(backend, plan.copy_bytes, plan.timing);
  const double h2d = copies.to_device.rate(static_cast<double>(copies.bytes));
  const double d2h = copies.to_host.rate(static_cast<double>(copies.bytes));
  spdlog::info("profile: RAM read {}; host->device {}, device->host {} ({})", gbs(ram_bw), gbs(h2d),
               gbs(d2h),
               copies.device_is_host ? "memcpy: the device memory is RAM" : "device copies");

  // ---- GEMM ----
  const RunTimes gemm_p = measure_gemm(backend, plan.gemm_prefill, plan.timing);
  const RunTimes gemm_d = measure_gemm(backend, plan.gemm_decode, plan.timing);
  const double gemm_prefill = gemm_p.rate(plan.gemm_prefill.flops());
  const double gemm_decode = gemm_d.rate(plan.gemm_decode.flops());
  spdlog::info("profile: GEMM {}: prefill ({} tokens) {}, decode ({} tokens) {}",
               dtype_name(compute), plan.gemm_prefill.m, tflops(gemm_prefill), plan.gemm_decode.m,
               tflops(gemm_decode));
  std::string other_line;
  if (plan.other_dtype) {
    GemmShape p = plan.gemm_prefill, d = plan.gemm_decode;
    p.compute = d.compute = other;
    const double op = measure_gemm(backend, p, plan.timing).rate(p.flops());
    const double od = measure_gemm(backend, d, plan.timing).rate(d.flops());
    other_line = fmt::format("prefill {}, decode {}", tflops(op), tflops(od));
    spdlog::info("profile: GEMM {} (for comparison): {}", dtype_name(other), other_line);
  }

  // ---- attention ----
  const AttentionShape& ad = plan.attention_decode;
  const AttentionShape& ap = plan.attention_prefill;
  const RunTimes attn_d = measure_attention(backend, ad, plan.timing);
  const RunTimes attn_p = measure_attention(backend, ap, plan.timing);
  const double attention_decode = attn_d.rate(ad.model_flops());
  const double attention_prefill = attn_p.rate(ap.model_flops());
  const double attention_kv_rate = attn_d.rate(ad.kv_bytes());
  spdlog::info(
      "profile: attention ({} KV): decode {} ({} seqs x {} keys, KV read at {}), prefill {} "
      "({} x {} tokens)",
      dtype_name(kv), tflops(attention_decode), ad.n_seq, ad.ctx, gbs(attention_kv_rate),
      tflops(attention_prefill), ap.n_seq, ap.ctx);

  // The share of the CPU this process got during the timed compute runs: the
  // OpenMP threads spin while they wait, so an idle machine gives about 100%;
  // much less means other processes were competing for the cores.
  double wall_s = 0, cpu_s = 0;
  for (const RunTimes* t : {&ram_read, &gemm_p, &gemm_d, &attn_d, &attn_p}) {
    wall_s += t->wall_s;
    cpu_s += t->cpu_s;
  }
  const double cpu_share = cpu_s / (wall_s * std::max(1, backend.threads()));
  std::string share_note = fmt::format("{:.0f}% of {} threads", 100 * cpu_share, backend.threads());
  if (cpu_share < 0.8) {
    share_note += ":\n#     other processes were running, so the compute rates are low";
    spdlog::warn(
        "profile: this process got {:.0f}% of its {} threads' time while measuring compute: other "
        "processes were running and the compute rates are low; measure on an idle machine",
        100 * cpu_share, backend.threads());
  }

  // ---- the profile ----
  HardwareProfile hw;
  hw.name = a.name;
  const std::string date = utc_now();
  hw.description =
      fmt::format("{}, {}, {} RAM; disk {} (measured {})", cpu_model_name(), backend.name(),
                  format_bytes(static_cast<double>(ram)), dir, date.substr(0, 10));
  hw.device = DeviceKind::kCpu;
  hw.cpu_mem = round_down_size(static_cast<double>(ram));
  hw.disk_mem = round_down_size(disk_free);
  // The rate weight loads see: large requests cut into chunks by the engine
  // (on some disks far above that of one block per request).
  hw.disk_to_cpu = round_rate(disk.read_stream_bytes_per_s());
  hw.cpu_to_disk = round_rate(disk.write_bytes_per_s());
  hw.cpu_to_disk_kv = round_rate(disk.write_kv_bytes_per_s());
  for (size_t i = 0; i < disk.kv_read_sizes.size(); ++i) {
    hw.disk_to_cpu_kv.emplace_back(static_cast<double>(disk.kv_read_sizes[i]),
                                   round_rate(disk.read_kv_bytes_per_s(i)));
  }
  for (size_t i = 0; i < disk.kv_read_batches.size(); ++i) {
    hw.disk_to_cpu_kv_batches.emplace_back(static_cast<double>(disk.kv_read_batches[i]),
                                           round_rate(disk.read_kv_batched_bytes_per_s(i)));
  }
  for (size_t i = 0; i < disk.stream_sizes.size(); ++i) {
    hw.disk_to_cpu_weights.emplace_back(static_cast<double>(disk.stream_sizes[i]),
                                        round_rate(disk.read_stream_sized_bytes_per_s(i)));
  }
  if (!hw.disk_to_cpu_weights.empty()) {
    hw.disk_to_cpu_weights.emplace_back(static_cast<double>(disk.stream_bytes), hw.disk_to_cpu);
  }
  for (size_t i = 0; i < disk.read_stream_sized_beside.size(); ++i) {
    hw.disk_to_cpu_beside_compute.emplace_back(
        static_cast<double>(disk.stream_sizes[i]),
        round_rate(disk.read_stream_sized_beside_bytes_per_s(i)));
  }
  hw.disk_to_cpu_beside_compute.emplace_back(static_cast<double>(disk.stream_bytes),
                                             round_rate(disk.read_stream_beside_bytes_per_s()));
  hw.gemm_prefill_flops = round_flops(gemm_prefill);
  hw.gemm_decode_flops = round_flops(gemm_decode);
  hw.attention_prefill_flops = round_flops(attention_prefill);
  hw.attention_decode_flops = round_flops(attention_decode);
  hw.device_mem_bandwidth = round_rate(ram_bw);
  hw.cpu_gemm_flops = hw.gemm_prefill_flops;
  hw.cpu_attention_flops = hw.attention_decode_flops;
  hw.cpu_mem_bandwidth = hw.device_mem_bandwidth;
  validate_hardware_profile(hw, "measured profile");

  const std::string body = hardware_profile_to_yaml(hw);
  // What a reader of the file gets must be what was measured.
  const std::string again =
      hardware_profile_to_yaml(parse_hardware_profile(body, "measured profile"));
  STRATA_ASSERT_MSG(again == body, "hardware profile YAML does not read back:\n{}\n{}", body,
                    again);

  // The header: the machine, then each number with its range and how it
  // was measured.
  const double file_b = static_cast<double>(disk.file_bytes);
  const double kv_pass_b = static_cast<double>(disk.kv_pass_bytes);
  std::string h;
  h += "# Hardware profile of this machine, measured by `strata profile`.\n";
  h += fmt::format("#   machine: {}, {}, {} RAM\n", cpu_model_name(), backend.name(),
                   format_bytes(static_cast<double>(ram)));
  h += fmt::format("#   date:    {}\n", date);
  h += fmt::format("#   strata:  0.1.0, commit {}{}\n", build_commit(),
                   a.quick ? "; --quick (fewer repeats, a smaller disk file)" : "");
  h += "#   The compute device is the CPU (`strata profile` measures the CPU device):\n"
       "#   the gpu tier is RAM, data in RAM is computed on in place, disk is the tier\n"
       "#   that streams. Host<->device copies are memcpy through the CPU backend; they\n"
       "#   are not written below (a CPU device never copies to itself):\n";
  h += fmt::format("#     host->device {}\n", rate_with_range(copies.to_device, copies.bytes));
  h += fmt::format("#     device->host {}\n", rate_with_range(copies.to_host, copies.bytes));
  h += fmt::format("#     ({} buffer)\n", format_bytes(static_cast<double>(copies.bytes)));
  h += fmt::format("#   CPU time this process got in the timed compute runs: {}\n", share_note);
  h += "# Each number is the median of repeated runs after a warm-up [slowest-fastest,\n"
       "# runs]; in the YAML rates are rounded to 4 digits, sizes down to 3.\n"
       "# K/M/G = 2^10/2^20/2^30 bytes; TFLOP/s = 10^12 FLOP/s.\n";
  h += "#   memory.cpu: RAM (MemTotal, or the cgroup limit when lower)\n";
  h += fmt::format("#   memory.disk: free space in {} after the measurement\n", dir);
  const double stream_pass_b = static_cast<double>(disk.stream_pass_bytes);
  h += fmt::format("#   links.disk_to_cpu: {}\n", rate_with_range(disk.read_stream, stream_pass_b));
  h += fmt::format(
      "#     sequential reads of {} of a file in {} as weight loads are read:\n"
      "#     {} requests, 2 in flight, each cut into 1M chunks, 16 in flight, {}, {};\n"
      "#     this and the sizes below in turn, {} rounds, each rate the bytes over the\n"
      "#     time of all its rounds (a virtual disk can run fast and slow by turns)\n",
      format_bytes(stream_pass_b), dir, format_bytes(static_cast<double>(disk.stream_bytes)),
      disk.backend, disk.direct ? "O_DIRECT" : "buffered (no O_DIRECT here: the page cache helped)",
      disk.read_stream.n);
  h += fmt::format("#     (one {} block per request, {} in flight: {})\n",
                   format_bytes(static_cast<double>(disk.block_bytes)), disk.queue_depth,
                   rate_with_range(disk.read, file_b));
  if (!disk.stream_sizes.empty()) {
    h += "#   links.disk_to_cpu_weights: the same at smaller requests (a layer's weights\n"
         "#     on disk is one request), the largest being links.disk_to_cpu:\n";
    for (size_t i = 0; i < disk.stream_sizes.size(); ++i) {
      h += fmt::format("#     {} requests: {}\n",
                       format_bytes(static_cast<double>(disk.stream_sizes[i])),
                       rate_with_range(disk.read_stream_sized[i],
                                       static_cast<double>(disk.stream_sized_pass_bytes[i])));
    }
  }
  h += fmt::format(
      "#   links.disk_to_cpu_beside_compute: the same loads (each size, the largest\n"
      "#     last) while the cores compute as a decode does ({} on\n"
      "#     every thread, again and again), in the same rounds:\n",
      gemm_text(plan.gemm_decode));
  for (size_t i = 0; i < disk.read_stream_sized_beside.size(); ++i) {
    h += fmt::format("#     {} requests: {}\n",
                     format_bytes(static_cast<double>(disk.stream_sizes[i])),
                     rate_with_range(disk.read_stream_sized_beside[i],
                                     static_cast<double>(disk.stream_sized_pass_bytes[i])));
  }
  h += fmt::format("#     {} requests: {}\n", format_bytes(static_cast<double>(disk.stream_bytes)),
                   rate_with_range(disk.read_stream_beside, stream_pass_b));
  h += fmt::format("#   links.cpu_to_disk: {}\n", rate_with_range(disk.write, file_b));
  h += "#     the same as writes, each pass ending in fdatasync\n";
  h += fmt::format("#   links.cpu_to_disk_kv: {}\n", rate_with_range(disk.write_kv, kv_pass_b));
  h += fmt::format(
      "#     writes of {} blocks (a 16-token KV page of a 4096-wide f16 layer), {} per pass\n",
      format_bytes(static_cast<double>(disk.kv_block_bytes)), format_bytes(kv_pass_b));
  h += "#   links.disk_to_cpu_kv: reads as KV pages on disk are read, one request per\n"
       "#     page record at scattered places, the engine's disk I/O settings:\n";
  for (size_t i = 0; i < disk.kv_read_sizes.size(); ++i) {
    h += fmt::format(
        "#     {} requests: {}\n", format_bytes(static_cast<double>(disk.kv_read_sizes[i])),
        rate_with_range(disk.read_kv[i], static_cast<double>(disk.kv_read_pass_bytes[i])));
  }
  if (!disk.kv_read_batches.empty()) {
    h += fmt::format(
        "#   links.disk_to_cpu_kv_batches: the same reads of {} issued in batches of N,\n"
        "#     each waited for before the next, as a decode layer's load reads one request\n"
        "#     per sequence of its micro-batch:\n",
        format_bytes(static_cast<double>(disk.kv_batch_size)));
    for (size_t i = 0; i < disk.kv_read_batches.size(); ++i) {
      h += fmt::format(
          "#     batches of {}: {}\n", disk.kv_read_batches[i],
          rate_with_range(disk.read_kv_batched[i], static_cast<double>(disk.kv_batch_pass_bytes)));
    }
  }
  h += fmt::format("#   device_compute.gemm_prefill_tflops: {}\n",
                   flops_with_range(gemm_p, plan.gemm_prefill.flops()));
  h += fmt::format("#     {}, 2mnk FLOPs\n", gemm_text(plan.gemm_prefill));
  h += fmt::format("#   device_compute.gemm_decode_tflops: {}\n",
                   flops_with_range(gemm_d, plan.gemm_decode.flops()));
  h += fmt::format("#     {}, 2mnk FLOPs;\n#     the {} of W stream from RAM\n",
                   gemm_text(plan.gemm_decode), format_bytes(plan.gemm_decode.weight_bytes()));
  if (plan.other_dtype) {
    h += fmt::format("#     (in {} compute, for comparison: {})\n", dtype_name(other), other_line);
  }
  h += fmt::format("#   device_compute.attention_prefill_tflops: {}\n",
                   flops_with_range(attn_p, ap.model_flops()));
  h += fmt::format(
      "#     causal paged attention of {};\n"
      "#     FLOPs as the cost model counts them, 4 s^2 q_dim per sequence (the masked\n"
      "#     half included)\n",
      attention_text(ap));
  h += fmt::format("#   device_compute.attention_decode_tflops: {}\n",
                   flops_with_range(attn_d, ad.model_flops()));
  h += fmt::format(
      "#     a decode step of {};\n"
      "#     4 ctx q_dim FLOPs per sequence; the {} of KV read at {}\n",
      attention_text(ad), format_bytes(ad.kv_bytes()), gbs(attention_kv_rate));
  h += fmt::format("#   device_compute.mem_bandwidth: {}\n",
                   rate_with_range(ram_read, static_cast<double>(plan.ram_bytes)));
  h += fmt::format("#     RAM read rate: every thread sums its part of {}\n",
                   format_bytes(static_cast<double>(plan.ram_bytes)));
  h += "#   cpu_compute: the CPU is the device: gemm_tflops = gemm_prefill_tflops,\n"
       "#     attention_tflops = attention_decode_tflops, mem_bandwidth = RAM read rate;\n"
       "#     attention_fit (FlexGen's small-batch correction for CPU attention beside a\n"
       "#     GPU) is not measured\n";
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  spdlog::info("profile: measured in {:.1f} s", took);
  return h + body;
}

std::string this_machine_profile_path(const std::string& offload_dir, int version) {
  return (fs::path(profile_cache_dir(offload_dir)) /
          fmt::format("hardware-v{}-{}.yaml", version, machine_key(offload_dir)))
      .string();
}

HardwareProfile this_machine_profile(const std::string& offload_dir) {
  std::error_code ec;
  fs::create_directories(offload_dir, ec);
  if (ec) {
    fail("--offload-dir {}: cannot create the directory: {}; choose a directory you can write to",
         offload_dir, ec.message());
  }
  const std::string path = this_machine_profile_path(offload_dir);
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
      "policy auto: measuring this machine once (as strata profile --quick --disk-bytes "
      "1G, disk in {}); cached in {}",
      offload_dir, path);
  ProfileRequest r;
  r.offload_dir = offload_dir;
  r.disk_bytes = uint64_t{1} << 30;
  r.quick = true;
  write_file_atomically(path, measure_machine(r), "the machine profile");
  return load_hardware_profile(path);
}

}  // namespace strata
