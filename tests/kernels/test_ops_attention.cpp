// The CUDA paged KV cache ops against the CPU references: kv_append and
// page_key_minmax bit for bit (pages compared byte for byte, with guard bytes
// around every page), and attention (decode with 1..32 key splits, prefill
// and chunked prefill with several row splits, mixed batches, GQA/MQA/MHA,
// every supported head_dim, page sizes 1, 5, 7, 16) every element within a
// bound derived from f32 rounding; device-side errors for malformed batches.
//
// Attention bound (first order, u = 2^-24, e = CUDA's expf error), per output
// element, as the CPU test's with this kernel's counts: a score is within
// E_j = (hd + 2) u scale sum_d |q_d k_jd| (a lane's multiply-adds plus a
// 5-step warp sum); every probability is rescaled at most B + 1 times, B =
// ceil(n_keys / 32) tiles of one warp + the merge of the warps + the merge
// of the splits, each exp within e + R u (R the score range); the sums over
// keys, warps and splits and the two divisions add (n_keys + 2B + 6 + S) u
// (S splits):
//   |out_d - ref_d| <= (2 E_max + 2 (B + 1)(e + R u) + (n_keys + 2B + 6 + S) u)
//                      * sum_j p_j |v_jd| + u |ref_d|.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "support/attention_bound.h"
#include "support/paged_batch.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/launch_plan.h"
#include "kernels/cuda/ops.h"

namespace strata::cuda {
namespace {

using test::DeviceArray;
using test::DeviceBytes;
using test::DeviceErrorBox;
using test::DeviceRows;
using test::kExpErr;
using test::kTiny;
using test::kU32;

constexpr cudaStream_t kStream = nullptr;

using test::AttnCase;
using test::kAttentionCases;
using test::PagedBatch;
const auto elem_bytes = test::kv_elem_bytes;

// Pages allocated one by one on the device (each with guard bytes) and their
// host mirrors, which the CPU references read.
struct Pool {
  DType dtype;
  int64_t page_size, n_kv_head, head_dim, n_pages;
  size_t page_bytes;
  std::vector<std::unique_ptr<DeviceBytes>> k_dev, v_dev;
  std::vector<std::vector<uint8_t>> k_host, v_host;
  std::vector<void*> k_host_ptr, v_host_ptr;
  std::unique_ptr<DeviceArray<void*>> k_arr, v_arr;
  std::unique_ptr<DeviceArray<float>> k_min, k_max;

  Pool(DType t, int64_t ps, int64_t nkv, int64_t hd, int64_t n)
      : dtype(t), page_size(ps), n_kv_head(nkv), head_dim(hd), n_pages(n) {
    page_bytes = static_cast<size_t>(ps * nkv * hd * elem_bytes(t));
    std::vector<void*> kd, vd;
    for (int64_t i = 0; i < n; ++i) {
      k_dev.push_back(std::make_unique<DeviceBytes>(page_bytes));
      v_dev.push_back(std::make_unique<DeviceBytes>(page_bytes));
      k_host.emplace_back(page_bytes, static_cast<uint8_t>(0x7b));
      v_host.emplace_back(page_bytes, static_cast<uint8_t>(0x7b));
      k_dev.back()->upload(k_host.back().data(), page_bytes);
      v_dev.back()->upload(v_host.back().data(), page_bytes);
      kd.push_back(k_dev.back()->data());
      vd.push_back(v_dev.back()->data());
    }
    for (int64_t i = 0; i < n; ++i) {
      k_host_ptr.push_back(k_host[static_cast<size_t>(i)].data());
      v_host_ptr.push_back(v_host[static_cast<size_t>(i)].data());
    }
    k_arr = std::make_unique<DeviceArray<void*>>(kd);
    v_arr = std::make_unique<DeviceArray<void*>>(vd);
    const size_t mm = static_cast<size_t>(n * nkv * hd);
    k_min = std::make_unique<DeviceArray<float>>(std::vector<float>(mm, -7.0f));
    k_max = std::make_unique<DeviceArray<float>>(std::vector<float>(mm, 7.0f));
  }
  int64_t row() const { return n_kv_head * head_dim; }
  KvLayer layer() const {
    KvLayer l;
    l.k_pages = k_arr->data();
    l.v_pages = v_arr->data();
    l.k_min = k_min->data();
    l.k_max = k_max->data();
    l.n_pages = n_pages;
    l.dtype = dtype;
    l.page_size = page_size;
    l.n_kv_head = n_kv_head;
    l.head_dim = head_dim;
    return l;
  }
  cpu::KvPages host_view() const {
    cpu::KvPages p;
    p.k = const_cast<const void* const*>(k_host_ptr.data());
    p.v = const_cast<const void* const*>(v_host_ptr.data());
    p.n_pages = n_pages;
    p.dtype = dtype;
    p.page_size = page_size;
    p.n_kv_head = n_kv_head;
    p.head_dim = head_dim;
    return p;
  }
  // Device pages equal their host mirrors byte for byte; guards intact.
  ::testing::AssertionResult same_as_host() const {
    for (int64_t i = 0; i < n_pages; ++i) {
      for (int kv = 0; kv < 2; ++kv) {
        const DeviceBytes& d = *(kv == 0 ? k_dev : v_dev)[static_cast<size_t>(i)];
        if (auto g = d.guards_intact(); !g) return g << " (page " << i << ")";
        if (d.download() != (kv == 0 ? k_host : v_host)[static_cast<size_t>(i)]) {
          return ::testing::AssertionFailure()
                 << (kv == 0 ? "K" : "V") << " page " << i << " differs from kv_append_ref's";
        }
      }
    }
    return ::testing::AssertionSuccess();
  }
};


struct DeviceBatch {
  DeviceArray<int32_t> q_indptr, kv_len, page_indptr, page_ids;
  explicit DeviceBatch(const PagedBatch& b)
      : q_indptr(b.q_indptr), kv_len(b.kv_len), page_indptr(b.page_indptr), page_ids(b.page_ids) {}
  AttentionSeqs view(int64_t n_seq) const {
    AttentionSeqs s;
    s.n_seq = n_seq;
    s.q_indptr = q_indptr.data();
    s.kv_len = kv_len.data();
    s.page_indptr = page_indptr.data();
    s.page_ids = page_ids.data();
    return s;
  }
};

// Sequences (kv_len, n_new) on pages drawn at random from the pool; every
// key and value written by the CUDA kv_append (one call for all) and by
// kv_append_ref into the host mirrors, then compared.
PagedBatch make_batch(Pool& pool, const std::vector<std::pair<int32_t, int32_t>>& seqs,
                      uint32_t seed) {
  PagedBatch b = test::layout_paged_batch(seqs, pool.page_size, pool.n_pages, seed);
  const std::vector<int64_t> slots = b.all_slots();
  const int64_t row = pool.row();
  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t stride = row + 3;
  auto kr = test::random_floats(static_cast<size_t>(n * stride), -1.5f, 1.5f, seed + 1);
  auto vr = test::random_floats(static_cast<size_t>(n * stride), -1.0f, 1.0f, seed + 2);
  DeviceArray<float> k_dev(kr), v_dev(vr);
  DeviceArray<int64_t> slots_dev(slots);
  DeviceErrorBox err;
  EXPECT_EQ(kv_append(pool.k_arr->data(), pool.v_arr->data(), pool.n_pages, pool.dtype,
                      pool.page_size, pool.n_kv_head, pool.head_dim, k_dev.data(), stride,
                      v_dev.data(), stride, slots_dev.data(), n, err.get(), kStream),
            Status::kOk);
  EXPECT_EQ(cpu::kv_append_ref(pool.k_host_ptr.data(), pool.v_host_ptr.data(), pool.n_pages,
                               pool.dtype, pool.page_size, pool.n_kv_head, pool.head_dim, kr.data(),
                               stride, vr.data(), stride, slots.data(), n),
            Status::kOk);
  EXPECT_EQ(err.read().code, 0u);
  EXPECT_TRUE(pool.same_as_host());
  return b;
}

// Tolerances of every output element (support/attention_bound.h): with B
// the key tiles plus two, a key goes through at most B + 1 exponentials;
// `splits` partial states are merged.
std::vector<double> attention_bound(const Pool& pool, const PagedBatch& b, const std::vector<float>& q,
                                    int64_t q_stride, int64_t n_head, float scale, int64_t splits,
                                    const std::vector<double>& ref) {
  const test::AttentionHeads a{n_head, pool.n_kv_head, pool.head_dim, pool.page_size};
  return test::attention_bound(
      b, a, q.data(), q_stride, scale, ref, test::stored_rows(pool.dtype, pool.k_host_ptr, a),
      test::stored_rows(pool.dtype, pool.v_host_ptr, a),
      [splits](int64_t n_keys, double e_max, double range) {
        const int64_t blocks = (n_keys + kAttnKeyTile - 1) / kAttnKeyTile + 2;
        return 2 * e_max + 2 * static_cast<double>(blocks + 1) * (kExpErr + range * kU32) +
               static_cast<double>(n_keys + 2 * blocks + 6 + splits) * kU32;
      });
}

AttentionPlan make_plan(int64_t n_seq, int64_t n_head, int64_t hd, int64_t decode_splits,
                        int64_t prefill_splits) {
  AttentionPlan p;
  p.n_seq = n_seq;
  p.n_head = n_head;
  p.head_dim = hd;
  p.decode_splits = decode_splits;
  p.prefill_splits = prefill_splits;
  p.partial_bytes =
      decode_splits > 1
          ? align_workspace(static_cast<size_t>(n_seq * n_head * decode_splits * (hd + 2)) * 4)
          : 0;
  return p;
}


void run_attention(DType dtype, const AttnCase& c, int64_t decode_splits, int64_t prefill_splits,
                   uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(dtype) << " splits "
                                    << decode_splits << "/" << prefill_splits);
  int64_t pages_needed = 0;
  for (auto [len, n_new] : c.seqs) pages_needed += (len + c.page_size - 1) / c.page_size;
  Pool pool(dtype, c.page_size, c.n_kv_head, c.head_dim, pages_needed + 5);
  const PagedBatch b = make_batch(pool, c.seqs, seed);
  const int64_t n_seq = static_cast<int64_t>(c.seqs.size());
  const int64_t n_head = c.n_kv_head * c.group;
  const int64_t row = n_head * c.head_dim;
  const int64_t n_tok = b.n_tokens();
  const int64_t q_stride = row + 3;
  std::vector<float> q(static_cast<size_t>(n_tok * q_stride), NAN);  // NaN in the gaps: never read
  const auto qv = test::random_floats(static_cast<size_t>(n_tok * row), -2.0f, 2.0f, seed + 99);
  for (int64_t t = 0; t < n_tok; ++t) {
    std::copy_n(qv.begin() + t * row, row, q.begin() + t * q_stride);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  // Page key min/max of every used page, bit for bit.
  {
    DeviceArray<int32_t> touched(b.touched), filled(b.n_filled);
    DeviceErrorBox err;
    ASSERT_EQ(
        page_key_minmax(pool.k_min->data(), pool.k_max->data(),
                        const_cast<const void* const*>(pool.k_arr->data()), pool.n_pages, dtype,
                        c.page_size, c.n_kv_head, c.head_dim, touched.data(), filled.data(),
                        static_cast<int64_t>(b.touched.size()), err.get(), kStream),
        Status::kOk);
    const size_t mm = static_cast<size_t>(pool.n_pages * pool.row());
    std::vector<float> mn_ref(mm, -7.0f), mx_ref(mm, 7.0f);
    ASSERT_EQ(
        cpu::page_key_minmax_ref(mn_ref.data(), mx_ref.data(), pool.host_view().k, pool.n_pages,
                                 dtype, c.page_size, c.n_kv_head, c.head_dim, b.touched.data(),
                                 b.n_filled.data(), static_cast<int64_t>(b.touched.size())),
        Status::kOk);
    EXPECT_EQ(err.read().code, 0u);
    EXPECT_TRUE(test::same_bits(pool.k_min->download(), mn_ref, "k_min"));
    EXPECT_TRUE(test::same_bits(pool.k_max->download(), mx_ref, "k_max"));
  }

  DeviceBatch db(b);
  DeviceArray<float> q_dev(q);
  DeviceRows out(n_tok, row, row + 2);
  const AttentionPlan plan = make_plan(n_seq, n_head, c.head_dim, decode_splits, prefill_splits);
  DeviceBytes partials(std::max<size_t>(plan.partial_bytes, 4));
  DeviceErrorBox err;
  ASSERT_EQ(attention(out.data(), out.stride(), q_dev.data(), q_stride, n_head, pool.layer(),
                      db.view(n_seq), scale, plan, static_cast<float*>(partials.data()), err.get(),
                      kStream),
            Status::kOk)
      << last_detail();
  std::vector<float> ref_out(static_cast<size_t>(n_tok * row));
  ASSERT_EQ(cpu::paged_attention_ref(ref_out.data(), row, q.data(), q_stride, n_head,
                                     pool.host_view(), b.view<cpu::AttentionBatch>(), scale),
            Status::kOk);
  EXPECT_EQ(err.read().code, 0u) << describe(err.read());
  EXPECT_TRUE(out.canaries_intact());
  EXPECT_TRUE(partials.guards_intact());
  const auto ref = test::to_double(ref_out);
  const auto tol = attention_bound(pool, b, q, q_stride, n_head, scale,
                                   std::max(decode_splits, prefill_splits), ref);
  EXPECT_TRUE(test::all_close(
      out.rows(), ref, [&](size_t i) { return tol[i]; }, "attention"));
}

class CudaAttention : public ::testing::TestWithParam<DType> {};

TEST_P(CudaAttention, MatchesReference) {
  STRATA_REQUIRE_GPU();
  const DType t = GetParam();
  std::vector<AttnCase> cases = kAttentionCases;
  const std::vector<AttnCase> more = {
      {"mha page size 1", 1, 4, 1, 96, {{3, 3}, {10, 2}, {6, 1}}},
      {"mha 112", 16, 2, 1, 112, {{31, 31}, {33, 1}}},
      {"mqa 40 heads", 5, 1, 40, 256, {{12, 4}, {3, 1}, {70, 1}}},
  };
  cases.insert(cases.end(), more.begin(), more.end());
  uint32_t seed = 1000;
  for (const auto& c : cases) {
    for (auto [ds, ps] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 2}, {32, 5}}) {
      run_attention(t, c, ds, ps, seed += 17);
    }
  }
}

TEST_P(CudaAttention, LongContexts) {
  STRATA_REQUIRE_GPU();
  const DType t = GetParam();
  run_attention(t, {"long decode", 16, 2, 4, 128, {{1000, 1}, {3000, 1}, {33, 1}}}, 7, 1, 51);
  run_attention(t, {"long decode, many splits", 16, 2, 4, 128, {{3000, 1}}}, 32, 1, 52);
  run_attention(t, {"long prefill", 16, 1, 1, 64, {{300, 300}, {260, 200}}}, 1, 3, 53);
}

INSTANTIATE_TEST_SUITE_P(KvDtype, CudaAttention,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CudaAttentionErrors, NonFiniteStaysWhereTheReferencePutsIt) {
  STRATA_REQUIRE_GPU();
  Pool pool(DType::kF32, 4, 1, 64, 8);
  const PagedBatch b = make_batch(pool, {{6, 2}, {5, 1}}, 3);
  // A NaN in one value of key 2 of sequence 0 (device and host), and in one
  // query of sequence 1.
  const int32_t page = b.page_ids[0];
  static_cast<float*>(pool.v_host_ptr[static_cast<size_t>(page)])[2 * 64 + 5] = NAN;
  pool.v_dev[static_cast<size_t>(page)]->upload(pool.v_host[static_cast<size_t>(page)].data(),
                                                pool.page_bytes);
  std::vector<float> q = test::random_floats(3 * 2 * 64, -1, 1, 4);
  q[2 * 128 + 64 + 3] = NAN;
  DeviceBatch db(b);
  DeviceArray<float> q_dev(q);
  for (int64_t splits : {1, 4}) {
    DeviceRows out(3, 128, 128);
    const AttentionPlan plan = make_plan(2, 2, 64, splits, splits);
    DeviceBytes partials(std::max<size_t>(plan.partial_bytes, 4));
    ASSERT_EQ(attention(out.data(), 128, q_dev.data(), 128, 2, pool.layer(), db.view(2), 0.35f,
                        plan, static_cast<float*>(partials.data()), nullptr, kStream),
              Status::kOk);
    std::vector<float> ref(q.size());
    ASSERT_EQ(cpu::paged_attention_ref(ref.data(), 128, q.data(), 128, 2, pool.host_view(),
                                       b.view<cpu::AttentionBatch>(), 0.35f),
              Status::kOk);
    const auto got = out.rows();
    int n_nan = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(std::isnan(got[i]), std::isnan(ref[i])) << "splits " << splits << " element " << i;
      n_nan += std::isnan(ref[i]);
    }
    EXPECT_EQ(n_nan, 2 * 2 + 64);  // dim 5 of both heads of both queries of seq 0; head 1 of seq 1
  }
}

TEST(CudaAttentionErrors, MalformedBatchesAreReportedAndWriteNothing) {
  STRATA_REQUIRE_GPU();
  Pool pool(DType::kBF16, 4, 2, 64, 6);
  const PagedBatch good = make_batch(pool, {{6, 2}, {3, 3}}, 5);
  const std::vector<float> q(5 * 4 * 64, 0.5f);
  DeviceArray<float> q_dev(q);
  auto expect = [&](const PagedBatch& b, DeviceErrorCode want, int64_t want_row, const char* what) {
    SCOPED_TRACE(what);
    DeviceBatch db(b);
    DeviceRows out(5, 256, 256);
    DeviceErrorBox err;
    const AttentionPlan plan = make_plan(2, 4, 64, 1, 1);
    ASSERT_EQ(attention(out.data(), 256, q_dev.data(), 256, 4, pool.layer(), db.view(2), 1.0f, plan,
                        nullptr, err.get(), kStream),
              Status::kOk);
    const DeviceError e = err.read();
    EXPECT_EQ(e.code, static_cast<uint32_t>(want)) << describe(e);
    if (want == DeviceErrorCode::kNone) return;
    EXPECT_EQ(e.row, want_row);
    // The bad sequence's rows are unwritten.
    const auto got = out.rows();
    const size_t s = static_cast<size_t>(want_row);
    for (int64_t r = good.q_indptr[s]; r < good.q_indptr[s + 1]; ++r) {
      for (int64_t i = 0; i < 256; ++i) {
        ASSERT_EQ(test::bits_of(got[static_cast<size_t>(r * 256 + i)]), DeviceRows::kCanary);
      }
    }
  };
  expect(good, DeviceErrorCode::kNone, 0, "good");
  PagedBatch b = good;
  b.kv_len[0] = 1;  // fewer keys than new tokens
  expect(b, DeviceErrorCode::kSequence, 0, "kv_len < n_new");
  b = good;
  b.kv_len[1] = 5;  // needs 2 pages, has 1
  expect(b, DeviceErrorCode::kSequence, 1, "too few pages");
  b = good;
  b.page_ids[1] = 6;  // outside the pool
  expect(b, DeviceErrorCode::kAttentionPage, 0, "page id");
  b = good;
  b.page_ids[2] = -1;
  expect(b, DeviceErrorCode::kAttentionPage, 1, "negative page id");
}

TEST(CudaAttentionErrors, RejectsBadArgumentsOnTheHost) {
  KvLayer kv;
  kv.k_pages = reinterpret_cast<void* const*>(uintptr_t{256});
  kv.v_pages = kv.k_pages;
  kv.n_pages = 4;
  kv.dtype = DType::kF16;
  kv.page_size = 16;
  kv.n_kv_head = 2;
  kv.head_dim = 72;
  AttentionSeqs seqs;
  seqs.n_seq = 1;
  seqs.q_indptr = seqs.kv_len = seqs.page_indptr = seqs.page_ids =
      reinterpret_cast<const int32_t*>(uintptr_t{256});
  float* p = reinterpret_cast<float*>(uintptr_t{256});
  AttentionPlan plan = make_plan(1, 4, 72, 1, 1);
  clear_detail();
  EXPECT_EQ(attention(p, 4 * 72, p, 4 * 72, 4, kv, seqs, 1.0f, plan, nullptr, nullptr, kStream),
            Status::kUnsupported);
  EXPECT_EQ(last_detail(), "head_dim 72 (supported: 64, 80, 96, 112, 128, 256)");
  kv.head_dim = 64;
  plan = make_plan(1, 4, 64, 1, 1);
  EXPECT_EQ(attention(p, 4 * 64, p, 4 * 64, 3, kv, seqs, 1.0f, plan, nullptr, nullptr, kStream),
            Status::kInvalidArgument);  // heads not a multiple of kv heads
  EXPECT_EQ(attention(p, 4 * 64 - 1, p, 4 * 64, 4, kv, seqs, 1.0f, plan, nullptr, nullptr, kStream),
            Status::kInvalidArgument);
  plan = make_plan(1, 4, 64, 2, 1);
  EXPECT_EQ(attention(p, 4 * 64, p, 4 * 64, 4, kv, seqs, 1.0f, plan, nullptr, nullptr, kStream),
            Status::kInvalidArgument);  // partials missing
  plan = make_plan(2, 4, 64, 1, 1);
  EXPECT_EQ(attention(p, 4 * 64, p, 4 * 64, 4, kv, seqs, 1.0f, plan, nullptr, nullptr, kStream),
            Status::kInvalidArgument);  // plan for another batch
  kv.dtype = DType::kQ8S32;
  EXPECT_EQ(attention(p, 4 * 64, p, 4 * 64, 4, kv, seqs, 1.0f, plan, nullptr, nullptr, kStream),
            Status::kUnsupported);
}

// ---- kv_append / page_key_minmax special values and errors ----

TEST(CudaKvAppend, SpecialValuesBitForBitAndBadSlotsReported) {
  STRATA_REQUIRE_GPU();
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(t));
    Pool pool(t, 5, 3, 24, 7);
    const int64_t row = 3 * 24;
    const std::vector<int64_t> slots = {0, 4, 5, 17, 34, 12, 30};
    auto k = test::random_floats(slots.size() * (row + 2), -3, 3, 1);
    auto v = test::random_floats(slots.size() * (row + 2), -3, 3, 2);
    k[5] = NAN;
    v[7] = -INFINITY;
    v[9] = 1e-41f;              // subnormal in f32
    v[10] = 70000.0f;           // overflows f16
    k[row + 2 + 3] = 65519.0f;  // rounds to f16 max
    DeviceArray<float> k_dev(k), v_dev(v);
    DeviceArray<int64_t> slots_dev(slots);
    DeviceErrorBox err;
    ASSERT_EQ(kv_append(pool.k_arr->data(), pool.v_arr->data(), 7, t, 5, 3, 24, k_dev.data(),
                        row + 2, v_dev.data(), row + 2, slots_dev.data(),
                        static_cast<int64_t>(slots.size()), err.get(), kStream),
              Status::kOk);
    ASSERT_EQ(cpu::kv_append_ref(pool.k_host_ptr.data(), pool.v_host_ptr.data(), 7, t, 5, 3, 24,
                                 k.data(), row + 2, v.data(), row + 2, slots.data(),
                                 static_cast<int64_t>(slots.size())),
              Status::kOk);
    EXPECT_EQ(err.read().code, 0u);
    EXPECT_TRUE(pool.same_as_host());

    // Min/max over partly filled pages, with the NaN key element.
    const std::vector<int32_t> ids = {0, 3, 6, 2};
    const std::vector<int32_t> fill = {5, 3, 1, 3};
    DeviceArray<int32_t> ids_dev(ids), fill_dev(fill);
    ASSERT_EQ(page_key_minmax(pool.k_min->data(), pool.k_max->data(),
                              const_cast<const void* const*>(pool.k_arr->data()), 7, t, 5, 3, 24,
                              ids_dev.data(), fill_dev.data(), 4, err.get(), kStream),
              Status::kOk);
    std::vector<float> mn(static_cast<size_t>(7 * row), -7.0f), mx(mn.size(), 7.0f);
    ASSERT_EQ(cpu::page_key_minmax_ref(mn.data(), mx.data(), pool.host_view().k, 7, t, 5, 3, 24,
                                       ids.data(), fill.data(), 4),
              Status::kOk);
    EXPECT_EQ(err.read().code, 0u);
    EXPECT_TRUE(test::same_bits(pool.k_min->download(), mn, "k_min"));
    EXPECT_TRUE(test::same_bits(pool.k_max->download(), mx, "k_max"));

    // A slot past the pool: reported, its row unwritten, the others written.
    DeviceArray<int64_t> bad(std::vector<int64_t>{1, 35});
    ASSERT_EQ(kv_append(pool.k_arr->data(), pool.v_arr->data(), 7, t, 5, 3, 24, k_dev.data(),
                        row + 2, v_dev.data(), row + 2, bad.data(), 2, err.get(), kStream),
              Status::kOk);
    DeviceError e = err.read();
    EXPECT_EQ(e.code, static_cast<uint32_t>(DeviceErrorCode::kSlot));
    EXPECT_EQ(e.row, 1);
    EXPECT_EQ(e.value, 35);
    EXPECT_EQ(e.limit, 35);
    // Bad page id and fill in the min/max list.
    DeviceErrorBox err2, err3;
    DeviceArray<int32_t> bad_ids(std::vector<int32_t>{1, 7}), ok_fill(std::vector<int32_t>{2, 2});
    ASSERT_EQ(page_key_minmax(pool.k_min->data(), pool.k_max->data(),
                              const_cast<const void* const*>(pool.k_arr->data()), 7, t, 5, 3, 24,
                              bad_ids.data(), ok_fill.data(), 2, err2.get(), kStream),
              Status::kOk);
    e = err2.read();
    EXPECT_EQ(e.code, static_cast<uint32_t>(DeviceErrorCode::kPageId));
    EXPECT_EQ(e.value, 7);
    DeviceArray<int32_t> ok_ids(std::vector<int32_t>{1, 2}), bad_fill(std::vector<int32_t>{2, 6});
    ASSERT_EQ(page_key_minmax(pool.k_min->data(), pool.k_max->data(),
                              const_cast<const void* const*>(pool.k_arr->data()), 7, t, 5, 3, 24,
                              ok_ids.data(), bad_fill.data(), 2, err3.get(), kStream),
              Status::kOk);
    e = err3.read();
    EXPECT_EQ(e.code, static_cast<uint32_t>(DeviceErrorCode::kFill));
    EXPECT_EQ(e.value, 6);
    EXPECT_EQ(e.limit, 5);
  }
}

TEST(CudaKvAppend, RejectsBadArguments) {
  void* const* pages = reinterpret_cast<void* const*>(uintptr_t{256});
  const float* p = reinterpret_cast<const float*>(uintptr_t{256});
  const int64_t* slots = reinterpret_cast<const int64_t*>(uintptr_t{256});
  EXPECT_EQ(kv_append(pages, pages, 4, DType::kQ8S32, 16, 2, 64, p, 128, p, 128, slots, 1, nullptr,
                      kStream),
            Status::kUnsupported);
  EXPECT_EQ(kv_append(pages, pages, 4, DType::kF16, 16, 2, 64, p, 127, p, 128, slots, 1, nullptr,
                      kStream),
            Status::kInvalidArgument);
  EXPECT_EQ(kv_append(nullptr, pages, 4, DType::kF16, 16, 2, 64, p, 128, p, 128, slots, 1, nullptr,
                      kStream),
            Status::kInvalidArgument);
  EXPECT_EQ(page_key_minmax(nullptr, nullptr, pages, 4, DType::kF16, 16, 2, 64, nullptr, nullptr, 1,
                            nullptr, kStream),
            Status::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cuda
