// Hardware profiles: what the cost model knows of a machine. Memory per tier,
// the bandwidth of each link in each direction, and the compute rates of the
// compute device and of the host CPU. Presets live in policies/hardware/
// (among them the T4 machine of the FlexGen paper with its fitted constants);
// `strata profile` measures the machine it runs on and writes the same YAML.
//
// Invariant: a profile returned by load/parse has every rate the cost model
// divides by set and positive, and capacities that are not negative. With a
// CPU compute device ("this machine" without a GPU) the gpu tier is the cpu
// tier's RAM: gpu_mem is not used, data in RAM is computed on in place, and
// the device rates describe the CPU.
//
// YAML schema (sizes and rates in human units, K/M/G/T = 2^10.., so 12.89G
// per second is 12.89 * 2^30 bytes/s, FlexGen's GB; TFLOP/s are 10^12):
//
//   name: t4-flexgen                 # required
//   aliases: [t4]                    # optional other names
//   description: "..."               # optional
//   device: gpu                      # gpu | cpu
//   memory: {gpu: 15G, cpu: 208G, disk: 1.5T}     # gpu unused with device: cpu
//   links:                           # bytes per second, per direction
//     disk_to_cpu: 0.473G
//     cpu_to_disk: 2.015G
//     cpu_to_gpu: 12.89G             # required with device: gpu
//     gpu_to_cpu: 4.82G              # required with device: gpu
//     gpu_to_cpu_kv: 0.97G           # optional: KV cache stores (default gpu_to_cpu)
//     cpu_to_disk_kv: 0.746G         # optional: KV cache stores (default cpu_to_disk)
//     disk_to_cpu_kv: {4K: 0.09G, 16K: 0.35G, 64K: 0.9G}
//                                    # optional: KV page reads by request size
//                                    # (default disk_to_cpu at every size)
//     disk_to_cpu_kv_batches: {1: 0.2G, 4: 0.6G, 16: 1.2G}
//                                    # optional: 64K KV reads issued in batches
//                                    # of N, each waited for before the next (a
//                                    # decode layer's load: one per sequence)
//     disk_to_cpu_weights: {1M: 1.1G, 4M: 1.9G, 16M: 2.8G}
//                                    # optional: weight loads by request size (a
//                                    # layer's weights on disk; default disk_to_cpu)
//     disk_to_cpu_beside_compute: {1M: 0.6G, 4M: 1.6G, 64M: 2.3G}
//                                    # optional: the same weight loads while the
//                                    # compute device computes on every thread (a
//                                    # CPU device shares its cores with the I/O);
//                                    # default: as fast as alone
//   device_compute:                  # optional with device: cpu (then from cpu_compute)
//     gemm_prefill_tflops: 21.24     # matrix products over many tokens
//     gemm_decode_tflops: 4.3        # matrix products of one token per sequence
//     attention_prefill_tflops: 9.97
//     attention_decode_tflops: 0.079
//     mem_bandwidth: 298G            # optional: device memory read rate (roofline)
//   cpu_compute:
//     gemm_tflops: 1.2               # required with device: cpu
//     attention_tflops: 0.0123       # decode attention over CPU-held KV
//     mem_bandwidth: 40G             # optional: RAM read rate (roofline)
//     attention_fit: [c1, c2, c3]    # optional small-batch correction (FlexGen)
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

namespace strata {

enum class DeviceKind { kGpu, kCpu };

// The request size of disk_to_cpu_kv_batches' reads.
inline constexpr double kKvBatchRequestBytes = 64 * 1024;

struct HardwareProfile {
  std::string name;
  std::vector<std::string> aliases;
  std::string description;
  DeviceKind device = DeviceKind::kGpu;

  // Capacity of each tier, bytes.
  double gpu_mem = 0;
  double cpu_mem = 0;
  double disk_mem = 0;

  // Links, bytes per second.
  double disk_to_cpu = 0;
  double cpu_to_disk = 0;
  double cpu_to_gpu = 0;
  double gpu_to_cpu = 0;
  double gpu_to_cpu_kv = 0;   // KV cache stores from the device (strided)
  double cpu_to_disk_kv = 0;  // KV cache stores to disk
  // KV page reads from disk: (request bytes, bytes per second), sizes
  // increasing; empty: disk_to_cpu.
  std::vector<std::pair<double, double>> disk_to_cpu_kv;
  // KV reads of kKvBatchRequestBytes each, issued in batches of N requests,
  // all waited for before the next batch: (N, bytes per second), N
  // increasing; empty: disk_to_cpu_kv's rates at every batch.
  std::vector<std::pair<double, double>> disk_to_cpu_kv_batches;
  // Weight loads from disk, two requests in flight as the engine streams
  // layers: (request bytes, bytes per second), sizes increasing; empty:
  // disk_to_cpu.
  std::vector<std::pair<double, double>> disk_to_cpu_weights;
  // The same loads while the compute device computes: (request bytes, bytes
  // per second), sizes increasing; empty: not measured, as fast as alone.
  std::vector<std::pair<double, double>> disk_to_cpu_beside_compute;

  // Compute device, FLOP/s (and bytes/s for the roofline; 0 = no roofline).
  double gemm_prefill_flops = 0;
  double gemm_decode_flops = 0;
  double attention_prefill_flops = 0;
  double attention_decode_flops = 0;
  double device_mem_bandwidth = 0;

  // Host CPU.
  double cpu_gemm_flops = 0;  // 0 = not known (only needed with device: cpu)
  double cpu_attention_flops = 0;
  double cpu_mem_bandwidth = 0;  // 0 = no roofline
  // FlexGen's fitted small-batch correction of the CPU attention rate:
  //   rate * max(0.1, 1 + c1*lb*lh - c2*lb - c3*lh),
  //   lb = max(0, log2(64 / gpu_batch_size)), lh = max(0, log2(4096 / hidden)).
  std::array<double, 3> cpu_attention_fit{0, 0, 0};

  bool unified_memory() const { return device == DeviceKind::kCpu; }
  // The rate of KV page reads of `request_bytes` each: disk_to_cpu_kv
  // interpolated in the logarithm of the size, its end values beyond its
  // ends; disk_to_cpu without it. Issued `batch` at a time (a decode
  // layer's load issues one request per sequence of its micro-batch and
  // waits for all), that rate times disk_to_cpu_kv_batches at `batch` (in
  // the logarithm of the batch likewise) over disk_to_cpu_kv at
  // kKvBatchRequestBytes; 0: the rate of disk_to_cpu_kv alone.
  double kv_read_rate(double request_bytes, double batch = 0) const;
  // The same for weight loads (disk_to_cpu_weights).
  double weight_read_rate(double request_bytes) const;
  // The share of its rate alone that a read of `request_bytes` gets beside
  // compute: disk_to_cpu_beside_compute over weight_read_rate at that size
  // (each interpolated likewise), at most 1; 1 when not measured.
  double disk_share_beside_compute(double request_bytes) const;
  // CPU attention rate for a micro-batch size and hidden size (applies the fit).
  double cpu_attention_rate(int64_t gpu_batch_size, int64_t hidden) const;
};

// Parses a profile from YAML text; `source` names it in errors.
HardwareProfile parse_hardware_profile(const std::string& yaml_text, const std::string& source);
// Loads a YAML file.
HardwareProfile load_hardware_profile(const std::string& path);
// A preset by name or alias ("t4-flexgen", "t4"), or a YAML file when `arg`
// looks like a path. Unknown names list the presets.
HardwareProfile find_hardware_profile(const std::string& arg);
std::vector<std::string> hardware_preset_names();
// The YAML text of a profile in the schema above (parse_hardware_profile of it
// gives the same profile back).
std::string hardware_profile_to_yaml(const HardwareProfile& hw);
// Throws Error naming `source` and the field when a required rate is missing
// or a value is out of range.
void validate_hardware_profile(const HardwareProfile& hw, const std::string& source);

}  // namespace strata
