// CpuBackend: memory, the ops it adds (gather_rows), that every op passes its
// arguments through to the CPU kernels (checked against the *_ref ops, every
// element, tolerances from the dtype), that rejected arguments become an
// Error naming the op, and the micro-batch description the forward builds.
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

// matmul through the backend, against matmul_ref: |y - ref| <= (k + 2) u
// sum|x w| (both sum the same rounded operands; only the order differs).
TEST(CpuBackend, MatmulMatchesReference) {
  CpuBackend be(2);
  for (DType compute : {DType::kF32, DType::kBF16}) {
    for (int64_t m : {1, 3, 17}) {
      const int64_t n = 111, k = 64;
      const std::vector<float> x = randoms(static_cast<size_t>(m * k), 2);
      const std::vector<float> w = randoms(static_cast<size_t>(n * k), 3);
      const std::vector<float> bias = randoms(static_cast<size_t>(n), 4);
      MatrixView wv{w.data(), DType::kF32, n, k, static_cast<size_t>(k) * 4};
      std::vector<float> y(static_cast<size_t>(m * n)), ref(y.size());
      be.matmul(y.data(), n, x.data(), k, wv, bias.data(), m, compute);
      const auto ct = compute == DType::kF32 ? cpu::ComputeType::kF32 : cpu::ComputeType::kBF16;
      ASSERT_EQ(cpu::matmul_ref(ref.data(), n, x.data(), k, w.data(), DType::kF32, k * 4,
                                bias.data(), m, n, k, ct),
                Status::kOk);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double mag = std::fabs(bias[static_cast<size_t>(j)]);
          for (int64_t l = 0; l < k; ++l) {
            mag += std::fabs(x[static_cast<size_t>(i * k + l)] * w[static_cast<size_t>(j * k + l)]);
          }
          const double tol = (k + 2) * kU * mag + 1e-30;
          const size_t e = static_cast<size_t>(i * n + j);
          ASSERT_LE(std::fabs(y[e] - ref[e]), tol)
              << dtype_name(compute) << " m=" << m << " (" << i << "," << j << ")";
        }
      }
    }
  }
}

// Attention and kv_append through the backend against the reference
// attention on the same pages: two sequences with cached and new tokens.
TEST(CpuBackend, AttentionMatchesReference) {
  CpuBackend be(2);
  const int64_t n_head = 6, n_kv = 2, hd = 24, ps = 4;
  const int64_t row = n_kv * hd;
  const int64_t n_pages = 8;
  std::vector<DeviceBuffer> k_pages, v_pages;
  std::vector<void*> kp, vp;
  for (int64_t p = 0; p < n_pages; ++p) {
    k_pages.push_back(be.alloc(static_cast<size_t>(ps * row) * 4));
    v_pages.push_back(be.alloc(static_cast<size_t>(ps * row) * 4));
    kp.push_back(k_pages.back().data());
    vp.push_back(v_pages.back().data());
  }
  std::vector<float> kmin(static_cast<size_t>(n_pages * row)), kmax(kmin.size());
  KvLayer kv{kp.data(), vp.data(), kmin.data(), kmax.data(), n_pages, DType::kF32, ps, n_kv, hd};
  // Sequence 0: 7 tokens at once (pages 5, 2); sequence 1: 3 cached + 2 new (pages 0, 7).
  MicroBatchHost cached, step;
  const std::vector<int32_t> p0 = {5, 2}, p1 = {0, 7};
  cached.add_sequence(std::vector<int32_t>(3, 0), 0, p1, ps, false, -1);
  const std::vector<float> k_c = randoms(static_cast<size_t>(3 * row), 5);
  const std::vector<float> v_c = randoms(static_cast<size_t>(3 * row), 6);
  be.kv_append(kv, k_c.data(), row, v_c.data(), row, cached.slots.data(), 3, cached.touched.data(),
               cached.n_filled.data(), static_cast<int64_t>(cached.touched.size()));
  step.add_sequence(std::vector<int32_t>(7, 0), 0, p0, ps, false, -1);
  step.add_sequence(std::vector<int32_t>(2, 0), 3, p1, ps, false, -1);
  const int64_t n_tok = step.n_tokens();
  ASSERT_EQ(n_tok, 9);
  const std::vector<float> k = randoms(static_cast<size_t>(n_tok * row), 7);
  const std::vector<float> v = randoms(static_cast<size_t>(n_tok * row), 8);
  be.kv_append(kv, k.data(), row, v.data(), row, step.slots.data(), n_tok, step.touched.data(),
               step.n_filled.data(), static_cast<int64_t>(step.touched.size()));
  const std::vector<float> q = randoms(static_cast<size_t>(n_tok * n_head * hd), 9);
  std::vector<float> out(q.size()), ref(q.size());
  AttentionSeqs seqs{step.n_seq(), step.q_indptr.data(), step.kv_len.data(),
                     step.page_indptr.data(), step.page_ids.data()};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  be.attention(out.data(), n_head * hd, q.data(), n_head * hd, n_head, kv, seqs, scale);
  const cpu::KvPages pages{const_cast<const void* const*>(kp.data()),
                           const_cast<const void* const*>(vp.data()),
                           n_pages,
                           DType::kF32,
                           ps,
                           n_kv,
                           hd};
  const cpu::AttentionBatch batch{seqs.n_seq, seqs.q_indptr, seqs.kv_len, seqs.page_indptr,
                                  seqs.page_ids};
  ASSERT_EQ(cpu::paged_attention_ref(ref.data(), n_head * hd, q.data(), n_head * hd, n_head, pages,
                                     batch, scale),
            Status::kOk);
  // The output is a convex combination of values in [-1, 1] with f32 softmax
  // weights (relative error ~ (hd + keys) u each): 1e-5 covers it with room.
  for (size_t e = 0; e < out.size(); ++e) ASSERT_NEAR(out[e], ref[e], 1e-5) << e;
  // Key min/max of the touched pages.
  for (int32_t p : {5, 2, 0, 7}) {
    for (int64_t e = 0; e < row; ++e) {
      const float* page = static_cast<const float*>(kp[static_cast<size_t>(p)]);
      const int64_t filled = p == 2 ? 3 : p == 5 ? 4 : p == 0 ? 4 : 1;
      float mn = INFINITY, mx = -INFINITY;
      for (int64_t t = 0; t < filled; ++t) {
        mn = std::min(mn, page[t * row + e]);
        mx = std::max(mx, page[t * row + e]);
      }
      ASSERT_EQ(kmin[static_cast<size_t>(p * row + e)], mn) << "page " << p;
      ASSERT_EQ(kmax[static_cast<size_t>(p * row + e)], mx) << "page " << p;
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
