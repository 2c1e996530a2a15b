// The engine's compute measured on this machine (plan/compute_profile.h):
// every point of the tables on a fixture model, the weights in the format
// the engine holds (requantized when asked), the cache, and the run plan
// predicting with it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"
#include "model/model.h"
#include "plan/compute_profile.h"
#include "plan/machine_profile.h"
#include "plan/run_plan.h"
#include "policy/hardware.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Model> fixture() {
  return Model::open(std::string(STRATA_TEST_DATA) + "/models/llama");
}

TimingPlan quick() {
  TimingPlan t;
  t.warmup = 0;
  t.min_reps = 1;
  t.min_seconds = 0;
  return t;
}

EngineOptions options(DType compute, DType kv) {
  EngineOptions eo;
  eo.compute_dtype = compute;
  eo.kv_dtype = kv;
  eo.threads = 1;
  return eo;
}

// A cache directory of the test's own (tests run in parallel processes).
struct CacheDir {
  fs::path dir = fs::temp_directory_path() /
                 fmt::format("strata-test-compute-cache-{}-{}", ::getpid(),
                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
  CacheDir() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  }
  ~CacheDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().filename().string().rfind("compute-", 0) == 0) {
        out.push_back(e.path());
      }
    }
    return out;
  }
};

// Measurements the suite makes (a run plan with a CPU profile measures the
// engine's compute) are cached in the build tree, never in the user's home.
TEST(ComputeProfile, TheSuiteCachesInsideTheBuildTree) {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  ASSERT_NE(cache, nullptr) << "ctest sets XDG_CACHE_HOME (tests/CMakeLists.txt)";
  EXPECT_EQ(fs::path(cache).filename(), "test-cache") << cache;
}

TEST(ComputeProfile, MeasuresEveryPointOfTheTables) {
  const auto model = fixture();
  const EngineOptions eo = options(DType::kF32, DType::kF32);
  const EngineCompute c = measure_engine_compute(*model, eo, quick());
  EXPECT_NO_THROW(c.validate("measured"));
  EXPECT_EQ(c.decode_rows,
            (std::vector<double>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}));
  EXPECT_EQ(c.head_rows, c.decode_rows);
  // Out of the caches never faster than in them (the model's other layers
  // ran before each cold run: the fixture's are all in the caches anyway).
  ASSERT_EQ(c.decode_layer_cold_s.size(), c.decode_rows.size());
  ASSERT_EQ(c.head_cold_s.size(), c.head_rows.size());
  for (size_t i = 0; i < c.decode_rows.size(); ++i) {
    EXPECT_GE(c.decode_layer_cold_s[i], c.decode_layer_s[i]) << c.decode_rows[i];
    EXPECT_GE(c.head_cold_s[i], c.head_s[i]) << c.head_rows[i];
  }
  EXPECT_EQ(c.prefill_tokens, (std::vector<double>{16, 32, 64, 128, 256, 512, 1024}));
  EXPECT_EQ(c.decode_ctx, 16);
  EXPECT_EQ(c.prefill_seq, 16);
  EXPECT_EQ(c.key, engine_compute_key(*model, eo));
  EXPECT_NE(c.key.find("compute f32 kv f32 threads 1"), std::string::npos) << c.key;
  // Without a directory to read from, nothing beside a weight load.
  EXPECT_TRUE(c.decode_layer_streamed_s.empty());
}

TEST(ComputeProfile, TheKeyNamesTheFormatTheEngineHoldsTheWeightsIn) {
  const auto model = fixture();
  EngineOptions eo = options(DType::kBF16, DType::kBF16);
  const std::string source = engine_compute_key(*model, eo);
  eo.weight_dtype = DType::kQ8S32;
  const std::string requantized = engine_compute_key(*model, eo);
  EXPECT_NE(source, requantized);
  EXPECT_NE(requantized.find(std::string(dtype_name(DType::kQ8S32))), std::string::npos)
      << requantized;
  // The requantized matrices are measured (random, in that format).
  const EngineCompute c = measure_engine_compute(*model, eo, quick());
  EXPECT_EQ(c.key, requantized);
  EXPECT_NO_THROW(c.validate("measured"));
}

TEST(ComputeProfile, MeasuredOnceThenReadFromTheCacheAndRemeasuredWhenUnreadable) {
  const CacheDir cache;
  const auto model = fixture();
  const EngineOptions eo = options(DType::kF32, DType::kF16);
  const std::string offload = (cache.dir / "offload").string();
  const EngineCompute first = engine_compute_for(*model, eo, offload);
  ASSERT_EQ(cache.files().size(), 1u);
  // Decode beside a layer's weight load read from the offload directory,
  // never faster than without it; the file it read is gone.
  ASSERT_EQ(first.decode_layer_streamed_s.size(), first.decode_rows.size());
  for (size_t i = 0; i < first.decode_rows.size(); ++i) {
    EXPECT_GE(first.decode_layer_streamed_s[i], first.decode_layer_cold_s[i]);
  }
  for (const auto& f : fs::directory_iterator(offload)) {
    EXPECT_EQ(f.path().filename().string().find(".strata-compute"), std::string::npos) << f.path();
  }
  const EngineCompute again = engine_compute_for(*model, eo, offload);
  EXPECT_EQ(again.decode_layer_s, first.decode_layer_s) << "not read from the cache";
  EXPECT_EQ(again.prefill_layer_s, first.prefill_layer_s);
  EXPECT_EQ(again.head_s, first.head_s);

  std::ofstream(cache.files()[0]) << "{\"key\": 3";
  const EngineCompute remeasured = engine_compute_for(*model, eo, offload);
  EXPECT_NO_THROW(remeasured.validate("remeasured"));
  ASSERT_EQ(cache.files().size(), 1u);
  std::ifstream in(cache.files()[0]);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NO_THROW(engine_compute_from_json(nlohmann::json::parse(text), "cache")) << text;
}

TEST(ComputeProfile, APlanForTheCpuDevicePredictsWithTheMeasuredCompute) {
  const CacheDir cache;
  const auto model = fixture();
  PlanRequest r;
  r.offload_dir = (cache.dir / "offload").string();
  r.hardware = std::string(STRATA_POLICIES_DIR) + "/hardware/t4-flexgen.yaml";
  EngineOptions eo = options(DType::kF32, DType::kF32);
  RunShape run;
  run.max_prompt = 8;
  run.mean_prompt = 8;
  run.gen = 4;
  // A GPU profile for the CPU device predicts with rates, measures nothing.
  const RunPlan gpu_profile = resolve_plan(r, *model, run, eo);
  EXPECT_FALSE(gpu_profile.compute.has_value());
  EXPECT_TRUE(cache.files().empty());

  // A CPU profile: the engine's compute is measured and predicts.
  const fs::path cpu_yaml = cache.dir / "cpu.yaml";
  std::ofstream(cpu_yaml) << R"(name: test-cpu
device: cpu
memory: {cpu: 8G, disk: 100G}
links: {disk_to_cpu: 1G, cpu_to_disk: 1G}
cpu_compute: {gemm_tflops: 0.1, attention_tflops: 0.01}
)";
  r.hardware = cpu_yaml.string();
  const RunPlan plan = resolve_plan(r, *model, run, eo);
  ASSERT_TRUE(plan.compute.has_value());
  EXPECT_EQ(cache.files().size(), 1u);
  const auto predicted = plan.predict(*model, 8, 4);
  ASSERT_TRUE(predicted.has_value());
  EXPECT_TRUE(predicted->decode_layer_terms.count("layer")) << "the measured term";
  EXPECT_FALSE(predicted->decode_layer_terms.count("gemm"));
  EXPECT_EQ(predicted->workload["compute"], "the engine's, measured on this machine");
}

}  // namespace
}  // namespace strata
