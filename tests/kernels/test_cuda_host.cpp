// The host-side logic of kernels/cuda, run on the CPU (label cpu): the
// number formats the kernels share with the host (numeric.h) against core's
// conversions and quant's reference dequantizer, bit for bit; the dispatch
// macros and the value their default branch names; the matmul and attention
// plans; the key ranges of decode splits and the division of keys and query
// rows among warps that the attention kernel performs; the device query.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/gguf_numeric.h"
#include "kernels/cuda/launch_plan.h"
#include "kernels/cuda/numeric.h"
#include "quant/quant_ref.h"

namespace strata::cuda {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<DType> quant_types() {
  std::vector<DType> out;
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    // Strata's block formats; the GGUF-only ones: GgufValuesEqualReferenceBitForBit.
    if (is_quantized(static_cast<DType>(i)) && !dtype_info(static_cast<DType>(i)).dequant_only)
      out.push_back(static_cast<DType>(i));
  }
  return out;
}

TEST(Numeric, F16ToF32EqualsCoreForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    ASSERT_EQ(bits(cuda::f16_to_f32(v)), bits(strata::f16_to_f32(v))) << "f16 0x" << std::hex << h;
    ASSERT_EQ(bits(cuda::bf16_to_f32(v)), bits(strata::bf16_to_f32(v)))
        << "bf16 0x" << std::hex << h;
  }
}

TEST(Numeric, F32ToF16AndBf16EqualCore) {
  // Every 251st f32 pattern (17 million values over all exponents, both
  // signs, NaNs and infinities), then the rounding boundaries of f16.
  std::vector<uint32_t> patterns;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 251) patterns.push_back(static_cast<uint32_t>(u));
  for (uint32_t e = 0x33000000u; e <= 0x47800000u; e += 0x00800000u) {
    for (uint32_t m : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu, 0x2000u, 0x7fffffu}) {
      patterns.push_back(e | m);
      patterns.push_back(0x80000000u | e | m);
    }
  }
  for (uint32_t u : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x0u,
                     0x80000000u, 0x477ff000u, 0x477fefffu, 0x387fc000u, 0x33000001u}) {
    patterns.push_back(u);
  }
  for (uint32_t u : patterns) {
    const float f = from_bits(u);
    ASSERT_EQ(cuda::f32_to_f16(f), strata::f32_to_f16(f)) << "f32 0x" << std::hex << u;
    ASSERT_EQ(cuda::f32_to_bf16(f), strata::f32_to_bf16(f)) << "f32 0x" << std::hex << u;
  }
}

// Rows of every quantized format: blocks quantized from random data (the
// realistic case) and blocks of random bytes (any scale, NaN and Inf
// included: every byte pattern is valid input).
std::vector<uint8_t> make_row(DType t, int64_t n, bool random_bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> row(row_bytes(t, n));
  if (random_bytes) {
    for (auto& b : row) b = static_cast<uint8_t>(rng() & 0xff);
  } else {
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = dist(rng);
    quantize_row_ref(t, x.data(), row.data(), n);
  }
  return row;
}

template <DType T>
void check_dequant(const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> ref(static_cast<size_t>(n));
  dequantize_row_ref(T, row.data(), ref.data(), n);
  std::vector<uint16_t> ref16(static_cast<size_t>(n));
  dequantize_row_bf16_ref(T, row.data(), ref16.data(), n);
  const LoadQuant<T> load;
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_EQ(bits(dequant_value<T>(row.data(), j)), bits(ref[static_cast<size_t>(j)]))
        << dtype_name(T) << " element " << j;
    ASSERT_EQ(bits(load(row.data(), j)), bits(ref[static_cast<size_t>(j)]));
    ASSERT_EQ(cuda::f32_to_bf16(load(row.data(), j)), ref16[static_cast<size_t>(j)]);
  }
  constexpr int G = block_of_t<T>::kGroup;
  float blk[G];
  for (int64_t ib = 0; ib < n / G; ++ib) {
    dequant_block<T>(row.data(), ib, blk);
    for (int e = 0; e < G; ++e) {
      ASSERT_EQ(bits(blk[e]), bits(ref[static_cast<size_t>(ib * G + e)]))
          << dtype_name(T) << " block " << ib << " element " << e;
    }
  }
}

Status check_dequant_any(DType t, const std::vector<uint8_t>& row, int64_t n) {
  STRATA_DISPATCH_QUANT(t, T, check_dequant<T>(row, n));
  return Status::kOk;
}

TEST(Numeric, DequantValueEqualsReferenceBitForBit) {
  uint32_t seed = 1;
  for (DType t : quant_types()) {
    const int64_t n = 4 * dtype_info(t).block_elems;
    for (bool random_bytes : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (random_bytes ? " random bytes" : " quantized"));
      for (int rep = 0; rep < 8; ++rep) {
        const auto row = make_row(t, n, random_bytes, seed++);
        ASSERT_EQ(check_dequant_any(t, row, n), Status::kOk);
      }
    }
  }
}

Status load_of(DType t, DType* out);

// The GGUF-only formats (gguf_numeric.h): every element, through gguf_value,
// LoadGguf and 16-value chunks, equals dequantize_row_ref bit for bit, on
// blocks of random bytes (NaN and Inf scales included) and at odd addresses.
template <DType T>
void check_gguf(const uint8_t* row, int64_t n) {
  std::vector<float> ref(static_cast<size_t>(n));
  dequantize_row_ref(T, row, ref.data(), n);
  const LoadGguf<T> load;
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_EQ(bits(gguf_value<T>(row, j)), bits(ref[static_cast<size_t>(j)]))
        << dtype_name(T) << " element " << j << ": " << gguf_value<T>(row, j) << " vs "
        << ref[static_cast<size_t>(j)];
    ASSERT_EQ(bits(load(row, j)), bits(ref[static_cast<size_t>(j)]));
  }
  constexpr DTypeInfo kInfo = dtype_info_constexpr(T);
  float w[kGgufChunk];
  for (int64_t e0 = 0; e0 < n; e0 += kGgufChunk) {
    gguf_chunk<T>(row + (e0 / kInfo.block_elems) * kInfo.block_bytes,
                  static_cast<int>(e0 % kInfo.block_elems) / kGgufChunk, w);
    for (int i = 0; i < kGgufChunk; ++i) {
      ASSERT_EQ(bits(w[i]), bits(ref[static_cast<size_t>(e0 + i)])) << dtype_name(T) << " " << e0;
    }
  }
}

Status check_gguf_any(DType t, const uint8_t* row, int64_t n) {
  STRATA_DISPATCH_GGUF(t, T, check_gguf<T>(row, n));
  return Status::kOk;
}

TEST(Numeric, GgufValuesEqualReferenceBitForBit) {
  uint32_t seed = 500;
  for (DType t : {DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_TRUE(is_gguf(t));
    const int64_t n = 3 * dtype_info(t).block_elems;
    for (int rep = 0; rep < 8; ++rep) {
      const auto row =
          make_row(DType::kI8, static_cast<int64_t>(row_bytes(t, n)) + 1, true, seed++);
      ASSERT_EQ(check_gguf_any(t, row.data() + 1, n), Status::kOk);  // an odd address
    }
    DType got = DType::kF32;
    ASSERT_EQ(load_of(t, &got), Status::kOk);
    EXPECT_EQ(got, t);
  }
  EXPECT_FALSE(is_gguf(DType::kQ4A32));
  EXPECT_EQ(check_gguf_any(DType::kQ4A32, nullptr, 0), Status::kUnsupported);
}

TEST(Numeric, StoresRoundAsCore) {
  const float xs[] = {0.0f,     -0.0f, 1.0f,     1.0f / 3.0f,           65504.0f,
                      65520.0f, 1e-8f, -3.4e38f, from_bits(0x7fc00000u)};
  for (float x : xs) {
    EXPECT_EQ(bits(StoreF32::from_f32(x)), bits(x));
    EXPECT_EQ(StoreF16::from_f32(x), strata::f32_to_f16(x));
    EXPECT_EQ(StoreBF16::from_f32(x), strata::f32_to_bf16(x));
    const uint16_t h = strata::f32_to_f16(x);
    EXPECT_EQ(bits(StoreF16::load(&h, 0)), bits(strata::f16_to_f32(h)));
  }
  EXPECT_EQ(row_align(DType::kF32), 4u);
  EXPECT_EQ(row_align(DType::kBF16), 2u);
  EXPECT_EQ(row_align(DType::kQ4A32), 2u);
}

// ---- dispatch ----

Status head_dim_of(int64_t hd, int* out) {
  STRATA_DISPATCH_HEAD_DIM(hd, kHd, *out = kHd);
  return Status::kOk;
}

Status store_of(DType t, DType* out) {
  STRATA_DISPATCH_STORE(t, S, *out = S::kDType);
  return Status::kOk;
}

Status load_of(DType t, DType* out) {
  STRATA_DISPATCH_LOAD(t, L, *out = L::kDType);
  return Status::kOk;
}

TEST(Dispatch, HeadDims) {
  for (int hd : {64, 80, 96, 112, 128, 256}) {
    int got = 0;
    ASSERT_EQ(head_dim_of(hd, &got), Status::kOk);
    EXPECT_EQ(got, hd);
  }
  clear_detail();
  int got = 0;
  EXPECT_EQ(head_dim_of(72, &got), Status::kUnsupported);
  EXPECT_EQ(got, 0);
  EXPECT_EQ(last_detail(), "head_dim 72 (supported: 64, 80, 96, 112, 128, 256)");
}

TEST(Dispatch, StoresAndLoads) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    DType got = DType::kI8;
    ASSERT_EQ(store_of(t, &got), Status::kOk);
    EXPECT_EQ(got, t);
    ASSERT_EQ(load_of(t, &got), Status::kOk);
    EXPECT_EQ(got, t);
  }
  for (DType t : quant_types()) {
    DType got = DType::kI8;
    EXPECT_EQ(store_of(t, &got), Status::kUnsupported);
    ASSERT_EQ(load_of(t, &got), Status::kOk);
    EXPECT_EQ(got, t);
  }
  DType got = DType::kF32;
  EXPECT_EQ(store_of(DType::kI32, &got), Status::kUnsupported);
  EXPECT_EQ(last_detail(), "dtype i32 (supported: f32, f16, bf16)");
  EXPECT_EQ(load_of(DType::kI8, &got), Status::kUnsupported);
  EXPECT_NE(last_detail().find("i8"), std::string_view::npos);
}

// ---- plans ----

TEST(LaunchPlan, GridBlocks) {
  EXPECT_EQ(grid_blocks(0, 256), 0);
  EXPECT_EQ(grid_blocks(-3, 256), 0);
  EXPECT_EQ(grid_blocks(1, 256), 1);
  EXPECT_EQ(grid_blocks(256, 256), 1);
  EXPECT_EQ(grid_blocks(257, 256), 2);
  EXPECT_EQ(grid_blocks(int64_t{1} << 40, 256), kMaxBlocks);
  EXPECT_EQ(grid_blocks(1000, 1, 7), 7);
}

TEST(LaunchPlan, MatmulPaths) {
  struct Case {
    DType w, compute;
    int64_t m;
    MatmulPath path;
    DType operand;
    bool convert_x;
  };
  const Case cases[] = {
      {DType::kF32, DType::kF32, 1, MatmulPath::kGemm, DType::kF32, false},
      {DType::kF32, DType::kF32, 500, MatmulPath::kGemm, DType::kF32, false},
      {DType::kF32, DType::kBF16, 3, MatmulPath::kGemmPanels, DType::kBF16, true},
      {DType::kF16, DType::kF32, 1, MatmulPath::kGemm, DType::kF16, true},
      {DType::kF16, DType::kBF16, 77, MatmulPath::kGemm, DType::kF16, true},
      {DType::kBF16, DType::kF32, 9, MatmulPath::kGemm, DType::kBF16, true},
      {DType::kQ4A32, DType::kF32, 1, MatmulPath::kGemv, DType::kF32, false},
      {DType::kQ8S32, DType::kBF16, kGemvMaxM, MatmulPath::kGemv, DType::kBF16, false},
      {DType::kQ8S32, DType::kBF16, kGemvMaxM + 1, MatmulPath::kGemmPanels, DType::kBF16, true},
      {DType::kQ4S32, DType::kF32, 64, MatmulPath::kGemmPanels, DType::kF32, false},
  };
  const int64_t n = 1000, k = 4096;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.w)) + " x " + std::string(dtype_name(c.compute)) +
                 " m=" + std::to_string(c.m));
    MatmulPlan p;
    ASSERT_EQ(plan_matmul(c.w, c.compute, c.m, n, k, &p), Status::kOk);
    EXPECT_EQ(p.path, c.path);
    EXPECT_EQ(p.operand, c.operand);
    EXPECT_EQ(p.convert_x, c.convert_x);
    const size_t op = c.operand == DType::kF32 ? 4 : 2;
    EXPECT_EQ(p.x_bytes, c.convert_x ? align_workspace(static_cast<size_t>(c.m * k) * op) : 0u);
    if (c.path == MatmulPath::kGemmPanels) {
      EXPECT_GE(p.panel_rows, 1);
      EXPECT_LE(p.panel_rows, n);
      EXPECT_LE(static_cast<size_t>(p.panel_rows) * k * op, std::max(kPanelBytes, k * op));
      EXPECT_GE(p.panel_bytes, static_cast<size_t>(p.panel_rows) * k * op);
    } else {
      EXPECT_EQ(p.panel_bytes, 0u);
    }
    EXPECT_EQ(p.workspace_bytes(), p.x_bytes + p.panel_bytes);
    EXPECT_EQ(p.x_bytes % kWorkspaceAlign, 0u);
    EXPECT_EQ(p.panel_bytes % kWorkspaceAlign, 0u);
  }
}

TEST(LaunchPlan, MatmulPanelsSplitLargeWeights) {
  MatmulPlan p;
  // 32000 x 4096 f32 panels of 16 KiB rows: 4096 rows fit in 64 MiB.
  ASSERT_EQ(plan_matmul(DType::kQ4A32, DType::kF32, 100, 32000, 4096, &p), Status::kOk);
  EXPECT_EQ(p.panel_rows, 4096);
  // A row larger than a panel still gets one row a panel.
  ASSERT_EQ(plan_matmul(DType::kQ8S32, DType::kF32, 100, 10, 32 * 1024 * 1024, &p), Status::kOk);
  EXPECT_EQ(p.panel_rows, 1);
  // Empty products need no workspace.
  ASSERT_EQ(plan_matmul(DType::kF16, DType::kF32, 0, 10, 64, &p), Status::kOk);
  EXPECT_EQ(p.workspace_bytes(), 0u);
  ASSERT_EQ(plan_matmul(DType::kQ4A32, DType::kBF16, 100, 10, 0, &p), Status::kOk);
  EXPECT_EQ(p.workspace_bytes(), 0u);
}

TEST(LaunchPlan, MatmulRejects) {
  MatmulPlan p;
  EXPECT_EQ(plan_matmul(DType::kF16, DType::kF16, 1, 1, 64, &p), Status::kUnsupported);
  EXPECT_NE(last_detail().find("compute dtype f16"), std::string_view::npos);
  EXPECT_EQ(plan_matmul(DType::kI32, DType::kF32, 1, 1, 64, &p), Status::kUnsupported);
  EXPECT_NE(last_detail().find("weight dtype i32"), std::string_view::npos);
  EXPECT_EQ(plan_matmul(DType::kQ4A32, DType::kF32, 1, 1, 48, &p), Status::kInvalidArgument);
  EXPECT_EQ(plan_matmul(DType::kF32, DType::kF32, -1, 1, 48, &p), Status::kInvalidArgument);
}

TEST(LaunchPlan, AttentionSplits) {
  // 40 SMs (T4): decode of one sequence with 8 kv heads wants 160 blocks.
  AttentionPlan p = plan_attention(1, 32, 8, 128, 40);
  EXPECT_EQ(p.decode_splits, 20);
  EXPECT_EQ(p.prefill_splits, 20);
  EXPECT_EQ(p.partial_bytes, align_workspace(1 * 32 * 20 * (128 + 2) * 4));
  EXPECT_EQ(p.partial_ml_floats(), static_cast<size_t>(32 * 20 * 2));
  // Many sequences fill the device without splitting.
  p = plan_attention(64, 32, 32, 128, 40);
  EXPECT_EQ(p.decode_splits, 1);
  EXPECT_EQ(p.prefill_splits, 1);
  EXPECT_EQ(p.partial_bytes, 0u);
  // Splits are capped; MQA on a large GPU.
  p = plan_attention(1, 16, 1, 64, 132);
  EXPECT_EQ(p.decode_splits, kMaxDecodeSplits);
  EXPECT_EQ(p.prefill_splits, kMaxPrefillSplits);
  // Degenerate inputs still give a valid plan.
  p = plan_attention(0, 4, 0, 64, 0);
  EXPECT_GE(p.decode_splits, 1);
  EXPECT_GE(p.prefill_splits, 1);
  EXPECT_EQ(attn_rows_per_warp(128), 8);
  EXPECT_EQ(attn_rows_per_warp(256), 4);
}

TEST(LaunchPlan, SplitKeysCoverEveryKeyOnce) {
  for (int64_t len = 0; len <= 300; ++len) {
    for (int64_t n_splits = 1; n_splits <= 33; ++n_splits) {
      int64_t next = 0;
      int64_t longest = 0;
      for (int64_t z = 0; z < n_splits; ++z) {
        int64_t b = -1, e = -1;
        split_keys(len, n_splits, z, kAttnKeyTile, &b, &e);
        ASSERT_EQ(b, next) << "len " << len << " splits " << n_splits << " z " << z;
        ASSERT_LE(b, e);
        ASSERT_LE(e, len);
        if (e > b) {
          ASSERT_EQ(b % kAttnKeyTile, 0);
        }
        longest = std::max(longest, e - b);
        next = e;
      }
      ASSERT_EQ(next, len) << "len " << len << " splits " << n_splits;
      // No split is longer than an equal share rounded up to a tile.
      const int64_t share = (len + n_splits - 1) / n_splits;
      ASSERT_LE(longest, (share + kAttnKeyTile - 1) / kAttnKeyTile * kAttnKeyTile);
    }
  }
}

// The division of work of attention_kernel, replayed on the host with the
// kernel's loops: decode (warp w of split z folds tiles k0 + w*T, + W*T, ...
// of split_keys) visits every key of a sequence once; prefill (warp w of
// block z takes row chunks z*W + w, + S*W, ...) visits every query row once,
// and each chunk's key range reaches its last row's causal limit.
TEST(LaunchPlan, AttentionWorkDivisionVisitsEverythingOnce) {
  const int64_t T = kAttnKeyTile;
  const int64_t W = kAttnWarps;
  for (int64_t len : {1, 2, 31, 32, 33, 100, 257, 1000}) {
    for (int64_t splits : {1, 2, 3, 7, 32}) {
      std::vector<int> seen(static_cast<size_t>(len), 0);
      for (int64_t z = 0; z < splits; ++z) {
        int64_t k0, k1;
        split_keys(len, splits, z, T, &k0, &k1);
        for (int64_t w = 0; w < W; ++w) {
          for (int64_t kt = k0 + w * T; kt < k1; kt += W * T) {
            const int64_t kt_end = std::min(kt + T, k1);
            for (int64_t key = kt; key < kt_end; ++key) ++seen[static_cast<size_t>(key)];
          }
        }
      }
      for (int64_t key = 0; key < len; ++key) {
        ASSERT_EQ(seen[static_cast<size_t>(key)], 1) << "len " << len << " splits " << splits;
      }
    }
  }
  for (int64_t hd : {64, 256}) {
    const int64_t R = attn_rows_per_warp(hd);
    for (int64_t n_new : {2, 5, 17, 130}) {
      for (int64_t group : {1, 3, 8}) {
        for (int64_t splits : {1, 4, 64}) {
          const int64_t len = n_new + 9;
          const int64_t n_rows = n_new * group;
          const int64_t n_chunks = (n_rows + R - 1) / R;
          std::vector<int> seen(static_cast<size_t>(n_rows), 0);
          for (int64_t z = 0; z < splits; ++z) {
            for (int64_t w = 0; w < W; ++w) {
              for (int64_t c = z * W + w; c < n_chunks; c += splits * W) {
                const int64_t r0 = c * R;
                const int64_t nr = std::min(R, n_rows - r0);
                const int64_t k_end = len - n_new + (r0 + nr - 1) / group + 1;
                for (int64_t r = 0; r < nr; ++r) {
                  ++seen[static_cast<size_t>(r0 + r)];
                  const int64_t t = (r0 + r) / group;
                  ASSERT_LE(len - n_new + t + 1, k_end);  // every row's keys are folded
                }
                ASSERT_LE(k_end, len);
              }
            }
          }
          for (int64_t r = 0; r < n_rows; ++r) ASSERT_EQ(seen[static_cast<size_t>(r)], 1);
        }
      }
    }
  }
}

// ---- device query ----

TEST(CudaDevice, CountNeverThrowsAndFactoryChecksTheIndex) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
  EXPECT_THROW(make_cuda_backend(-1), Error);
  EXPECT_THROW(make_cuda_backend(n), Error);
  EXPECT_THROW(cuda_device_description(n), Error);
  try {
    make_cuda_backend(n);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device"), std::string::npos) << e.what();
  }
  if (!cuda_built()) {
    EXPECT_EQ(n, 0);
  }
}

}  // namespace
}  // namespace strata::cuda
