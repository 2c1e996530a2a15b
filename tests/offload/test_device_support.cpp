// What runs on a device (offload/device_support.h): capabilities by name and
// of a backend, the memory mode, and that the shares a device pins for the
// search are exactly what its placement check accepts.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_backend.h"
#include "offload/device_support.h"

namespace strata {
namespace {

TEST(DeviceSupport, CapabilitiesByNameMatchTheBackends) {
  CpuBackend cpu(1);
  SeparateMemoryBackend separate(1, uint64_t{1} << 30);
  const DeviceCaps by_name_cpu = device_caps("cpu"), of_cpu = device_caps(cpu);
  EXPECT_TRUE(by_name_cpu.memory_is_host && of_cpu.memory_is_host);
  EXPECT_TRUE(by_name_cpu.int8_matmul && of_cpu.int8_matmul);
  EXPECT_TRUE(by_name_cpu.quantized_kv && of_cpu.quantized_kv);
  // The separate-memory backend stands in for a GPU: what CUDA runs.
  const DeviceCaps by_name_gpu = device_caps("cuda:1"), of_separate = device_caps(separate);
  for (const DeviceCaps& c : {by_name_gpu, of_separate}) {
    EXPECT_FALSE(c.memory_is_host);
    EXPECT_FALSE(c.int8_matmul);
    EXPECT_FALSE(c.quantized_kv);
  }
  EXPECT_THROW(device_caps("tpu"), Error);
  EXPECT_EQ(memory_mode(by_name_cpu, true), MemoryMode::kHostMemory);
  EXPECT_EQ(memory_mode(by_name_gpu, false), MemoryMode::kDeviceMemory);
  EXPECT_EQ(memory_mode(by_name_gpu, true), MemoryMode::kCpuAttention);
  EXPECT_THROW(check_dtypes(by_name_gpu, DType::kI8, DType::kF16), Error);
  EXPECT_THROW(check_dtypes(by_name_gpu, DType::kF32, DType::kQ4A32), Error);
  EXPECT_NO_THROW(check_dtypes(by_name_cpu, DType::kI8, DType::kQ4A32));
}

// Random placements: one that has the pinned shares is accepted, and every
// refusal breaks a pin (or puts activations on disk, which no device runs).
TEST(DeviceSupport, PinsAreWhatThePlacementCheckAccepts) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> q(0, 4);
  for (const bool host : {true, false}) {
    for (const bool cpu_attention : {false, true}) {
      DeviceCaps caps = device_caps(host ? "cpu" : "cuda");
      const PlacementPins pins = runnable_pins(caps, cpu_attention);
      for (int trial = 0; trial < 500; ++trial) {
        Placement p;
        for (int k = 0; k < kNumDataKinds; ++k) {
          const double g = q(rng) / 4.0;
          p.set(static_cast<DataKind>(k), g, (q(rng) % (5 - static_cast<int>(4 * g))) / 4.0);
        }
        const Placement folded = p.folded(caps.memory_is_host);
        bool pinned = true;
        for (size_t i = 0; i < kNumShares; ++i) {
          if (pins[i] && folded.share[i] != *pins[i]) pinned = false;
        }
        const bool act_on_disk = folded.disk(DataKind::kAct) > 0;
        bool accepted = true;
        try {
          check_placement(caps, folded, cpu_attention);
        } catch (const Error&) {
          accepted = false;
        }
        EXPECT_EQ(accepted, pinned && !act_on_disk)
            << "host " << host << " cpu attention " << cpu_attention << ": " << p.describe();
      }
    }
  }
}

}  // namespace
}  // namespace strata
