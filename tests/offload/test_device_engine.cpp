// The engine on a device whose memory is not host memory, run on this
// machine with SeparateMemoryBackend (kernels/cpu/separate_memory_backend.h):
// the CPU's kernels behind device memory the host cannot touch outside the
// backend's calls, with every op's pointers checked to be device memory. So
// the discrete-device paths — the gpu share of the weights copied to the
// device once, the cpu share kept in RAM and the disk share read into host
// staging, both streamed into device staging per column; KV pages in device
// memory and on disk (relayed through host memory); activations, page tables
// and micro-batch arrays on the device; logits copied back — run here, and
// their results must equal the CPU device's all-in-RAM run bit for bit (the
// same kernels on the same bytes), for every fixture model and a grid of
// placements and micro-batch shapes. Also: the bytes each link carries, the
// placements this engine refuses on such a device, and budgets of device
// memory. The guard itself is tested first: a host access to device memory
// faults, a host pointer handed to an op is an Error.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/separate_memory_backend.h"
#include "model/model.h"
#include "offload/device.h"
#include "offload/fixture_runs.h"
#include "offload/offload_engine.h"
#include "offload/weight_placement.h"

namespace strata {
namespace {

using namespace fixture_runs;

// ---- the guard ----

TEST(SeparateMemory, CopiesRoundTripAndMemoryIsReused) {
  SeparateMemoryBackend be(1);
  std::vector<float> host(1000), back(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  {
    DeviceBuffer a = be.alloc(host.size() * sizeof(float));
    DeviceBuffer b = be.alloc(host.size() * sizeof(float));
    EXPECT_TRUE(be.in_device_range(a.data()));
    EXPECT_FALSE(be.in_device_range(host.data()));
    be.copy_to_device(a.data(), host.data(), host.size() * sizeof(float));
    be.copy(b.data(), a.data(), host.size() * sizeof(float));
    be.copy_to_host(back.data(), b.data(), back.size() * sizeof(float));
    EXPECT_EQ(back, host);
    EXPECT_EQ(be.live_bytes(), 2 * 4096u);  // 4000 bytes each, in 256-byte units
  }
  EXPECT_EQ(be.live_bytes(), 0u);
  DeviceBuffer c = be.alloc(8000);  // fits the two freed, coalesced ranges
  EXPECT_EQ(be.peak_bytes(), 2 * 4096u);
}

TEST(SeparateMemory, HostPointersHandedToOpsAreErrors) {
  SeparateMemoryBackend be(1);
  DeviceBuffer y = be.alloc(4 * sizeof(float));
  DeviceBuffer x = be.alloc(4 * sizeof(float));
  std::vector<float> w_host(16, 1.0f);
  MatrixView w{w_host.data(), DType::kF32, 4, 4, 4 * sizeof(float)};
  try {
    be.matmul(y.as<float>(), 4, x.as<float>(), 4, w, nullptr, 1, DType::kF32);
    FAIL() << "a weight in host memory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul: w"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is not device memory"), std::string::npos) << e.what();
  }
  // Past the end of an allocation.
  EXPECT_THROW(be.fill_zero(x.data(), 4097), Error);
  // A device pointer where a host buffer belongs.
  EXPECT_THROW(be.copy_to_device(y.data(), x.data(), 16), Error);
}

TEST(SeparateMemoryDeathTest, HostReadOfDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SeparateMemoryBackend be(1);
        DeviceBuffer a = be.alloc(64);
        be.fill_zero(a.data(), 64);
        volatile const char* p = a.as<const char>();
        std::printf("%d\n", p[0]);  // outside any call of the backend
      },
      "");
}

// ---- the engine ----

ComputeDevice separate_device(uint64_t reserve = uint64_t{8} << 30) {
  ComputeDevice d;
  d.backend = std::make_unique<SeparateMemoryBackend>(2, reserve);
  d.host_allocator = make_host_allocator();
  d.default_device_bytes = uint64_t{1} << 30;
  return d;
}

EngineOptions options(const Fixture& f, int64_t g, int64_t k, const fs::path& dir) {
  return fixture_options(f, g, k, dir);
}

struct Split {
  double w_gpu, w_cpu, kv_gpu;  // disk holds the rest; activations on the device
};

EngineOptions placed(EngineOptions o, const Split& s) {
  o.placement.set(DataKind::kWeights, s.w_gpu, s.w_cpu);
  o.placement.set(DataKind::kKv, s.kv_gpu, 0);
  o.placement.set(DataKind::kAct, 1, 0);
  return o;
}

// Bytes a block of `n_steps` steps moves into device staging: every
// column's cpu share and its disk tail (the disk tail crosses disk->cpu and
// cpu->gpu) once per step, the head's being the embeddings' when tied; then
// the next step's embed column computes from the head's load.
struct StepBytes {
  uint64_t cpu_to_gpu = 0, disk = 0;
};
StepBytes streamed_per_block(const Fixture& f, const Split& s, int64_t n_steps) {
  Placement fr;
  fr.set(DataKind::kWeights, s.w_gpu, s.w_cpu);
  const WeightPlacement wp = place_weights(f.model->desc(), PackOptions{}, fr);
  StepBytes b;
  auto add = [&](const std::string& unit, int64_t times) {
    const UnitPlacement* u = wp.find(unit);
    if (u == nullptr) return;
    const uint64_t disk = (u->disk_read_bytes + 4095) / 4096 * 4096;
    const auto n = static_cast<uint64_t>(times);
    b.cpu_to_gpu += (u->matrix_bytes[static_cast<size_t>(Tier::kCpu)] + disk) * n;
    b.disk += disk * n;
  };
  const bool tied = f.model->config().tie_embeddings;
  add("embed", tied ? n_steps + 1 : n_steps);
  for (int64_t l = 0; l < f.model->config().n_layer; ++l) add("blk." + std::to_string(l), n_steps);
  if (!tied) add("output", n_steps);
  return b;
}

class DeviceGrid : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceGrid, EveryPlacementGivesTheBitsOfTheCpuAllInRamRun) {
  const Fixture f = load(GetParam());
  TempDir dir("device-grid");
  for (const auto& [g, k] : {std::pair<int64_t, int64_t>{1, 1}, {2, 3}, {4, 2}}) {
    auto ref_engine = make_engine(*f.model, options(f, g, k, dir.path));
    const GenRun ref = generate(*ref_engine, f.prompts);
    for (const Split& s :
         {Split{1, 0, 1}, Split{0, 1, 1}, Split{0.3, 0.4, 0.5}, Split{0, 0, 0}, Split{0.5, 0, 1}}) {
      const std::string what = f.name + " " + std::to_string(g) + "x" + std::to_string(k) +
                               " weights gpu/cpu " + std::to_string(s.w_gpu) + "/" +
                               std::to_string(s.w_cpu) + ", KV gpu " + std::to_string(s.kv_gpu);
      auto e = make_engine(*f.model, placed(options(f, g, k, dir.path), s), separate_device());
      const GenRun r = generate(*e, f.prompts);
      expect_same_bits(ref, r, what);
      if (::testing::Test::HasFatalFailure()) return;
      const int64_t n_blocks =
          (static_cast<int64_t>(f.prompts.size()) + e->block_size() - 1) / e->block_size();
      const StepBytes per = streamed_per_block(f, s, kNewTokens);
      const auto blocks = static_cast<uint64_t>(n_blocks);
      if (s.kv_gpu == 1) {
        EXPECT_EQ(link_bytes(r.stats, "cpu->gpu"), blocks * per.cpu_to_gpu) << what;
        EXPECT_EQ(link_bytes(r.stats, "disk->cpu"), blocks * per.disk) << what;
        EXPECT_EQ(link_bytes(r.stats, "gpu->cpu"), 0u) << what;
      } else {
        // KV pages on disk: written as they fill (gpu->cpu->disk), read
        // back in decode (disk->cpu->gpu).
        EXPECT_GT(link_bytes(r.stats, "cpu->gpu"), blocks * per.cpu_to_gpu) << what;
        EXPECT_GT(link_bytes(r.stats, "gpu->cpu"), 0u) << what;
        EXPECT_EQ(link_bytes(r.stats, "gpu->cpu"), link_bytes(r.stats, "cpu->disk")) << what;
      }
      EXPECT_GT(r.stats.peak_bytes.at("gpu"), 0u) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeviceGrid,
                         ::testing::Values("opt", "llama", "qwen2", "llama-gguf", "kquant-q4_k_m"),
                         fixture_param_name);

TEST(DeviceEngine, ScoringAndBf16ComputeEqualTheCpuDevice) {
  const Fixture f = load("qwen2");
  TempDir dir("device-score");
  EngineOptions o = options(f, 1, 1, dir.path);
  auto ref = make_engine(*f.model, o);
  auto e = make_engine(*f.model, placed(o, {0.2, 0.3, 0.5}), separate_device());
  EXPECT_EQ(e->score(f.prompts[7]), ref->score(f.prompts[7]));

  o.compute_dtype = DType::kBF16;
  o.kv_dtype = DType::kF16;
  o.gpu_batch_size = 2;
  o.num_gpu_batches = 2;
  auto ref16 = make_engine(*f.model, o);
  auto e16 = make_engine(*f.model, placed(o, {0.5, 0.5, 1}), separate_device());
  const GenRun a = generate(*ref16, f.prompts), b = generate(*e16, f.prompts);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logits, b.logits);
}

TEST(DeviceEngine, RequantizedWeightsAndF16KvRunFromDeviceMemory) {
  // Weights requantized into the pack (q4, read from its mapping and from
  // disk) and f16 KV pages, on the device and on disk. (The fixtures'
  // head_dim of 16 takes no quantized KV group.)
  const Fixture f = load("llama");
  TempDir dir("device-quant");
  EngineOptions o = options(f, 2, 2, dir.path);
  o.weight_dtype = DType::kQ4A32;
  o.kv_dtype = DType::kF16;
  auto ref = make_engine(*f.model, o);
  auto e = make_engine(*f.model, placed(o, {0.3, 0.3, 0.5}), separate_device());
  const GenRun a = generate(*ref, f.prompts), b = generate(*e, f.prompts);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logits, b.logits);
}

// Speculative decoding on the device: the same drafts give the CPU
// device's bits, with the KV cache in device memory and with it in RAM
// under --cpu-attention (several rows per sequence through both paths).
TEST(DeviceEngine, SpeculativeStepsGiveTheCpuBits) {
  const Fixture f = load("llama");
  TempDir dir("device-speculative");
  EngineOptions o = options(f, 3, 2, dir.path);
  const GenRun plain = generate(*make_engine(*f.model, o), f.prompts);
  const DraftFn draft = continuation_drafts(plain, f.model->config().n_vocab);
  o.max_draft_tokens = 3;
  const GenRun ref = generate_speculative(*make_engine(*f.model, o), f.prompts, draft);
  EXPECT_EQ(ref.tokens, plain.tokens);
  EXPECT_GT(ref.stats.accepted_tokens, 0);
  EngineOptions on_device = placed(o, {0.3, 0.4, 1});
  const GenRun a =
      generate_speculative(*make_engine(*f.model, on_device, separate_device()), f.prompts, draft);
  expect_same_bits(ref, a, "KV in device memory");
  EngineOptions cpu_attn = placed(o, {0.3, 0.4, 0});
  cpu_attn.placement[Share::kKvCpu] = 1;
  cpu_attn.cpu_attention = true;
  const GenRun b =
      generate_speculative(*make_engine(*f.model, cpu_attn, separate_device()), f.prompts, draft);
  expect_same_bits(ref, b, "CPU attention");
}

// Prefix sharing on the device: the CPU device's bits with sharing (and
// the tokens without), with the KV cache in device memory and in RAM (half
// on disk) under --cpu-attention (the shared pages attended through both
// paths).
TEST(DeviceEngine, PrefixSharingGivesTheCpuBits) {
  const Fixture f = load("llama");
  TempDir dir("device-prefix");
  const std::vector<std::vector<int32_t>> prompts = sharing_prompts(f);
  EngineOptions o = options(f, 3, 3, dir.path);
  o.prefix_sharing = false;
  const GenRun plain = generate(*make_engine(*f.model, o), prompts);
  o.prefix_sharing = true;
  const GenRun ref = generate(*make_engine(*f.model, o), prompts);
  EXPECT_EQ(ref.tokens, plain.tokens);
  EngineOptions on_device = placed(o, {0.3, 0.4, 1});
  const GenRun a = generate(*make_engine(*f.model, on_device, separate_device()), prompts);
  expect_same_bits(ref, a, "KV in device memory");
  EXPECT_GT(a.stats.reused_prompt_tokens, 0);
  EngineOptions cpu_attn = placed(o, {0.3, 0.4, 0});
  cpu_attn.placement[Share::kKvCpu] = 0.5;
  cpu_attn.cpu_attention = true;
  const GenRun b = generate(*make_engine(*f.model, cpu_attn, separate_device()), prompts);
  expect_same_bits(ref, b, "CPU attention");
  EXPECT_GT(b.stats.reused_prompt_tokens, 0);
}

// --cpu-attention: the KV cache in RAM (and on disk), each layer's KV append
// and attention on the CPU (on the attention queue's thread, pipelined over
// the micro-batches of a layer) between the device's projections; the CPU
// device's bits again.
TEST(DeviceEngine, CpuAttentionOverRamAndDiskKvGivesTheCpuBits) {
  for (const std::string name : {"opt", "llama"}) {
    const Fixture f = load(name);
    TempDir dir("device-cpu-attn");
    for (const auto& [g, k] : {std::pair<int64_t, int64_t>{1, 1}, {2, 3}, {1, 4}}) {
      auto ref = make_engine(*f.model, options(f, g, k, dir.path));
      const GenRun a = generate(*ref, f.prompts);
      for (double kv_cpu : {1.0, 0.5}) {
        EngineOptions o = placed(options(f, g, k, dir.path), {0.3, 0.4, 0});
        o.placement[Share::kKvCpu] = kv_cpu;
        o.cpu_attention = true;
        auto e = make_engine(*f.model, o, separate_device());
        const GenRun b = generate(*e, f.prompts);
        const std::string what = name + " " + std::to_string(g) + "x" + std::to_string(k) +
                                 " KV cpu " + std::to_string(kv_cpu);
        EXPECT_EQ(a.tokens, b.tokens) << what;
        EXPECT_EQ(a.logits, b.logits) << what;
        // q/k/v rows go down and attention rows come up every layer: per
        // token and layer (q + 2 kv) and q floats.
        const ModelConfig& c = f.model->config();
        int64_t tokens = 0;  // every token that went through the layers
        for (size_t q = 0; q < f.prompts.size(); ++q) {
          tokens += static_cast<int64_t>(f.prompts[q].size()) + kNewTokens - 1;
        }
        const uint64_t qd = static_cast<uint64_t>(c.n_head * c.head_dim),
                       kvd = static_cast<uint64_t>(c.n_kv_head * c.head_dim);
        const uint64_t per_layer_token = (qd + 2 * kvd) * sizeof(float);
        if (kv_cpu == 1) {
          EXPECT_EQ(link_bytes(b.stats, "gpu->cpu"),
                    static_cast<uint64_t>(tokens * c.n_layer) * per_layer_token)
              << what;
        } else {
          EXPECT_GT(link_bytes(b.stats, "cpu->disk"), 0u) << what;
        }
      }
    }
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceEngine, PlacementsThisEngineDoesNotRunOnADeviceAreRefusedByName) {
  const Fixture f = load("llama");
  TempDir dir("device-refuse");
  const EngineOptions base = placed(options(f, 1, 1, dir.path), {1, 0, 1});
  EngineOptions kv_cpu = base;
  kv_cpu.placement.set(DataKind::kKv, 0.5, 0.5);
  std::string m = error_of([&] { make_engine(*f.model, kv_cpu, separate_device()); });
  EXPECT_NE(m.find("50% of the KV cache in CPU RAM"), std::string::npos) << m;
  EXPECT_NE(m.find("add --cpu-attention"), std::string::npos) << m;

  EngineOptions act_cpu = base;
  act_cpu.placement.set(DataKind::kAct, 0, 1);
  m = error_of([&] { make_engine(*f.model, act_cpu, separate_device()); });
  EXPECT_NE(m.find("activations in CPU RAM"), std::string::npos) << m;

  EngineOptions cpu_attn = base;  // KV on the device
  cpu_attn.cpu_attention = true;
  m = error_of([&] { make_engine(*f.model, cpu_attn, separate_device()); });
  EXPECT_NE(m.find("--cpu-attention runs attention on the CPU"), std::string::npos) << m;
  EXPECT_NE(m.find("KV_GPU 0"), std::string::npos) << m;
}

TEST(DeviceEngine, DeviceBudgetsTooSmallFailBeforeAnyWorkNamingGpuMem) {
  const Fixture f = load("llama");
  TempDir dir("device-budget");
  // The weights alone do not fit.
  EngineOptions o = placed(options(f, 2, 2, dir.path), {1, 0, 1});
  o.gpu_mem = 4096;
  std::string m = error_of([&] { make_engine(*f.model, o, separate_device()); });
  EXPECT_NE(m.find("--gpu-mem"), std::string::npos) << m;
  EXPECT_NE(m.find("the weights need"), std::string::npos) << m;

  // The weights fit, a planned block does not.
  o = placed(options(f, 4, 2, dir.path), {1, 0, 1});
  uint64_t weights = 0;
  for (const TensorInfo& t : f.model->desc().tensors) weights += t.nbytes;
  o.gpu_mem = weights + (uint64_t{1} << 20);
  o.plan_prompt_tokens = 2000;
  o.plan_new_tokens = 40;
  m = error_of([&] { make_engine(*f.model, o, separate_device()); });
  EXPECT_NE(m.find("device memory budget"), std::string::npos) << m;
  EXPECT_NE(m.find("--gpu-mem"), std::string::npos) << m;
}

TEST(DeviceEngine, UnknownAndUnavailableDevicesAreOneLineErrors) {
  const Fixture f = load("llama");
  EngineOptions o;
  o.device = "tpu";
  std::string m = error_of([&] { make_engine(*f.model, o); });
  EXPECT_NE(m.find("device tpu is not known"), std::string::npos) << m;
  o.device = "cuda:x";
  m = error_of([&] { make_engine(*f.model, o); });
  EXPECT_NE(m.find("device cuda:x is not known"), std::string::npos) << m;
  // int8 compute and quantized KV are refused on a GPU before it is opened.
  o.device = "cuda";
  o.compute_dtype = DType::kI8;
  m = error_of([&] { make_engine(*f.model, o); });
  EXPECT_NE(m.find("int8 runs on the CPU only"), std::string::npos) << m;
  o.compute_dtype = DType::kF32;
  o.kv_dtype = DType::kQ4A32;
  m = error_of([&] { make_engine(*f.model, o); });
  EXPECT_NE(m.find("read by the CPU kernels only"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

}  // namespace
}  // namespace strata
