// CpuBackend: memory, the ops it adds (gather_rows), that rejected arguments
// become an Error naming the op, and the micro-batch description the forward
// builds. That every op passes its arguments through to the kernels is
// test_backend_ops.cpp's, for every backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"
#include "model/forward.h"

namespace strata {
namespace {

constexpr double kU = 0x1p-24;

std::vector<float> randoms(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(CpuBackend, Memory) {
  CpuBackend be(2);
  EXPECT_TRUE(be.memory_is_host());
  EXPECT_EQ(be.threads(), 2);
  EXPECT_NE(be.name().find("cpu"), std::string::npos);
  DeviceBuffer a = be.alloc(1000);
  ASSERT_TRUE(a);
  EXPECT_EQ(a.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  std::vector<char> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7);
  be.copy_to_device(a.data(), src.data(), src.size());
  DeviceBuffer b = be.alloc(1000);
  be.copy(b.data(), a.data(), 1000);
  std::vector<char> back(1000);
  be.copy_to_host(back.data(), b.data(), 1000);
  EXPECT_EQ(back, src);
  be.fill_zero(b.data(), 1000);
  be.copy_to_host(back.data(), b.data(), 1000);
  EXPECT_EQ(back, std::vector<char>(1000, 0));
  DeviceBuffer moved = std::move(a);
  EXPECT_FALSE(a);
  EXPECT_TRUE(moved);
  be.synchronize();
}

TEST(CpuBackend, GatherRowsCopiesExactlyAndLeavesTheRest) {
  CpuBackend be(1);
  const int64_t d = 17, ld_x = 20, ld_y = 19;
  const std::vector<float> x = randoms(7 * ld_x, 1);
  std::vector<float> y(5 * ld_y, -7.0f);
  const std::vector<int32_t> rows = {6, 0, 3, 3, 1};
  be.gather_rows(y.data(), ld_y, x.data(), ld_x, rows.data(), 5, d);
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t c = 0; c < ld_y; ++c) {
      const float want = c < d ? x[static_cast<size_t>(rows[i] * ld_x + c)] : -7.0f;
      ASSERT_EQ(y[static_cast<size_t>(i * ld_y + c)], want) << i << "," << c;
    }
  }
}

TEST(CpuBackend, RejectedArgumentsNameTheOp) {
  CpuBackend be(1);
  std::vector<float> x(64), y(64);
  try {
    be.rms_norm(y.data(), 4, x.data(), 8, nullptr, 1e-5f, 2, 8);  // y stride < d
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm"), std::string::npos) << e.what();
  }
  MatrixView w{x.data(), DType::kF32, 4, 8, 32};
  EXPECT_THROW(be.matmul(y.data(), 4, x.data(), 8, w, nullptr, 2, DType::kF16), Error);
  const std::vector<int32_t> ids = {0, 9};
  try {
    be.embedding(y.data(), 8, w, ids.data(), 2);  // id 9 outside 4 rows
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embedding"), std::string::npos) << e.what();
  }
}

TEST(MicroBatchHost, DescribesSequencesAcrossPages) {
  MicroBatchHost h;
  const std::vector<int32_t> pages_a = {9, 4, 6}, pages_b = {1};
  // a: 5 cached tokens, 6 new (positions 5..10) with page size 4.
  h.add_sequence(std::vector<int32_t>{10, 11, 12, 13, 14, 15}, 5, pages_a, 4, false, 2);
  // b: 1 new token at position 0, every row wanted.
  h.add_sequence(std::vector<int32_t>{20}, 0, pages_b, 4, true, 2);
  EXPECT_EQ(h.n_seq(), 2);
  EXPECT_EQ(h.n_tokens(), 7);
  EXPECT_EQ(h.positions, (std::vector<int32_t>{5, 6, 7, 8, 9, 10, 0}));
  EXPECT_EQ(h.pos_ids, (std::vector<int32_t>{7, 8, 9, 10, 11, 12, 2}));
  EXPECT_EQ(h.q_indptr, (std::vector<int32_t>{0, 6, 7}));
  EXPECT_EQ(h.kv_len, (std::vector<int32_t>{11, 1}));
  EXPECT_EQ(h.page_indptr, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(h.page_ids, (std::vector<int32_t>{9, 4, 6, 1}));
  // pos 5 -> page 1 (id 4) offset 1, ..., pos 8 -> page 2 (id 6) offset 0.
  EXPECT_EQ(h.slots, (std::vector<int64_t>{17, 18, 19, 24, 25, 26, 4}));
  EXPECT_EQ(h.touched, (std::vector<int32_t>{4, 6, 1}));
  EXPECT_EQ(h.n_filled, (std::vector<int32_t>{4, 3, 1}));
  EXPECT_EQ(h.out_rows, (std::vector<int32_t>{5, 6}));
  h.clear();
  EXPECT_EQ(h.n_seq(), 0);
  EXPECT_EQ(h.q_indptr, (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace strata
