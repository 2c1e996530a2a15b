// Placement (offload/weight_placement.h, kv/kv_cache.h): weight cuts at tensor boundaries that
// hold the fractions within half a tensor for every prefix of the model, disk
// shares that are tails of units, and KV page homes whose counts are exact.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "model/model.h"
#include "kv/kv_cache.h"
#include "offload/weight_placement.h"

namespace strata {
namespace {

std::unique_ptr<Model> fixture(const std::string& name) {
  return Model::open(std::string(STRATA_TEST_DATA) + "/models/" + name);
}

Placement weights(double gpu, double cpu) {
  Placement f;
  f.set(DataKind::kWeights, gpu, cpu);
  return f;
}

TEST(Placement, WeightCutsFollowTheFractionsWithinHalfATensor) {
  for (const char* name : {"opt", "llama", "qwen2", "llama-gguf/tiny-llama.gguf"}) {
    const auto model = fixture(name);
    for (const auto& [g, c] : {std::pair{0.0, 1.0}, {0.0, 0.5}, {0.0, 0.0}, {0.3, 0.3},
                               {1.0, 0.0}, {0.0, 0.25}, {0.5, 0.5}}) {
      const WeightPlacement wp = place_weights(model->desc(), PackOptions{}, weights(g, c));
      double seen = 0, on[3] = {0, 0, 0}, largest = 0;
      for (const UnitPlacement& u : wp.units) {
        ASSERT_LE(u.first_matrix, u.first_cpu) << u.name;
        ASSERT_LE(u.first_cpu, u.first_disk) << u.name;
        ASSERT_LE(u.first_disk, u.n_tensors) << u.name;
        for (int t = 0; t < 3; ++t) on[t] += static_cast<double>(u.matrix_bytes[static_cast<size_t>(t)]);
        const double unit = static_cast<double>(u.matrix_bytes[0] + u.matrix_bytes[1] + u.matrix_bytes[2]);
        seen += unit;
        largest = std::max(largest, unit);
        EXPECT_EQ(u.on_disk(), u.matrix_bytes[2] > 0) << u.name;
        EXPECT_EQ(u.disk_read_bytes == 0, !u.on_disk()) << u.name;
        // Every prefix holds the disk fraction within half of the largest
        // tensor seen (a unit's cut can move by one tensor at most).
        EXPECT_LE(std::fabs(on[2] - (1 - g - c) * seen), 0.5 * largest + 1)
            << name << " " << u.name << " at gpu " << g << " cpu " << c;
      }
      EXPECT_EQ(wp.bytes(Tier::kDisk), static_cast<uint64_t>(on[2]));
      if (g + c >= 1) {
        EXPECT_FALSE(wp.any_on_disk()) << name;
      }
      if (g + c == 0) {
        // Everything but the vectors on disk.
        EXPECT_EQ(wp.bytes(Tier::kGpu) + wp.bytes(Tier::kCpu), 0u) << name;
      }
    }
  }
}

TEST(Placement, DiskShareIsTheTailOfEachUnitInPackOrder) {
  const auto model = fixture("llama");
  const WeightPlacement wp = place_weights(model->desc(), PackOptions{}, weights(0, 0.5));
  const std::vector<PackLayoutUnit> layout = pack_layout(model->desc());
  ASSERT_EQ(layout.size(), wp.units.size());
  bool some_partial = false;
  for (size_t i = 0; i < layout.size(); ++i) {
    const UnitPlacement& u = wp.units[i];
    ASSERT_EQ(u.name, layout[i].name);
    // Vectors first, always resident.
    for (size_t k = 0; k < u.first_matrix; ++k) EXPECT_EQ(layout[i].tensors[k]->shape.size(), 1u);
    uint64_t disk = 0, read = 0;
    for (size_t k = u.first_disk; k < u.n_tensors; ++k) {
      const uint64_t nb = layout[i].tensors[k]->nbytes;
      disk += nb;
      read += k + 1 < u.n_tensors ? (nb + 4095) / 4096 * 4096 : nb;
    }
    EXPECT_EQ(u.matrix_bytes[2], disk) << u.name;
    EXPECT_EQ(u.disk_read_bytes, read) << u.name;
    some_partial = some_partial || (u.first_disk > u.first_matrix && u.first_disk < u.n_tensors);
  }
  EXPECT_TRUE(some_partial) << "at 50% some layer should be split inside";
}

TEST(Placement, FoldsGpuIntoCpuOnAUnifiedDevice) {
  Placement f;
  f[Share::kWGpu] = 0.2;
  f[Share::kWCpu] = 0.3;
  f[Share::kKvGpu] = 0.5;
  f[Share::kKvCpu] = 0.5;
  f[Share::kActGpu] = 1;
  f[Share::kActCpu] = 0;
  const Placement u = f.folded(true);
  EXPECT_DOUBLE_EQ(u[Share::kWGpu], 0);
  EXPECT_DOUBLE_EQ(u[Share::kWCpu], 0.5);
  EXPECT_DOUBLE_EQ(u[Share::kKvCpu], 1);
  EXPECT_DOUBLE_EQ(u[Share::kActCpu], 1);
  EXPECT_DOUBLE_EQ(f.folded(false)[Share::kWGpu], 0.2);
  Placement bad;
  bad[Share::kKvGpu] = 0.7;
  bad[Share::kKvCpu] = 0.7;
  EXPECT_THROW(bad.validate("placement"), Error);
  bad[Share::kKvCpu] = -0.1;
  EXPECT_THROW(bad.validate("placement"), Error);
}

// Of the first n pages of any sequence exactly floor(n r) live in RAM.
TEST(Placement, KvPageHomesHoldTheFractionExactly) {
  for (double r : {0.0, 0.1, 0.25, 1.0 / 3, 0.5, 0.7, 0.9, 1.0}) {
    Placement f;
    f.set(DataKind::kKv, 0, r);
    int64_t ram = 0;
    for (int64_t n = 1; n <= 200; ++n) {
      ram += kv_page_home(f, n - 1) == Tier::kDisk ? 0 : 1;
      EXPECT_EQ(ram, static_cast<int64_t>(std::floor(static_cast<double>(n) * r + 1e-9)))
          << "r " << r << " n " << n;
    }
  }
  // Three tiers: gpu pages are among the RAM ones, floor(n g) at most.
  Placement f;
  f.set(DataKind::kKv, 0.25, 0.5);
  int64_t gpu = 0, ram = 0;
  for (int64_t p = 0; p < 400; ++p) {
    const Tier t = kv_page_home(f, p);
    gpu += t == Tier::kGpu;
    ram += t != Tier::kDisk;
  }
  EXPECT_EQ(ram, 300);
  EXPECT_LE(gpu, 100);
  EXPECT_GT(gpu, 0);
}

}  // namespace
}  // namespace strata
