// Quantized KV pages (kernels/cpu/attention_quant.h): kv_append quantizes
// values exactly as quant's reference does and keys per channel over each
// page as the reference does (bit for bit), every key within half a step of
// its channel's grid per grid it was rounded onto, and keeps the key min/max
// of the f32 keys; paged attention over quantized pages (AVX-512 and portable
// kernels) against its double-precision reference over the same dequantized
// values, on decode, prefill and chunked-prefill batches with pages
// scattered through a pool, GQA/MQA/MHA, every format and group; the KV cache
// sizes its pages, and the CPU backend appends and attends, in compressed
// bytes.
//
// Attention bound: the kernel reads exactly the values the reference reads
// (dequantization is bit for bit dequantize_row_ref's), so the f32 attention
// bound of tests/kernels_cpu/test_attention.cpp applies unchanged, with k and
// v the dequantized values (u = 2^-24, e = kExpRelErr, B = key blocks):
//   |out_d - ref_d| <= (2 E_max + 2 (B + 1)(e + R u) + (n_keys + 2B + 6) u)
//                      * sum_j p_j |v_jd|  + u |ref_d|,
// E_max = (hd + 2) u scale max_j sum_d |q_d k_jd|, R the range of the scores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/shared_pages.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/cpu_attention_check.h"
#include "kv/kv_cache.h"
#include "quant/quant_ref.h"
#include "support/all_close.h"
#include "support/guarded.h"
#include "support/paged_batch.h"
#include "support/random.h"

namespace strata::cpu {
namespace {

using test::GuardedRows;
using test::PagedBatch;
using test::kTiny;
using test::kU32;

constexpr DType kAllFormats[] = {DType::kQ8S32, DType::kQ8S64, DType::kQ8S128, DType::kQ8A32,
                                 DType::kQ8A64, DType::kQ8A128, DType::kQ4S32,  DType::kQ4A32,
                                 DType::kQ4A64, DType::kQ4A128};
constexpr char kFill = 0x5b;  // bytes of pages nobody wrote

// Quantized pages, each followed by guard bytes, and the f32 key min/max
// the caller keeps per page and channel.
struct Pool : test_support::HostPages {
  size_t head_bytes;
  std::vector<float> k_min, k_max;  // [n_pages, row]

  Pool(DType t, int64_t ps, int64_t nkv, int64_t hd, int64_t n)
      : HostPages(t, ps, nkv, hd, n, kv_quant_page_bytes(t, ps, nkv, hd), kFill),
        head_bytes(row_bytes(t, hd)),
        k_min(static_cast<size_t>(n * nkv * hd), NAN),
        k_max(static_cast<size_t>(n * nkv * hd), NAN) {}
  // The key in `slot` of kv head g, dequantized.
  std::vector<float> key_values(int64_t slot, int64_t g) const {
    std::vector<float> out(static_cast<size_t>(head_dim));
    kv_key_dequant(k[static_cast<size_t>(slot / page_size)], dtype, page_size, n_kv_head, head_dim,
                   g, slot % page_size, out.data());
    return out;
  }
  // The value in `slot` of kv head g, dequantized.
  std::vector<float> value_values(int64_t slot, int64_t g) const {
    std::vector<float> out(static_cast<size_t>(head_dim));
    const char* p = static_cast<const char*>(v[static_cast<size_t>(slot / page_size)]) +
                    static_cast<size_t>(slot % page_size * n_kv_head + g) * head_bytes;
    dequantize_row_ref(dtype, p, out.data(), head_dim);
    return out;
  }
};

// Keys drawn around a per-dimension offset (as real keys are: far from
// centred on zero in some dims), values around zero.
std::vector<float> random_keys(int64_t n, int64_t row, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> off(-2.0f, 2.0f), x(-1.5f, 1.5f);
  std::vector<float> bias(static_cast<size_t>(row));
  for (auto& b : bias) b = off(rng);
  std::vector<float> k(static_cast<size_t>(n * row));
  for (size_t i = 0; i < k.size(); ++i) k[i] = bias[i % static_cast<size_t>(row)] + x(rng);
  return k;
}

// Sequences (kv_len, n_new) on pages drawn at random from the pool; every key
// and value written with kv_append (which forwards quantized pages).
PagedBatch make_batch(Pool& pool, const std::vector<std::pair<int32_t, int32_t>>& seqs,
                      uint32_t seed) {
  PagedBatch b = test::layout_paged_batch(seqs, pool.page_size, pool.n_pages, seed);
  const int64_t row = pool.row();
  for (const std::vector<int64_t>& slots : b.slots) {
    const int64_t len = static_cast<int64_t>(slots.size());
    const auto kr = random_keys(len, row, seed++);
    const auto vr = test::random_floats(static_cast<size_t>(len * row), -1.0f, 1.0f, seed++);
    EXPECT_EQ(
        kv_append(pool.k.data(), pool.v.data(), pool.n_pages, pool.dtype, pool.page_size,
                  pool.n_kv_head, pool.head_dim, kr.data(), row, vr.data(), row, slots.data(), len),
        Status::kOk);
  }
  return b;
}

// Tolerances of every output element (see the file comment).
std::vector<double> attention_bound(const Pool& pool, const PagedBatch& b, int64_t group,
                                    const float* q, int64_t q_stride, float scale,
                                    const std::vector<double>& ref) {
  auto as_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  return test::attention_bound(
      b, pool.heads(group), q, q_stride, scale, ref,
      [&](int64_t slot, int64_t g) { return as_double(pool.key_values(slot, g)); },
      [&](int64_t slot, int64_t g) { return as_double(pool.value_values(slot, g)); },
      [](int64_t n_keys, double e_max, double range) {
        const int64_t blocks = (n_keys + kAttentionKeyBlock - 1) / kAttentionKeyBlock;
        return 2 * e_max + 2 * static_cast<double>(blocks + 1) * (kExpRelErr + range * kU32) +
               static_cast<double>(n_keys + 2 * blocks + 6) * kU32;
      });
}

using test::AttnCase;

void run_attention(DType t, const AttnCase& c, uint32_t seed) {
  test_support::check_attention_case<Pool>(t, c, seed, make_batch, attention_bound, "quantized attention");
}

using QuantAttention = test_support::KvDtypeAndIsaTest;

TEST_P(QuantAttention, MatchesReference) {
  const DType t = std::get<0>(GetParam());
  const int64_t g = dtype_info(t).block_elems;
  // head_dim: one group, or several (128 holds 4, 2 or 1 groups).
  const int64_t hd = g == 128 ? 128 : 64;
  const std::vector<AttnCase> cases = {
      {"decode", 16, 3, 3, hd, {{1, 1}, {2, 1}, {17, 1}, {64, 1}, {150, 1}}},
      {"prefill", 16, 3, 3, hd, {{33, 33}, {70, 70}}},
      {"chunked prefill", 7, 2, 4, hd, {{70, 20}, {5, 5}, {40, 1}, {99, 33}}},
      {"mha", 1, 4, 1, g, {{3, 3}, {10, 2}}},
      {"gqa 8", 16, 2, 8, 128, {{45, 45}, {20, 1}}},
      {"mqa 40 heads", 5, 1, 40, g, {{12, 4}, {3, 1}}},
      {"no queries", 16, 1, 2, g, {{8, 0}, {9, 1}}},
  };
  uint32_t seed = 500;
  for (const auto& c : cases) run_attention(t, c, seed += 31);
}

// More pages than the portable path dequantizes at a time: the sequences in
// runs, each run's pages renumbered (decode, and two new tokens each, which
// no kernel reads directly).
TEST_P(QuantAttention, MatchesReferenceAcrossDequantizationRuns) {
  const DType t = std::get<0>(GetParam());
  const int64_t hd = dtype_info(t).block_elems == 128 ? 128 : 64;
  AttnCase c{"runs", 16, 3, 3, hd, {}};
  int64_t pages = 0;
  for (int32_t i = 0; i < 24; ++i) {
    c.seqs.push_back({300 + i, 1 + i % 2});
    pages += (300 + i + 15) / 16;
  }
  const uint64_t f32_page_pair = 2 * 16 * 3 * static_cast<uint64_t>(hd) * sizeof(float);
  ASSERT_GT(static_cast<uint64_t>(pages) * f32_page_pair, kKvDequantBytes);
  run_attention(t, c, 900);
}

// Sequences sharing pages: decode (the AVX-512 kernel reads a shared page
// per sequence; the portable path dequantizes it once for all) and the
// prefill of the suffixes after a shared prefix (a shared page dequantized
// once).
TEST_P(QuantAttention, SharedPagesMatchReference) {
  const DType t = std::get<0>(GetParam());
  const int64_t g = dtype_info(t).block_elems;
  const int64_t hd = g == 128 ? 128 : 64;
  std::vector<std::pair<int32_t, bool>> seqs;
  for (int32_t i = 0; i < 10; ++i) seqs.push_back({330 + 7 * i, i != 3});
  Pool pool(t, 16, 3, hd, 20 + 10 * 25);
  PagedBatch b = test_support::make_shared_batch(pool, 20, seqs, 77, make_batch);
  ASSERT_FALSE(shared_page_groups(b.view<AttentionBatch>(), 16).empty());
  auto bound = [&](const float* q, int64_t q_stride, float scale, const std::vector<double>& ref) {
    return attention_bound(pool, b, 3, q, q_stride, scale, ref);
  };
  test_support::check_paged_attention(pool, b, 3, 78, bound, "decode over shared pages");
  for (size_t s = 0; s < seqs.size(); ++s) b.q_indptr[s + 1] = b.q_indptr[s] + 9;  // suffixes
  test_support::check_paged_attention(pool, b, 3, 79, bound, "prefill after a shared prefix");
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantAttention,
                         ::testing::Combine(::testing::ValuesIn(kAllFormats), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_native" : "_portable");
                         });

// kv_append quantizes every value row exactly as quantize_row_ref does (per
// kv head, so per token along head_dim) and every key channel as the
// reference does (bit for bit), writes only its slots, and folds the f32 keys
// into the page min/max in token order, over several calls.
TEST(KvAppendQuant, MatchesReferenceBitForBitAndKeepsF32KeyMinMax) {
  for (DType t : kAllFormats) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t hd = dtype_info(t).block_elems == 128 ? 128 : 64;
    const int64_t ps = 5, nkv = 3, n_pages = 7, row = nkv * hd;
    Pool a(t, ps, nkv, hd, n_pages), r(t, ps, nkv, hd, n_pages);
    // Page 4 filled by a prefill of 3 tokens, then two decode steps; page 1
    // by 5 in one call (a constant row among them); page 6 by 1; the other
    // pages never written.
    const std::vector<std::vector<int64_t>> calls = {{20, 21, 22, 5, 6, 7, 8, 9, 30}, {23}, {24}};
    std::vector<std::vector<float>> keys_of(n_pages);  // f32 keys per page, in order
    uint32_t seed = 70;
    for (const auto& slots : calls) {
      const int64_t n = static_cast<int64_t>(slots.size());
      auto k = random_keys(n, row + 2, seed++);
      auto v = test::random_floats(static_cast<size_t>(n * (row + 2)), -3, 3, seed++);
      if (n > 3) {
        for (int64_t e = 0; e < row; ++e) v[3 * (row + 2) + e] = 0.75f;  // constant row
        k[1 * (row + 2) + 7] = NAN;       // a NaN key element
        v[2 * (row + 2) + 9] = INFINITY;  // a non-finite value: its group dequantizes to NaN
      }
      ASSERT_EQ(kv_append_quant(a.k.data(), a.v.data(), n_pages, t, ps, nkv, hd, k.data(),
                                row + 2, v.data(), row + 2, slots.data(), n, a.k_min.data(),
                                a.k_max.data()),
                Status::kOk);
      ASSERT_EQ(kv_append_quant_ref(r.k.data(), r.v.data(), n_pages, t, ps, nkv, hd, k.data(),
                                    row + 2, v.data(), row + 2, slots.data(), n, r.k_min.data(),
                                    r.k_max.data()),
                Status::kOk);
      for (int64_t i = 0; i < n; ++i) {
        auto& kp = keys_of[static_cast<size_t>(slots[i] / ps)];
        kp.insert(kp.end(), k.begin() + i * (row + 2), k.begin() + i * (row + 2) + row);
      }
    }
    for (int64_t p = 0; p < n_pages; ++p) {
      EXPECT_EQ(a.k_mem[p], r.k_mem[p]) << "K page " << p;
      EXPECT_EQ(a.v_mem[p], r.v_mem[p]) << "V page " << p;
      const auto& kp = keys_of[static_cast<size_t>(p)];
      const int64_t filled = static_cast<int64_t>(kp.size()) / row;
      for (int64_t e = 0; e < row; ++e) {
        const size_t at = static_cast<size_t>(p * row + e);
        if (filled == 0) {  // untouched
          EXPECT_TRUE(std::isnan(a.k_min[at]) && std::isnan(a.k_max[at]));
          continue;
        }
        float mn = INFINITY, mx = -INFINITY;
        bool nan = false;
        for (int64_t j = 0; j < filled; ++j) {
          const float x = kp[static_cast<size_t>(j * row + e)];
          nan = nan || std::isnan(x);
          mn = std::min(mn, x);
          mx = std::max(mx, x);
        }
        if (nan) {
          EXPECT_TRUE(std::isnan(a.k_min[at]) && std::isnan(a.k_max[at])) << p << " " << e;
          EXPECT_TRUE(std::isnan(r.k_min[at]) && std::isnan(r.k_max[at])) << p << " " << e;
        } else {
          EXPECT_EQ(a.k_min[at], mn) << "page " << p << " element " << e;
          EXPECT_EQ(a.k_max[at], mx) << "page " << p << " element " << e;
          EXPECT_EQ(r.k_min[at], mn);
          EXPECT_EQ(r.k_max[at], mx);
        }
      }
      // Guard bytes after the page and unwritten slots keep their fill.
      for (size_t i = a.page_bytes; i < a.k_mem[p].size(); ++i) ASSERT_EQ(a.k_mem[p][i], kFill);
      if (filled == 0) {
        EXPECT_TRUE(std::all_of(a.k_mem[p].begin(), a.k_mem[p].end(),
                                [](char c) { return c == kFill; }));
      }
    }
    // A constant value row comes back exactly.
    const auto v0 = a.value_values(5, 1);  // slot 5: the constant row of the first call
    for (float x : v0) EXPECT_EQ(x, 0.75f);
    // Every key within its channel's rounding: the final step d of the
    // channel's grid (steps only grow when a later append widens the grid),
    // half a step per grid the key was rounded onto (its own call's, then
    // one per later call that re-gridded its page: at most the page's calls
    // after it). A channel holding a NaN key is NaN for the whole page.
    std::vector<int64_t> calls_of(n_pages, 0);
    for (const auto& slots : calls) {
      std::vector<bool> seen(n_pages, false);
      for (int64_t sl : slots) seen[static_cast<size_t>(sl / ps)] = true;
      for (int64_t p = 0; p < n_pages; ++p) calls_of[static_cast<size_t>(p)] += seen[static_cast<size_t>(p)];
    }
    for (int64_t p = 0; p < n_pages; ++p) {
      const auto& kp = keys_of[static_cast<size_t>(p)];
      const int64_t filled = static_cast<int64_t>(kp.size()) / row;
      for (int64_t j = 0; j < filled; ++j) {
        for (int64_t g = 0; g < nkv; ++g) {
          const auto got = a.key_values(p * ps + j, g);
          std::vector<float> step(static_cast<size_t>(hd));
          for (int64_t d = 0; d < hd; ++d) {
            bool nan = false;
            float lo = INFINITY, hi = -INFINITY;
            for (int64_t i = 0; i < filled; ++i) {
              const float x = kp[static_cast<size_t>(i * row + g * hd + d)];
              nan = nan || std::isnan(x);
              lo = std::min(lo, x);
              hi = std::max(hi, x);
            }
            const float want = kp[static_cast<size_t>(j * row + g * hd + d)];
            if (nan) {
              EXPECT_TRUE(std::isnan(got[d])) << p << " " << j << " " << d;
              continue;
            }
            // The grid's step: (hi - lo) / L widened by the f16 rounding of
            // the minimum down and of the step up (2^-10 relative each).
            const double levels = kv_key_bits(t) == 4 ? 15.0 : 255.0;
            const double dstep = ((hi - lo) + std::ldexp(std::fabs(lo), -10)) / levels *
                                     (1 + std::ldexp(1.0, -10)) + 1e-7;
            EXPECT_LE(std::fabs(got[d] - want), calls_of[p] * 0.5 * dstep * (1 + 1e-5) + 1e-6)
                << dtype_name(t) << " page " << p << " key " << j << " head " << g << " dim " << d;
          }
        }
      }
    }
  }
}

TEST(KvAppendQuant, RejectsWhatItCannotStore) {
  Pool pool(DType::kQ4A32, 4, 1, 64, 2);
  std::vector<float> k(64), v(64);
  const int64_t slot = 3;
  // A group that does not divide head_dim, a plain dtype, a bad slot.
  EXPECT_FALSE(kv_quant_ok(DType::kQ4A64, 32));
  EXPECT_FALSE(kv_quant_ok(DType::kQ8A32, 48));
  EXPECT_FALSE(kv_quant_ok(DType::kF16, 64));
  EXPECT_TRUE(kv_quant_ok(DType::kQ4A32, 96));
  EXPECT_EQ(kv_append_quant(pool.k.data(), pool.v.data(), 2, DType::kQ4A128, 4, 1, 64, k.data(),
                            64, v.data(), 64, &slot, 1, nullptr, nullptr),
            Status::kUnsupported);
  EXPECT_EQ(kv_append_quant(pool.k.data(), pool.v.data(), 2, DType::kF16, 4, 1, 64, k.data(), 64,
                            v.data(), 64, &slot, 1, nullptr, nullptr),
            Status::kUnsupported);
  const int64_t bad = 8;
  EXPECT_EQ(kv_append_quant(pool.k.data(), pool.v.data(), 2, DType::kQ4A32, 4, 1, 64, k.data(), 64,
                            v.data(), 64, &bad, 1, nullptr, nullptr),
            Status::kInvalidArgument);
  EXPECT_TRUE(std::all_of(pool.k_mem[0].begin(), pool.k_mem[0].end(),
                          [](char c) { return c == kFill; }));
  PagedBatch b = make_batch(pool, {{5, 1}}, 9);
  KvPages odd = pool.view();
  odd.head_dim = 48;  // not whole groups
  std::vector<float> q(64), o(64);
  EXPECT_EQ(paged_attention(o.data(), 64, q.data(), 64, 1, odd, b.view<AttentionBatch>(), 1.0f),
            Status::kUnsupported);
  b.page_ids[0] = 2;  // outside the pool
  EXPECT_EQ(paged_attention(o.data(), 64, q.data(), 64, 1, pool.view(), b.view<AttentionBatch>(), 1.0f),
            Status::kInvalidArgument);
}

// The KV cache in compressed bytes: page sizes, the budget, and the CPU
// backend appending (min/max from the f32 keys) and attending through it.
TEST(QuantKvCache, PagesBudgetAndBackendCountCompressedBytes) {
  CpuBackend be(2);
  KvGeometry g;
  g.n_layer = 2;
  g.n_kv_head = 3;
  g.head_dim = 64;
  g.page_size = 16;
  g.dtype = DType::kQ4A64;  // values: 36 bytes per 64; keys: 4 + 8 bytes per channel
  EXPECT_EQ(kv_value_page_bytes(g.dtype, 16, 3, 64), 16u * 3 * 36);
  EXPECT_EQ(kv_key_page_bytes(g.dtype, 16, 3, 64), 3u * 64 * (4 + 8));
  EXPECT_EQ(g.page_bytes(), 3u * 64 * 12);  // the larger: K
  EXPECT_EQ(g.page_bytes(), kv_quant_page_bytes(g.dtype, 16, 3, 64));
  EXPECT_EQ(g.bytes_per_page(), 2u * (2 * 3 * 64 * 12 + 2 * 3 * 64 * 4));
  KvGeometry f16 = g;
  f16.dtype = DType::kF16;
  EXPECT_EQ(f16.page_bytes(), 16u * 3 * 64 * 2);
  // The same budget holds 2.25x the pages: K and V pages shrink 2.67x, the
  // f32 key min/max (2 x 192 floats per page and layer) do not.
  const uint64_t budget = 40 * f16.bytes_per_page();
  KvCache kv(be, g, budget);
  EXPECT_EQ(kv.pool().max_pages(), static_cast<int64_t>(budget / g.bytes_per_page()));
  EXPECT_EQ(kv.pool().max_pages(), 40 * 27648 / 12288);
  const int32_t s = kv.add_sequence();
  kv.extend(s, 20);  // 2 pages
  EXPECT_EQ(kv.pool().peak_bytes(), 2 * g.bytes_per_page());

  const int64_t row = g.row();
  const auto k = random_keys(20, row, 3);
  const auto v = test::random_floats(static_cast<size_t>(20 * row), -1, 1, 4);
  std::vector<int64_t> slots;
  for (int64_t j = 0; j < 20; ++j) slots.push_back(kv.pages(s)[j / 16] * 16 + j % 16);
  const std::vector<int32_t> touched = {kv.pages(s)[0], kv.pages(s)[1]};
  const std::vector<int32_t> filled = {16, 4};
  const KvLayer layer = kv.pool().layer(1);
  be.kv_append(layer, k.data(), row, v.data(), row, slots.data(), 20, touched.data(),
               filled.data(), 2);
  for (int64_t e = 0; e < row; ++e) {
    float mn = INFINITY, mx = -INFINITY;
    for (int64_t j = 16; j < 20; ++j) {
      mn = std::min(mn, k[j * row + e]);
      mx = std::max(mx, k[j * row + e]);
    }
    ASSERT_EQ(layer.k_min[touched[1] * row + e], mn);
    ASSERT_EQ(layer.k_max[touched[1] * row + e], mx);
  }
  // Attention through the backend is the kernel's (one decode query of 9
  // heads over the 20 keys): the same bits.
  const int64_t n_head = 9;
  const auto q = test::random_floats(static_cast<size_t>(n_head * 64), -1, 1, 5);
  const std::vector<int32_t> q_indptr = {0, 1}, kv_len = {20}, page_indptr = {0, 2};
  const std::vector<int32_t> ids(kv.pages(s).begin(), kv.pages(s).end());
  AttentionSeqs seqs{1, q_indptr.data(), kv_len.data(), page_indptr.data(), ids.data()};
  std::vector<float> out(static_cast<size_t>(n_head * 64)), ref(out.size());
  be.attention(out.data(), n_head * 64, q.data(), n_head * 64, n_head, layer, seqs, 0.125f);
  const KvPages pages{const_cast<const void* const*>(layer.k_pages),
                      const_cast<const void* const*>(layer.v_pages),
                      layer.n_pages,
                      layer.dtype,
                      layer.page_size,
                      layer.n_kv_head,
                      layer.head_dim};
  const AttentionBatch batch{1, q_indptr.data(), kv_len.data(), page_indptr.data(), ids.data()};
  {
    ScopedOmpThreads threads(2);
    ASSERT_EQ(paged_attention(ref.data(), n_head * 64, q.data(), n_head * 64, n_head, pages,
                              batch, 0.125f),
              Status::kOk);
  }
  EXPECT_EQ(std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)), 0);

  // A group that does not divide head_dim is refused with a message naming both.
  KvGeometry bad = g;
  bad.dtype = DType::kQ8A128;
  try {
    KvCache c(be, bad, budget);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("q8a128"), std::string::npos) << msg;
    EXPECT_NE(msg.find("head_dim is 64"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace strata::cpu
