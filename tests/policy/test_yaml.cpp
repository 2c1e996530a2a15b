// Policy, hardware and model-shape YAML: round trips, the presets (their
// parameter counts against the published totals), and the errors a bad file
// gives (one line, naming the file and the key).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "policy/cost_model.h"
#include "policy/hardware.h"
#include "policy/model_shape.h"
#include "policy/policy.h"
#include "policy/policy_fixtures.h"

namespace strata {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an Error";
  return {};
}

#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "'" << (text) << "' lacks '" << (part) << "'"

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("strata_test_policy_" + std::to_string(::getpid()) + "_" + name);
}

TEST(PolicyYaml, RoundTripKeepsEveryField) {
  Policy p;
  p.gpu_batch_size = 48;
  p.num_gpu_batches = 3;
  p.placement[Share::kWGpu] = 0.1 + 0.2;  // not a short decimal: must survive exactly
  p.placement[Share::kWCpu] = 1 - p.placement[Share::kWGpu];
  p.placement[Share::kKvGpu] = 1.0 / 3;
  p.placement[Share::kKvCpu] = 0.5;
  p.placement[Share::kActGpu] = 0;
  p.placement[Share::kActCpu] = 0.75;
  p.cpu_attention = true;
  p.compress_weight = parse_compression("q4:128", "test");
  p.compress_kv = parse_compression("q8s:32", "test");
  p.sparse_attention_budget = 256;
  const Policy q = parse_policy(policy_to_yaml(p, "a header\nof two lines"), "roundtrip");
  EXPECT_EQ(q, p);

  const auto path = temp_file("roundtrip.yaml");
  save_policy(p, path.string(), "saved");
  EXPECT_EQ(load_policy(path.string()), p);
  for (const auto& e : std::filesystem::directory_iterator(path.parent_path())) {
    EXPECT_NE(e.path().filename().string().rfind(path.filename().string() + ".tmp", 0), 0u)
        << e.path();
  }
  std::filesystem::remove(path);
}

TEST(PolicyYaml, AcceptsShortFormsAndDefaults) {
  const Policy p = parse_policy(R"(
gpu_batch_size: 2
num_gpu_batches: 1
weights: {gpu: 1}
kv_cache: {gpu: 0.5, cpu: 0.5, disk: 0}
activations: {cpu: 1}
compress_weight: q4
)",
                                "short");
  EXPECT_EQ(p.placement[Share::kWGpu], 1);
  EXPECT_EQ(p.placement[Share::kWCpu], 0);
  EXPECT_EQ(p.placement[Share::kActGpu], 0);
  EXPECT_FALSE(p.cpu_attention);
  EXPECT_EQ(p.compress_weight.bits, 4);
  EXPECT_EQ(p.compress_weight.group_size, 64);
  EXPECT_FALSE(p.compress_kv.enabled());
}

TEST(PolicyYaml, BadFilesNameTheFileAndTheKey) {
  const std::string base =
      "gpu_batch_size: 2\nnum_gpu_batches: 1\nweights: {gpu: 1}\nkv_cache: {gpu: 1}\n";
  std::string e = error_of(
      [&] { parse_policy(base + "activations: {gpu: 1}\ncpu_atention: true\n", "p.yaml"); });
  EXPECT_CONTAINS(e, "p.yaml: cpu_atention: unknown key");
  EXPECT_CONTAINS(e, "cpu_attention");  // the list of known keys
  e = error_of([&] { parse_policy(base, "p.yaml"); });
  EXPECT_CONTAINS(e, "p.yaml: activations: missing");
  e = error_of([&] { parse_policy(base + "activations: {gpu: 1.5}\n", "p.yaml"); });
  EXPECT_CONTAINS(e, "p.yaml: activations.gpu: 1.5 is not a fraction");
  e = error_of([&] { parse_policy(base + "activations: {gpu: 0.6, cpu: 0.6}\n", "p.yaml"); });
  EXPECT_CONTAINS(e, "p.yaml: activations: gpu 0.6 + cpu 0.6 is more than 1");
  e = error_of(
      [&] { parse_policy(base + "activations: {gpu: 0.5, cpu: 0.2, disk: 0.2}\n", "p.yaml"); });
  EXPECT_CONTAINS(e, "is not 1");
  e = error_of([&] { parse_policy(base + "activations: {gpu: 1}\ncompress_kv: q5\n", "p.yaml"); });
  EXPECT_CONTAINS(e, "p.yaml: compress_kv: 'q5' is not a compression");
  e = error_of(
      [&] { parse_policy(base + "activations: {gpu: 1}\ncompress_kv: q4s:64\n", "p.yaml"); });
  EXPECT_CONTAINS(e, "no 4-bit symmetric format with groups of 64");
  e = error_of([&] { parse_policy("gpu_batch_size: 0\n", "p.yaml"); });
  EXPECT_CONTAINS(e, "p.yaml: gpu_batch_size: 0 is below the smallest allowed value 1");
  e = error_of([&] { parse_policy("gpu_batch_size: two\n", "p.yaml"); });
  EXPECT_CONTAINS(e, "p.yaml: gpu_batch_size: 'two' is not a whole number");
  e = error_of([&] { parse_policy("weights: {gpu: [1\n", "p.yaml"); });
  EXPECT_CONTAINS(e, "p.yaml:");
  EXPECT_CONTAINS(e, "not valid YAML");
  e = error_of([&] { parse_policy("", "p.yaml"); });
  EXPECT_CONTAINS(e, "p.yaml: the document is empty");
  e = error_of([&] { load_policy("/nonexistent/strata/policy.yaml"); });
  EXPECT_CONTAINS(e, "/nonexistent/strata/policy.yaml: cannot open the file");
  for (const std::string& msg : {e}) EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(PolicyCompression, FormatsAndBytes) {
  EXPECT_FALSE(parse_compression("none", "t").enabled());
  const Compression q4 = parse_compression("q4", "t");
  EXPECT_EQ(q4.bytes_per_elem(2), 36.0 / 64);  // q4a64: 32 bytes + scale and min (f16)
  EXPECT_EQ(parse_compression("q8:128", "t").bytes_per_elem(2), 132.0 / 128);
  EXPECT_EQ(parse_compression("q4s", "t").bytes_per_elem(2), 18.0 / 32);  // GGUF Q4_0
  EXPECT_EQ(Compression{}.bytes_per_elem(2), 2);
  EXPECT_THROW(parse_compression("q8:48", "t"), Error);
  EXPECT_THROW(parse_compression("q4:", "t"), Error);
}

TEST(PolicyHardwareYaml, PresetRoundTrip) {
  const HardwareProfile t4 = find_hardware_profile("t4");
  EXPECT_EQ(t4.name, "t4-flexgen");
  const HardwareProfile again = parse_hardware_profile(hardware_profile_to_yaml(t4), "again");
  // Rates go through TFLOP/s text: equal to the last bit or two.
  auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-12 * std::fabs(b); };
  EXPECT_EQ(again.name, t4.name);
  EXPECT_EQ(again.device, t4.device);
  EXPECT_EQ(again.gpu_mem, t4.gpu_mem);
  EXPECT_EQ(again.cpu_mem, t4.cpu_mem);
  EXPECT_EQ(again.disk_mem, t4.disk_mem);
  EXPECT_EQ(again.cpu_to_gpu, t4.cpu_to_gpu);
  EXPECT_EQ(again.gpu_to_cpu_kv, t4.gpu_to_cpu_kv);
  EXPECT_EQ(again.disk_to_cpu, t4.disk_to_cpu);
  EXPECT_EQ(again.device_mem_bandwidth, t4.device_mem_bandwidth);
  EXPECT_TRUE(near(again.gemm_prefill_flops, t4.gemm_prefill_flops));
  EXPECT_TRUE(near(again.attention_decode_flops, t4.attention_decode_flops));
  EXPECT_TRUE(near(again.cpu_attention_flops, t4.cpu_attention_flops));
  EXPECT_EQ(again.cpu_attention_fit, t4.cpu_attention_fit);
  // FlexGen's constants, in its units (GB = 2^30 bytes, T = 10^12).
  EXPECT_EQ(t4.cpu_to_gpu, std::llround(12.89 * 1073741824.0));
  EXPECT_EQ(t4.disk_to_cpu, std::llround(0.473 * 1073741824.0));
  EXPECT_TRUE(near(t4.gemm_prefill_flops, 21.24e12));
  EXPECT_TRUE(near(t4.gemm_decode_flops, 4.3e12));
  EXPECT_TRUE(near(t4.cpu_attention_flops, 0.0123e12));
  EXPECT_EQ(t4.gpu_mem, 15.0 * 1073741824);

  const HardwareProfile cpu = test::tiny_cpu();
  const HardwareProfile cpu_again = parse_hardware_profile(hardware_profile_to_yaml(cpu), "again");
  EXPECT_EQ(cpu_again.device, DeviceKind::kCpu);
  EXPECT_TRUE(near(cpu_again.gemm_decode_flops, cpu.gemm_decode_flops));
  EXPECT_EQ(cpu_again.cpu_mem, cpu.cpu_mem);
}

// KV page reads by request size: read back, interpolated in the logarithm
// of the size, flat beyond the ends; without them, disk_to_cpu.
TEST(PolicyHardwareYaml, KvReadRatesBySize) {
  HardwareProfile hw = parse_hardware_profile(R"(
name: kv
device: cpu
memory: {cpu: 1G, disk: 16G}
links: {disk_to_cpu: 2G, cpu_to_disk: 1G, disk_to_cpu_kv: {16K: 0.4G, 4K: 0.1G, 64K: 1G}}
cpu_compute: {gemm_tflops: 1, attention_tflops: 0.1}
)",
                                              "kv.yaml");
  // Rates are whole bytes per second.
  const double r4 = std::llround(0.1 * 1073741824.0), r16 = std::llround(0.4 * 1073741824.0),
               r64 = 1073741824.0;
  ASSERT_EQ(hw.disk_to_cpu_kv.size(), 3u);
  EXPECT_EQ(hw.disk_to_cpu_kv[0], std::make_pair(4096.0, r4));  // sorted by size
  EXPECT_EQ(hw.kv_read_rate(4096), r4);
  EXPECT_DOUBLE_EQ(hw.kv_read_rate(8192), (r4 + r16) / 2);  // half way in log2 from 4K to 16K
  EXPECT_DOUBLE_EQ(hw.kv_read_rate(32768), (r16 + r64) / 2);
  EXPECT_EQ(hw.kv_read_rate(1024), r4);
  EXPECT_EQ(hw.kv_read_rate(1 << 20), r64);
  const HardwareProfile again = parse_hardware_profile(hardware_profile_to_yaml(hw), "again");
  EXPECT_EQ(again.disk_to_cpu_kv, hw.disk_to_cpu_kv);
  hw.disk_to_cpu_kv.clear();
  EXPECT_EQ(hw.kv_read_rate(4096), hw.disk_to_cpu);

  const std::string e = error_of([] {
    parse_hardware_profile(
        "name: x\ndevice: cpu\nmemory: {cpu: 1G}\n"
        "links: {disk_to_cpu: 1G, cpu_to_disk: 1G, disk_to_cpu_kv: {big: 1G}}\n"
        "cpu_compute: {gemm_tflops: 1, attention_tflops: 1}\n",
        "hw.yaml");
  });
  EXPECT_CONTAINS(e, "hw.yaml: links.disk_to_cpu_kv: 'big' is not a request size");
}

// KV reads issued in batches (a micro-batch's sequences at a time): the
// rate by size scaled by the batch's rate over the size table's at 64K,
// interpolated in the logarithm of the batch, flat beyond the ends.
TEST(PolicyHardwareYaml, KvReadRatesByBatch) {
  HardwareProfile hw = parse_hardware_profile(R"(
name: kv
device: cpu
memory: {cpu: 1G, disk: 16G}
links: {disk_to_cpu: 2G, cpu_to_disk: 1G, disk_to_cpu_kv: {16K: 0.4G, 64K: 1G},
        disk_to_cpu_kv_batches: {4: 0.75G, 1: 0.25G, 16: 1G}}
cpu_compute: {gemm_tflops: 1, attention_tflops: 0.1}
)",
                                              "kv.yaml");
  ASSERT_EQ(hw.disk_to_cpu_kv_batches.size(), 3u);
  EXPECT_EQ(hw.disk_to_cpu_kv_batches[0].first, 1.0);  // sorted by batch
  const double r16 = hw.kv_read_rate(16384);
  EXPECT_EQ(hw.kv_read_rate(16384, 0), r16);   // no batch: the size table alone
  EXPECT_EQ(hw.kv_read_rate(16384, 16), r16);  // 64K batches of 16 at the size table's 64K rate
  EXPECT_DOUBLE_EQ(hw.kv_read_rate(16384, 1), r16 / 4);
  EXPECT_DOUBLE_EQ(hw.kv_read_rate(16384, 2), r16 / 2);  // half way in log2 from 1 to 4
  EXPECT_DOUBLE_EQ(hw.kv_read_rate(65536, 4), 0.75 * hw.kv_read_rate(65536));
  EXPECT_EQ(hw.kv_read_rate(16384, 64), r16);
  const HardwareProfile again = parse_hardware_profile(hardware_profile_to_yaml(hw), "again");
  EXPECT_EQ(again.disk_to_cpu_kv_batches, hw.disk_to_cpu_kv_batches);
  hw.disk_to_cpu_kv_batches.clear();
  EXPECT_EQ(hw.kv_read_rate(16384, 1), r16);

  for (const char* bad : {"0", "two", "1.5", "-4"}) {
    const std::string e = error_of([&] {
      parse_hardware_profile(fmt::format("name: x\ndevice: cpu\nmemory: {{cpu: 1G}}\n"
                                         "links: {{disk_to_cpu: 1G, cpu_to_disk: 1G, "
                                         "disk_to_cpu_kv_batches: {{'{}': 1G}}}}\n"
                                         "cpu_compute: {{gemm_tflops: 1, attention_tflops: 1}}\n",
                                         bad),
                             "hw.yaml");
    });
    EXPECT_CONTAINS(e, fmt::format("hw.yaml: links.disk_to_cpu_kv_batches: '{}' is not a number "
                                   "of requests",
                                   bad));
  }
}

TEST(PolicyHardwareYaml, WeightReadRatesBySize) {
  HardwareProfile hw = parse_hardware_profile(R"(
name: w
device: cpu
memory: {cpu: 1G, disk: 16G}
links: {disk_to_cpu: 3G, cpu_to_disk: 1G, disk_to_cpu_weights: {4M: 2G, 1M: 1G, 64M: 3G}}
cpu_compute: {gemm_tflops: 1, attention_tflops: 0.1}
)",
                                              "w.yaml");
  const double g = 1073741824.0;
  ASSERT_EQ(hw.disk_to_cpu_weights.size(), 3u);
  EXPECT_EQ(hw.disk_to_cpu_weights[0], std::make_pair(1048576.0, g));  // sorted by size
  EXPECT_EQ(hw.weight_read_rate(1 << 20), g);
  EXPECT_DOUBLE_EQ(hw.weight_read_rate(2 << 20), 1.5 * g);  // half way in log2 from 1M to 4M
  EXPECT_DOUBLE_EQ(hw.weight_read_rate(16 << 20), 2.5 * g);
  EXPECT_EQ(hw.weight_read_rate(1 << 10), g);
  EXPECT_EQ(hw.weight_read_rate(1 << 30), 3 * g);
  EXPECT_EQ(hw.kv_read_rate(1 << 20), 3 * g) << "KV reads have a table of their own";
  const HardwareProfile again = parse_hardware_profile(hardware_profile_to_yaml(hw), "again");
  EXPECT_EQ(again.disk_to_cpu_weights, hw.disk_to_cpu_weights);
  hw.disk_to_cpu_weights.clear();
  EXPECT_EQ(hw.weight_read_rate(1 << 20), hw.disk_to_cpu);

  const std::string e = error_of([] {
    parse_hardware_profile(
        "name: x\ndevice: cpu\nmemory: {cpu: 1G}\n"
        "links: {disk_to_cpu: 1G, cpu_to_disk: 1G, disk_to_cpu_weights: {1M: 0}}\n"
        "cpu_compute: {gemm_tflops: 1, attention_tflops: 1}\n",
        "hw.yaml");
  });
  EXPECT_CONTAINS(e, "hw.yaml: links.disk_to_cpu_weights");
}

TEST(PolicyHardwareYaml, DiskReadsBesideComputeAreOptional) {
  const std::string text =
      "name: b\ndevice: cpu\nmemory: {cpu: 1G, disk: 16G}\n"
      "links: {disk_to_cpu: 2G, cpu_to_disk: 1G, disk_to_cpu_weights: {1M: 1G, 64M: 2G}%s}\n"
      "cpu_compute: {gemm_tflops: 1, attention_tflops: 0.1}\n";
  const auto with = [&](const std::string& extra) {
    std::string t = text;
    t.replace(t.find("%s"), 2, extra);
    return t;
  };
  const HardwareProfile idle = parse_hardware_profile(with(""), "b.yaml");
  EXPECT_TRUE(idle.disk_to_cpu_beside_compute.empty());
  EXPECT_EQ(idle.disk_share_beside_compute(1 << 20), 1);
  const HardwareProfile hw = parse_hardware_profile(
      with(", disk_to_cpu_beside_compute: {64M: 1.5G, 1M: 0.25G}"), "b.yaml");
  const double g = 1073741824.0;
  ASSERT_EQ(hw.disk_to_cpu_beside_compute.size(), 2u);
  EXPECT_EQ(hw.disk_to_cpu_beside_compute[0], std::make_pair(1048576.0, 0.25 * g));  // sorted
  EXPECT_EQ(hw.disk_share_beside_compute(1 << 20), 0.25);
  EXPECT_EQ(hw.disk_share_beside_compute(64 << 20), 0.75);
  EXPECT_DOUBLE_EQ(hw.disk_share_beside_compute(8 << 20), 0.875 / 1.5);  // both half way in log2
  EXPECT_EQ(hw.disk_share_beside_compute(1 << 10), 0.25);                // the ends beyond them
  const HardwareProfile again = parse_hardware_profile(hardware_profile_to_yaml(hw), "again");
  EXPECT_EQ(again.disk_to_cpu_beside_compute, hw.disk_to_cpu_beside_compute);
  EXPECT_EQ(hardware_profile_to_yaml(idle).find("beside"), std::string::npos);
  const std::string e = error_of(
      [&] { parse_hardware_profile(with(", disk_to_cpu_beside_compute: {1M: -1G}"), "b.yaml"); });
  EXPECT_CONTAINS(e, "b.yaml: links.disk_to_cpu_beside_compute");
}

TEST(PolicyHardwareYaml, BadProfilesNameTheKey) {
  std::string e = error_of(
      [] { parse_hardware_profile(test::tiny_gpu_yaml("{gpu: lots, cpu: 4G}"), "hw.yaml"); });
  EXPECT_CONTAINS(e, "hw.yaml: memory.gpu: 'lots' is not a size");
  e = error_of([] {
    parse_hardware_profile(
        "name: x\nmemory: {gpu: 1G, cpu: 1G}\nlinks: {disk_to_cpu: 1G, cpu_to_disk: 1G}\n"
        "device_compute: {gemm_prefill_tflops: 1, gemm_decode_tflops: 1,"
        " attention_prefill_tflops: 1, attention_decode_tflops: 1}\n"
        "cpu_compute: {attention_tflops: 1}\n",
        "hw.yaml");
  });
  EXPECT_CONTAINS(e, "hw.yaml: links.cpu_to_gpu: missing");
  e = error_of([] { parse_hardware_profile("name: x\ndevice: tpu\n", "hw.yaml"); });
  EXPECT_CONTAINS(e, "hw.yaml: device: 'tpu' is not a compute device");
  e = error_of([] { find_hardware_profile("a100-imaginary"); });
  EXPECT_CONTAINS(e, "t4-flexgen");
}

TEST(PolicyModelPresets, AllLoadAndMatchPublishedParameterCounts) {
  EXPECT_GE(model_preset_names().size(), 15u);
  // Published totals. Our count leaves out norms, biases and OPT's learned
  // positions: under 0.5% of these models, except OPT-125M where the 2050
  // learned positions and the biases are 1.4%.
  struct Total {
    const char* name;
    double params;
    double rel;
  };
  const Total totals[] = {{"opt-125m", 125.2e6, 0.015},     {"opt-1.3b", 1.316e9, 0.005},
                          {"opt-6.7b", 6.658e9, 0.005},     {"opt-13b", 12.853e9, 0.005},
                          {"opt-30b", 29.975e9, 0.005},     {"opt-66b", 65.72e9, 0.005},
                          {"opt-175b", 175e9, 0.005},       {"llama-2-7b", 6.738e9, 0.005},
                          {"llama-2-13b", 13.016e9, 0.005}, {"llama-2-70b", 68.977e9, 0.005},
                          {"llama-3-8b", 8.030e9, 0.005},   {"llama-3-70b", 70.554e9, 0.005},
                          {"qwen2.5-7b", 7.616e9, 0.005},   {"qwen2.5-72b", 72.706e9, 0.005},
                          {"smollm2-135m", 134.5e6, 0.005}};
  for (const Total& t : totals) {
    const ModelShape s = find_model_preset(t.name);
    EXPECT_NEAR(static_cast<double>(s.n_params()), t.params, t.rel * t.params) << t.name;
  }
  EXPECT_EQ(find_model_preset("facebook/OPT-30B").name, "opt-30b");
  EXPECT_EQ(find_model_preset("Qwen/Qwen2.5-7B-Instruct").n_kv_head, 4);
  EXPECT_CONTAINS(error_of([] { find_model_preset("gpt-5"); }), "opt-175b");
}

TEST(PolicyModelShapeYaml, BadShapesNameTheKey) {
  std::string e = error_of([] {
    parse_model_shape(
        "name: x\nn_layer: 2\nhidden: 64\nn_head: 4\nn_kv_head: 3\nn_ff: 8\nvocab: 10\n"
        "gated_ffn: true\ntied_embeddings: true\n",
        "m.yaml");
  });
  EXPECT_CONTAINS(e, "m.yaml: n_kv_head: 3 does not divide n_head 4");
  e = error_of([] { parse_model_shape("name: x\nn_layer: 0\n", "m.yaml"); });
  EXPECT_CONTAINS(e, "m.yaml: n_layer: 0 is below the smallest allowed value 1");
  e = error_of([] {
    parse_model_shape(
        "name: x\nn_layer: 2\nhidden: 64\nn_head: 4\nn_ff: 8\nvocab: 10\n"
        "gated_ffn: true\ntied_embeddings: true\nweight_dtype: f12\n",
        "m.yaml");
  });
  EXPECT_CONTAINS(e, "m.yaml: weight_dtype: 'f12' is not a dtype");
}

TEST(PolicyCheckedIn, LoadAndMatchFlexGensFlags) {
  const std::string dir = STRATA_POLICIES_DIR;
  const Policy p67 = load_policy(dir + "/flexgen-opt-6.7b-t4.yaml");
  EXPECT_EQ(p67.gpu_batch_size, 2);
  EXPECT_EQ(p67.num_gpu_batches, 1);
  EXPECT_EQ(p67.placement, (Placement{{1, 0, 1, 0, 1, 0}}));
  const Policy p30 = load_policy(dir + "/flexgen-opt-30b-t4.yaml");
  EXPECT_EQ(p30.gpu_batch_size, 48);
  EXPECT_EQ(p30.num_gpu_batches, 3);
  EXPECT_EQ(p30.placement, (Placement{{0.2, 0.8, 0, 1, 0, 1}}));
  EXPECT_TRUE(p30.cpu_attention);
}

}  // namespace
}  // namespace strata
