// Small shapes and machines for the policy tests, with round numbers so that
// expected times and sizes can be written out by hand in the tests.
#pragma once

#include <string>

#include "policy/hardware.h"
#include "policy/model_shape.h"

namespace strata::test {

// 2 layers, hidden 64, 4 query heads and 2 KV heads of 16, gated FFN 128,
// vocab 100, untied head, f16: 36864 weights per layer.
inline ModelShape tiny_shape() {
  return parse_model_shape(R"(
name: tiny
n_layer: 2
hidden: 64
n_head: 4
n_kv_head: 2
head_dim: 16
n_ff: 128
vocab: 100
gated_ffn: true
tied_embeddings: false
weight_dtype: f16
)",
                           "tiny");
}

// A GPU machine with slow, distinct links (bytes/s) and rates (FLOP/s).
inline std::string tiny_gpu_yaml(const std::string& memory = "{gpu: 1G, cpu: 4G, disk: 16G}") {
  return R"(
name: tiny-gpu
device: gpu
memory: )" +
         memory + R"(
links: {disk_to_cpu: 100, cpu_to_disk: 50, cpu_to_gpu: 1000, gpu_to_cpu: 500,
        gpu_to_cpu_kv: 250, cpu_to_disk_kv: 25}
device_compute: {gemm_prefill_tflops: 1e-6, gemm_decode_tflops: 1e-7,
                 attention_prefill_tflops: 2e-6, attention_decode_tflops: 1e-8}
cpu_compute: {attention_tflops: 1e-9}
)";
}

inline HardwareProfile tiny_gpu(const std::string& memory = "{gpu: 1G, cpu: 4G, disk: 16G}") {
  return parse_hardware_profile(tiny_gpu_yaml(memory), "tiny-gpu");
}

// A machine whose compute device is its CPU: the gpu tier is the RAM.
inline HardwareProfile tiny_cpu() {
  return parse_hardware_profile(R"(
name: tiny-cpu
device: cpu
memory: {cpu: 1G, disk: 16G}
links: {disk_to_cpu: 100, cpu_to_disk: 50}
cpu_compute: {gemm_tflops: 1e-6, attention_tflops: 1e-8}
)",
                                "tiny-cpu");
}

}  // namespace strata::test
