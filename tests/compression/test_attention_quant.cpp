// Quantized KV pages (kernels/cpu/attention_quant.h): kv_append quantizes
// each row exactly as quant's reference does and keeps the key min/max of
// the f32 keys; paged attention over quantized pages (AVX-512 and portable
// kernels) against its double-precision reference over the same dequantized
// values, on decode, prefill and chunked-prefill batches with pages
// scattered through a pool, GQA/MQA/MHA, every format and group; the KV cache
// sizes its pages, and the CPU backend appends and attends, in compressed
// bytes.
//
// Attention bound: the kernel reads exactly the values the reference reads
// (dequantization is bit for bit dequantize_row_ref's), so the f32 attention
// bound of tests/kernels_cpu/test_attention.cpp applies unchanged, with k and
// v the dequantized values and q rotated as the stored keys are (the kernel
// and the reference rotate it with the same kv_rotate_groups, so both see the
// same bits) (u = 2^-24, e = kExpRelErr, B = key blocks):
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
#include "kernels/cpu/vec_math.h"
#include "kv/kv_cache.h"
#include "quant/quant_ref.h"
#include "tests/kernels_cpu/test_util.h"

namespace strata::cpu {
namespace {

using test::GuardedRows;
using test::kTiny;
using test::kU32;

constexpr DType kAllFormats[] = {DType::kQ8S32, DType::kQ8S64, DType::kQ8S128, DType::kQ8A32,
                                 DType::kQ8A64, DType::kQ8A128, DType::kQ4S32,  DType::kQ4A32,
                                 DType::kQ4A64, DType::kQ4A128};
constexpr char kFill = 0x5b;  // bytes of pages nobody wrote

// Quantized pages allocated one by one (not contiguous), each followed by
// guard bytes.
struct Pool {
  DType dtype;
  int64_t page_size, n_kv_head, head_dim, n_pages;
  size_t head_bytes, page_bytes;
  std::vector<std::vector<char>> k_mem, v_mem;
  std::vector<void*> k, v;
  std::vector<float> k_min, k_max;  // [n_pages, row]

  Pool(DType t, int64_t ps, int64_t nkv, int64_t hd, int64_t n)
      : dtype(t), page_size(ps), n_kv_head(nkv), head_dim(hd), n_pages(n) {
    head_bytes = row_bytes(t, hd);
    page_bytes = static_cast<size_t>(ps * nkv) * head_bytes;
    for (int64_t i = 0; i < n; ++i) {
      k_mem.emplace_back(page_bytes + 64, kFill);
      v_mem.emplace_back(page_bytes + 64, kFill);
    }
    for (int64_t i = 0; i < n; ++i) {
      k.push_back(k_mem[static_cast<size_t>(i)].data());
      v.push_back(v_mem[static_cast<size_t>(i)].data());
    }
    k_min.assign(static_cast<size_t>(n * nkv * hd), NAN);
    k_max.assign(static_cast<size_t>(n * nkv * hd), NAN);
  }
  KvPages view() const {
    KvPages p;
    p.k = const_cast<const void* const*>(k.data());
    p.v = const_cast<const void* const*>(v.data());
    p.n_pages = n_pages;
    p.dtype = dtype;
    p.page_size = page_size;
    p.n_kv_head = n_kv_head;
    p.head_dim = head_dim;
    return p;
  }
  int64_t row() const { return n_kv_head * head_dim; }
  // Dequantized element d of kv head g of the key (or value) in `slot`.
  std::vector<float> row_values(const std::vector<void*>& pages, int64_t slot, int64_t g) const {
    std::vector<float> out(static_cast<size_t>(head_dim));
    const char* p = static_cast<const char*>(pages[static_cast<size_t>(slot / page_size)]) +
                    static_cast<size_t>(slot % page_size * n_kv_head + g) * head_bytes;
    dequantize_row_ref(dtype, p, out.data(), head_dim);
    return out;
  }
};

struct Batch {
  std::vector<int32_t> q_indptr{0}, kv_len, page_indptr{0}, page_ids;
  AttentionBatch view() const {
    AttentionBatch b;
    b.n_seq = static_cast<int64_t>(kv_len.size());
    b.q_indptr = q_indptr.data();
    b.kv_len = kv_len.data();
    b.page_indptr = page_indptr.data();
    b.page_ids = page_ids.data();
    return b;
  }
  int64_t n_tokens() const { return q_indptr.back(); }
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
Batch make_batch(Pool& pool, const std::vector<std::pair<int32_t, int32_t>>& seqs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> free_ids(static_cast<size_t>(pool.n_pages));
  std::iota(free_ids.begin(), free_ids.end(), 0);
  std::shuffle(free_ids.begin(), free_ids.end(), rng);
  Batch b;
  size_t next = 0;
  for (auto [len, n_new] : seqs) {
    const int32_t n_pg =
        (len + static_cast<int32_t>(pool.page_size) - 1) / static_cast<int32_t>(pool.page_size);
    const size_t first = b.page_ids.size();
    for (int32_t i = 0; i < n_pg; ++i) b.page_ids.push_back(free_ids.at(next++));
    b.page_indptr.push_back(static_cast<int32_t>(b.page_ids.size()));
    b.kv_len.push_back(len);
    b.q_indptr.push_back(b.q_indptr.back() + n_new);
    const int64_t row = pool.row();
    const auto kr = random_keys(len, row, seed++);
    const auto vr = test::random_floats(static_cast<size_t>(len * row), -1.0f, 1.0f, seed++);
    std::vector<int64_t> slots;
    for (int32_t j = 0; j < len; ++j) {
      slots.push_back(b.page_ids[first + static_cast<size_t>(j / pool.page_size)] *
                          pool.page_size +
                      j % pool.page_size);
    }
    EXPECT_EQ(
        kv_append(pool.k.data(), pool.v.data(), pool.n_pages, pool.dtype, pool.page_size,
                  pool.n_kv_head, pool.head_dim, kr.data(), row, vr.data(), row, slots.data(), len),
        Status::kOk);
  }
  return b;
}

// Tolerances of every output element (see the file comment).
std::vector<double> attention_bound(const Pool& pool, const Batch& b, const std::vector<float>& q,
                                    int64_t q_stride, int64_t n_head, float scale,
                                    const std::vector<double>& ref) {
  const int64_t hd = pool.head_dim;
  const int64_t group = n_head / pool.n_kv_head;
  std::vector<double> tol(ref.size());
  for (size_t s = 0; s < b.kv_len.size(); ++s) {
    const int32_t* ids = b.page_ids.data() + b.page_indptr[s];
    const int64_t n_new = b.q_indptr[s + 1] - b.q_indptr[s];
    const int64_t len = b.kv_len[s];
    for (int64_t g = 0; g < pool.n_kv_head; ++g) {
      std::vector<std::vector<float>> keys, values;
      for (int64_t j = 0; j < len; ++j) {
        const int64_t slot = ids[j / pool.page_size] * pool.page_size + j % pool.page_size;
        keys.push_back(pool.row_values(pool.k, slot, g));
        values.push_back(pool.row_values(pool.v, slot, g));
      }
      for (int64_t i = 0; i < n_new; ++i) {
        const int64_t tok = b.q_indptr[s] + i;
        const int64_t n_keys = len - n_new + i + 1;
        const int64_t blocks = (n_keys + kAttentionKeyBlock - 1) / kAttentionKeyBlock;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          // The query as the kernel and the reference see it: rotated as the
          // stored keys are (both call kv_rotate_groups, so it is exact here).
          std::vector<float> qh(static_cast<size_t>(hd));
          kv_rotate_groups(q.data() + tok * q_stride + h * hd, qh.data(), hd,
                           dtype_info(pool.dtype).block_elems);
          const float* qr = qh.data();
          std::vector<double> sc(static_cast<size_t>(n_keys));
          double e_max = 0, mx = -INFINITY, mn = INFINITY;
          for (int64_t j = 0; j < n_keys; ++j) {
            double dot = 0, dot_abs = 0;
            for (int64_t d = 0; d < hd; ++d) {
              dot += qr[d] * static_cast<double>(keys[j][d]);
              dot_abs += std::fabs(qr[d] * static_cast<double>(keys[j][d]));
            }
            sc[j] = dot * scale;
            e_max = std::max(e_max, (hd + 2) * kU32 * scale * dot_abs);
            mx = std::max(mx, sc[j]);
            mn = std::min(mn, sc[j]);
          }
          double l = 0;
          for (auto& v : sc) l += (v = std::exp(v - mx));
          const double range = mx - mn + e_max;
          const double rel = 2 * e_max + 2 * (blocks + 1) * (kExpRelErr + range * kU32) +
                             (n_keys + 2 * blocks + 6) * kU32;
          for (int64_t d = 0; d < hd; ++d) {
            double pv = 0;
            for (int64_t j = 0; j < n_keys; ++j) pv += sc[j] / l * std::fabs(values[j][d]);
            const size_t e = static_cast<size_t>((tok * n_head + h) * hd + d);
            tol[e] = rel * pv + kU32 * std::fabs(ref[e]) + kTiny;
          }
        }
      }
    }
  }
  return tol;
}

struct AttnCase {
  const char* name;
  int64_t page_size, n_kv_head, group, head_dim;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (kv_len, n_new)
};

void run_attention(DType t, const AttnCase& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(t));
  int64_t pages_needed = 0;
  for (auto [len, n_new] : c.seqs) pages_needed += (len + c.page_size - 1) / c.page_size;
  Pool pool(t, c.page_size, c.n_kv_head, c.head_dim, pages_needed + 5);
  const Batch b = make_batch(pool, c.seqs, seed);
  const int64_t n_head = c.n_kv_head * c.group;
  const int64_t row = n_head * c.head_dim;
  const int64_t n_tok = b.n_tokens();
  const int64_t q_stride = row + 3;
  std::vector<float> q(static_cast<size_t>(n_tok * q_stride), NAN);  // NaN in the gaps: never read
  const auto qv = test::random_floats(static_cast<size_t>(n_tok * row), -2.0f, 2.0f, seed + 99);
  for (int64_t i = 0; i < n_tok; ++i) std::copy_n(qv.begin() + i * row, row, q.begin() + i * q_stride);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  GuardedRows out(n_tok, row, row + 2);
  std::vector<float> ref_out(static_cast<size_t>(n_tok * row));
  ASSERT_EQ(paged_attention(out.data(), out.stride(), q.data(), q_stride, n_head, pool.view(),
                            b.view(), scale),
            Status::kOk);
  ASSERT_EQ(paged_attention_ref(ref_out.data(), row, q.data(), q_stride, n_head, pool.view(),
                                b.view(), scale),
            Status::kOk);
  EXPECT_TRUE(out.canaries_intact());
  const auto ref = test::to_double(ref_out);
  const auto tol = attention_bound(pool, b, q, q_stride, n_head, scale, ref);
  EXPECT_TRUE(test::all_close(
      out.rows(), ref, [&](size_t i) { return tol[i]; }, "quantized attention"));
}

// Parameters: the format, and whether the AVX-512 kernel may run (false: the
// portable one, whatever the CPU).
class QuantAttention : public ::testing::TestWithParam<std::tuple<DType, bool>> {
 protected:
  void SetUp() override { saved_ = restrict_cpu_features({std::get<1>(GetParam()), true, true}); }
  void TearDown() override { restrict_cpu_features(saved_); }
  CpuFeatures saved_;
};

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

INSTANTIATE_TEST_SUITE_P(Formats, QuantAttention,
                         ::testing::Combine(::testing::ValuesIn(kAllFormats), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_native" : "_portable");
                         });

// kv_append quantizes every row exactly as quantize_row_ref does (per kv
// head, so per token along head_dim), writes only its slots, and folds the
// f32 keys into the page min/max in token order, over several calls.
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
    // A constant value row comes back exactly (values are stored unrotated).
    const auto v0 = a.row_values(a.v, 5, 1);  // slot 5: the constant row of the first call
    for (float x : v0) EXPECT_EQ(x, 0.75f);
  }
}

// Keys are stored rotated: each group times H_G / sqrt(G). Bounds, with
// s = log2(G) + 1 rounding stages (the butterflies and the scaling), u = 2^-24:
// one pass errs per element by at most s u sum|x| / sqrt(G) <= s u ||x||_2;
// applied twice (H_G / sqrt(G) is orthonormal and its own inverse), the first
// pass's error keeps its norm, <= sqrt(G) s u ||x|| ... <= s u sum|x|, and the
// second pass adds s u ||x||, so |H H x - x| <= 2 s u sum|x| per element.
// A dot product of two rotated groups errs by at most
// ||e_q|| ||x|| + ||e_x|| ||q|| (+ second order) <= 2 sqrt(G) s u ||q|| ||x||.
// A one-hot group maps to a flat one of +-1/sqrt(G), and a stored key row
// dequantized and rotated back is within the format's rounding of the key.
TEST(KvRotate, IsItsOwnInverseAndKeepsDotProducts) {
  for (int64_t g : {32, 64, 128}) {
    SCOPED_TRACE(g);
    const int64_t n = 3 * g;
    const auto x = test::random_floats(static_cast<size_t>(n), -4, 4, 11);
    const auto q = test::random_floats(static_cast<size_t>(n), -4, 4, 12);
    std::vector<float> hx(n), hhx(n), hq(n);
    kv_rotate_groups(x.data(), hx.data(), n, g);
    kv_rotate_groups(hx.data(), hhx.data(), n, g);
    kv_rotate_groups(q.data(), hq.data(), n, g);
    const double stages = std::log2(static_cast<double>(g)) + 1;
    for (int64_t b = 0; b < n; b += g) {
      double sum_abs = 0, dot = 0, dot_h = 0, qx_abs = 0, norm_q = 0, norm_x = 0;
      for (int64_t i = b; i < b + g; ++i) {
        sum_abs += std::fabs(x[i]);
        dot += double(q[i]) * x[i];
        dot_h += double(hq[i]) * hx[i];
        qx_abs += std::fabs(double(q[i]) * x[i]);
        norm_q += double(q[i]) * q[i];
        norm_x += double(x[i]) * x[i];
      }
      for (int64_t i = b; i < b + g; ++i) {
        EXPECT_NEAR(hhx[i], x[i], 2 * stages * kU32 * sum_abs) << i;
      }
      const double tol = 2 * stages * kU32 * std::sqrt(norm_q * norm_x) * std::sqrt(double(g)) +
                         g * kU32 * qx_abs;
      EXPECT_NEAR(dot_h, dot, tol);
    }
    std::vector<float> one(g, 0.0f), h1(g);
    one[5] = 1.0f;
    kv_rotate_groups(one.data(), h1.data(), g, g);
    for (int64_t i = 0; i < g; ++i) {
      EXPECT_EQ(std::fabs(h1[i]), 1.0f / std::sqrt(static_cast<float>(g))) << i;
    }
  }
  // A stored key, dequantized and rotated back: within q8a32's rounding
  // (half a step of its group's range, (max - min) / 255, on the rotated
  // values; the inverse rotation keeps the error's norm).
  const int64_t hd = 64;
  Pool pool(DType::kQ8A32, 4, 1, hd, 1);
  const auto k = test::random_floats(hd, -3, 3, 21);
  const auto v = test::random_floats(hd, -3, 3, 22);
  const int64_t slot = 2;
  ASSERT_EQ(kv_append_quant(pool.k.data(), pool.v.data(), 1, DType::kQ8A32, 4, 1, hd, k.data(), hd,
                            v.data(), hd, &slot, 1, nullptr, nullptr),
            Status::kOk);
  const auto stored = pool.row_values(pool.k, slot, 0);
  std::vector<float> hk(hd), back(hd);
  kv_rotate_groups(k.data(), hk.data(), hd, 32);
  kv_rotate_groups(stored.data(), back.data(), hd, 32);
  for (int64_t b = 0; b < hd; b += 32) {
    const float mn = *std::min_element(hk.begin() + b, hk.begin() + b + 32);
    const float mx = *std::max_element(hk.begin() + b, hk.begin() + b + 32);
    double err2 = 0;
    for (int64_t i = b; i < b + 32; ++i) err2 += (back[i] - k[i]) * double(back[i] - k[i]);
    // Every rotated element within half a step (plus f16 scale rounding):
    // the group's error norm at most sqrt(32) of that.
    EXPECT_LE(std::sqrt(err2), std::sqrt(32.0) * 0.51 * (mx - mn) / 255 + 1e-5) << b;
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
  Batch b = make_batch(pool, {{5, 1}}, 9);
  KvPages odd = pool.view();
  odd.head_dim = 48;  // not whole groups
  std::vector<float> q(64), o(64);
  EXPECT_EQ(paged_attention(o.data(), 64, q.data(), 64, 1, odd, b.view(), 1.0f),
            Status::kUnsupported);
  b.page_ids[0] = 2;  // outside the pool
  EXPECT_EQ(paged_attention(o.data(), 64, q.data(), 64, 1, pool.view(), b.view(), 1.0f),
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
  g.dtype = DType::kQ4A64;  // 36 bytes per 64 values
  EXPECT_EQ(g.page_bytes(), 16u * 3 * 36);
  EXPECT_EQ(g.bytes_per_page(), 2u * (2 * 16 * 3 * 36 + 2 * 3 * 64 * 4));
  KvGeometry f16 = g;
  f16.dtype = DType::kF16;
  EXPECT_EQ(f16.page_bytes(), 16u * 3 * 64 * 2);
  // The same budget holds 2.77x the pages: K and V shrink 3.56x, the f32 key
  // min/max (2 x 192 floats per page and layer) do not.
  const uint64_t budget = 40 * f16.bytes_per_page();
  KvCache kv(be, g, budget);
  EXPECT_EQ(kv.pool().max_pages(), static_cast<int64_t>(budget / g.bytes_per_page()));
  EXPECT_EQ(kv.pool().max_pages(), 40 * 27648 / 9984);
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
