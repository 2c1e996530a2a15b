// Every op of the Backend interface (kernels/backend.h), its cases written
// once, run on every backend present: CpuBackend; SeparateMemoryBackend (the
// CPU kernels behind separate, guarded device memory: the calling
// conventions of a device with memory of its own); and CudaBackend where a
// GPU is present (the same file built as the `cuda`-labelled
// test_backend_ops_cuda). Inputs go in and results come out through the
// backend's own copies; every element must be within the bound of the *_ref
// reference derived for any correct implementation: the summation order is
// free, and the error of exp, erfc, sin and cos is the largest of the
// backends' (kAnyExpErr, ...: the CPU's vec_math.h states 2^-22 and 2^-21,
// CUDA's expf and sinf 2 ulp, erfcf 4 ulp, each within half an ulp more of
// the exact value). Op-specific tests (special values, rejected arguments,
// fast paths) stay with each implementation's suite.
//
// Bounds (u = 2^-24):
//   rms_norm, layer_norm  support/op_bounds.h
//   activations           relu exact; silu (e + 4u)|ref|; gelu_tanh
//                         (e + (14|v| + 4)u)|ref| (v the tanh argument);
//                         gelu (e_erfc + (2.5x^2 + 8)u)|ref|; swiglu (e + 6u)|ref|
//   add, gather_rows, embedding  exact (a copy, a sum, a dequantization)
//   rope                  (|x0 c| + |x1 s|)(e_trig + 3u) + u|ref| on rotated dims
//   matmul                (k + 2) u sum|x w| + u|ref| (both sum the same rounded operands)
//   attention             per output element, with E = (hd + 2) u scale sum|q k|
//                         the largest score error, R the range of the scores:
//                         (2E + 2(n + 2)(e + R u) + (5n + 6) u) sum_j p_j |v_j| + u|ref|
//                         for n keys: any online softmax rescales at most once a key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/separate_memory_backend.h"
#include "kv/page_pool.h"
#include "quant/convert.h"
#include "quant/quant.h"
#include "support/all_close.h"
#include "support/attention_bound.h"
#include "support/op_bounds.h"
#include "support/paged_batch.h"
#include "support/random.h"
#ifdef STRATA_BACKEND_OPS_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda_test_util.h"
#endif

namespace strata {
namespace {

using test::kTiny;
using test::kU32;

// The largest error of any backend's exp, erfc and sin/cos (see above).
constexpr double kAnyExpErr = 2.5 * 0x1p-23;
constexpr double kAnyErfcErr = 4.5 * 0x1p-23;
constexpr double kAnyTrigErr = 2.5 * 0x1p-23;

// A row of n f32 values stored as dtype t.
void encode_row(DType t, const float* x, uint8_t* y, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      return f32_to_f16_row(x, reinterpret_cast<uint16_t*>(y), n);
    case DType::kBF16:
      return f32_to_bf16_row(x, reinterpret_cast<uint16_t*>(y), n);
    default:
      return quantize_row(t, x, y, n);
  }
}

// The backend a test runs on, or null (with the reason) when it is not here.
std::unique_ptr<Backend> open_backend(const std::string& name, std::string* why) {
  if (name == "cpu") return std::make_unique<CpuBackend>(2);
  if (name == "separate") return std::make_unique<SeparateMemoryBackend>(2, uint64_t{8} << 30);
#ifdef STRATA_BACKEND_OPS_CUDA
  if (name == "cuda") {
    if (test::have_gpu()) return std::make_unique<CudaBackend>(0);
    *why = "no CUDA device here";
    return nullptr;
  }
#endif
  *why = "backend " + name + " is not built in this test";
  return nullptr;
}

class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    be_ = open_backend(GetParam(), &why);
    if (!be_) GTEST_SKIP() << why;
  }
  // Device copies of host data, and host copies of device results.
  template <typename T>
  DeviceBuffer up(const std::vector<T>& v) {
    DeviceBuffer b = be_->alloc(std::max<size_t>(1, v.size() * sizeof(T)));
    if (!v.empty()) be_->copy_to_device(b.data(), v.data(), v.size() * sizeof(T));
    return b;
  }
  template <typename T>
  std::vector<T> down(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    be_->synchronize();
    if (n > 0) be_->copy_to_host(v.data(), b.data(), n * sizeof(T));
    return v;
  }
  // The [rows, d] part of rows `stride` apart.
  static std::vector<float> rows(const std::vector<float>& v, int64_t n_rows, int64_t d,
                                 int64_t stride) {
    std::vector<float> out(static_cast<size_t>(n_rows * d));
    for (int64_t r = 0; r < n_rows; ++r) {
      std::copy_n(v.begin() + r * stride, d, out.begin() + r * d);
    }
    return out;
  }
  std::unique_ptr<Backend> be_;
};

TEST_P(BackendOps, Norms) {
  uint32_t seed = 1;
  for (const test::RowCase& c : test::kNormCases) {
    for (const bool with_w : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "rows=" << c.rows << " d=" << c.d << " w=" << with_w);
      const int64_t xs = c.d + c.x_pad, ys = c.d + c.y_pad;
      const auto x = test::random_floats(static_cast<size_t>(c.rows * xs), -3.0f, 3.0f, seed++);
      const auto w = test::random_floats(static_cast<size_t>(c.d), 0.5f, 1.5f, seed++);
      const auto b = test::random_floats(static_cast<size_t>(c.d), -0.5f, 0.5f, seed++);
      DeviceBuffer xd = up(x), wd = up(w), bd = up(b);
      DeviceBuffer yd = be_->alloc(static_cast<size_t>(c.rows * ys) * sizeof(float));
      const float* wp = with_w ? wd.as<float>() : nullptr;
      std::vector<float> ref(static_cast<size_t>(c.rows * c.d));

      be_->rms_norm(yd.as<float>(), ys, xd.as<float>(), xs, wp, 1e-5f, c.rows, c.d);
      ASSERT_EQ(cpu::rms_norm_ref(ref.data(), c.d, x.data(), xs, with_w ? w.data() : nullptr, 1e-5f,
                                  c.rows, c.d),
                Status::kOk);
      const auto r = test::to_double(ref);
      const double rel = test::rms_norm_rel_bound(c.d);
      EXPECT_TRUE(test::all_close(
          rows(down<float>(yd, static_cast<size_t>(c.rows * ys)), c.rows, c.d, ys), r,
          [&](size_t i) { return rel * std::fabs(r[i]) + kTiny; }, "rms_norm"));

      be_->layer_norm(yd.as<float>(), ys, xd.as<float>(), xs, wp, with_w ? bd.as<float>() : nullptr,
                      1e-5f, c.rows, c.d);
      ASSERT_EQ(cpu::layer_norm_ref(ref.data(), c.d, x.data(), xs, with_w ? w.data() : nullptr,
                                    with_w ? b.data() : nullptr, 1e-5f, c.rows, c.d),
                Status::kOk);
      const auto lr = test::to_double(ref);
      std::vector<double> tol;
      for (int64_t row = 0; row < c.rows; ++row) {
        const std::vector<double> row_ref(lr.begin() + row * c.d, lr.begin() + (row + 1) * c.d);
        const auto t = test::layer_norm_bound(x.data() + row * xs, with_w ? w.data() : nullptr,
                                              row_ref, c.d, 1e-5);
        tol.insert(tol.end(), t.begin(), t.end());
      }
      EXPECT_TRUE(test::all_close(
          rows(down<float>(yd, static_cast<size_t>(c.rows * ys)), c.rows, c.d, ys), lr,
          [&](size_t i) { return tol[i]; }, "layer_norm"));
    }
  }
}

TEST_P(BackendOps, ActivationsSwigluAndAdd) {
  uint32_t seed = 100;
  for (const test::RowCase& c : test::kNormCases) {
    SCOPED_TRACE(::testing::Message() << "rows=" << c.rows << " d=" << c.d);
    const int64_t xs = c.d + c.x_pad, ys = c.d + c.y_pad;
    const size_t n_in = static_cast<size_t>(c.rows * xs), n_out = static_cast<size_t>(c.rows * ys);
    const auto x = test::random_floats(n_in, -6.0f, 6.0f, seed++);
    const auto u = test::random_floats(n_in, -2.0f, 2.0f, seed++);
    DeviceBuffer xd = up(x), ud = up(u), yd = be_->alloc(n_out * sizeof(float));
    std::vector<float> ref(static_cast<size_t>(c.rows * c.d));
    for (const ActFn f : {ActFn::kRelu, ActFn::kGelu, ActFn::kGeluTanh, ActFn::kSilu}) {
      be_->activation(f, yd.as<float>(), ys, xd.as<float>(), xs, c.rows, c.d);
      ASSERT_EQ(
          cpu::activation_ref(cpu::activation_of(f), ref.data(), c.d, x.data(), xs, c.rows, c.d),
          Status::kOk);
      const auto r = test::to_double(ref);
      EXPECT_TRUE(test::all_close(
          rows(down<float>(yd, n_out), c.rows, c.d, ys), r,
          [&](size_t i) {
            const double xi = x[static_cast<size_t>(i / c.d * xs + i % c.d)];
            return test::activation_rel_bound(f, xi, kAnyExpErr, kAnyErfcErr) * std::fabs(r[i]) +
                   kTiny;
          },
          "activation " + std::to_string(static_cast<int>(f))));
    }
    be_->swiglu(yd.as<float>(), ys, xd.as<float>(), xs, ud.as<float>(), xs, c.rows, c.d);
    ASSERT_EQ(cpu::swiglu_ref(ref.data(), c.d, x.data(), xs, u.data(), xs, c.rows, c.d),
              Status::kOk);
    const auto sr = test::to_double(ref);
    EXPECT_TRUE(test::all_close(
        rows(down<float>(yd, n_out), c.rows, c.d, ys), sr,
        [&](size_t i) { return (kAnyExpErr + 6 * kU32) * std::fabs(sr[i]) + kTiny; }, "swiglu"));
    be_->add(yd.as<float>(), ys, xd.as<float>(), xs, ud.as<float>(), xs, c.rows, c.d);
    ASSERT_EQ(cpu::add_ref(ref.data(), c.d, x.data(), xs, u.data(), xs, c.rows, c.d), Status::kOk);
    EXPECT_TRUE(test::all_close(
        rows(down<float>(yd, n_out), c.rows, c.d, ys), test::to_double(ref),
        [](size_t) { return 0.0; }, "add"));
  }
}

TEST_P(BackendOps, Rope) {
  struct Case {
    int64_t tokens, n_head, n_kv_head, head_dim, rot_dim;
    RopePairs pairs;
  };
  const std::vector<Case> cases = {{1, 1, 1, 2, 2, RopePairs::kHalf},
                                   {5, 9, 3, 64, 64, RopePairs::kHalf},
                                   {3, 4, 2, 96, 64, RopePairs::kHalf},
                                   {7, 8, 8, 64, 64, RopePairs::kInterleaved},
                                   {2, 32, 8, 128, 128, RopePairs::kHalf}};
  uint32_t seed = 200;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.tokens << " tokens, " << c.n_head << "/" << c.n_kv_head
                                      << " heads of " << c.head_dim << ", rot " << c.rot_dim);
    const int64_t qs = c.n_head * c.head_dim + 3, ks = c.n_kv_head * c.head_dim + 1;
    const auto q = test::random_floats(static_cast<size_t>(c.tokens * qs), -2.0f, 2.0f, seed++);
    const auto k = test::random_floats(static_cast<size_t>(c.tokens * ks), -2.0f, 2.0f, seed++);
    std::vector<int32_t> pos(static_cast<size_t>(c.tokens));
    for (int64_t t = 0; t < c.tokens; ++t)
      pos[static_cast<size_t>(t)] = static_cast<int32_t>(t * 37 % 1000);
    std::vector<float> inv(static_cast<size_t>(c.rot_dim / 2));
    for (size_t i = 0; i < inv.size(); ++i) {
      inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / c.rot_dim));
    }
    DeviceBuffer qd = up(q), kd = up(k), pd = up(pos), id = up(inv);
    be_->rope(qd.as<float>(), qs, c.n_head, kd.as<float>(), ks, c.n_kv_head, c.head_dim,
              pd.as<int32_t>(), c.tokens, id.as<float>(), c.rot_dim, c.pairs);
    std::vector<float> qr = q, kr = k;
    ASSERT_EQ(cpu::rope_ref(qr.data(), qs, c.n_head, kr.data(), ks, c.n_kv_head, c.head_dim,
                            pos.data(), c.tokens, inv.data(), c.rot_dim,
                            c.pairs == RopePairs::kHalf ? cpu::RopeLayout::kHalf
                                                        : cpu::RopeLayout::kInterleaved),
              Status::kOk);
    // The bound: the rotated pair's inputs (x0, x1) of each output element.
    auto check = [&](const std::vector<float>& in, const std::vector<float>& out,
                     const std::vector<float>& ref, int64_t heads, int64_t stride,
                     const char* what) {
      const auto r = test::to_double(ref);
      EXPECT_TRUE(test::all_close(
          out, r,
          [&](size_t i) {
            const int64_t t = static_cast<int64_t>(i) / stride,
                          e = static_cast<int64_t>(i) % stride;
            const int64_t d = e % c.head_dim;
            if (e >= heads * c.head_dim || d >= c.rot_dim) return 0.0;
            const int64_t half = c.rot_dim / 2;
            const int64_t j = c.pairs == RopePairs::kHalf ? d % half : d / 2;
            const int64_t base = t * stride + e - d;
            const int64_t i0 = c.pairs == RopePairs::kHalf ? j : 2 * j;
            const int64_t i1 = c.pairs == RopePairs::kHalf ? j + half : 2 * j + 1;
            const double ang =
                static_cast<double>(pos[static_cast<size_t>(t)]) * inv[static_cast<size_t>(j)];
            const double x0 = in[static_cast<size_t>(base + i0)],
                         x1 = in[static_cast<size_t>(base + i1)];
            return (std::fabs(x0 * std::cos(ang)) + std::fabs(x1 * std::sin(ang)) +
                    std::fabs(x1 * std::cos(ang)) + std::fabs(x0 * std::sin(ang))) *
                       (kAnyTrigErr + 3 * kU32) +
                   kU32 * std::fabs(r[i]) + kTiny;
          },
          what));
    };
    check(q, down<float>(qd, q.size()), qr, c.n_head, qs, "rope q");
    check(k, down<float>(kd, k.size()), kr, c.n_kv_head, ks, "rope k");
  }
}

TEST_P(BackendOps, GatherRowsAndEmbedding) {
  const int64_t d = 77, n_vocab = 40;
  const auto x = test::random_floats(static_cast<size_t>(n_vocab * d), -4.0f, 4.0f, 300);
  const std::vector<int32_t> ids = {0, 39, 7, 7, 12, 1};
  const int64_t n = static_cast<int64_t>(ids.size());
  DeviceBuffer xd = up(x), idd = up(ids);
  DeviceBuffer yd = be_->alloc(static_cast<size_t>(n * (d + 5)) * sizeof(float));
  be_->gather_rows(yd.as<float>(), d + 5, xd.as<float>(), d, idd.as<int32_t>(), n, d);
  std::vector<double> want;
  for (int32_t id : ids) want.insert(want.end(), x.begin() + id * d, x.begin() + (id + 1) * d);
  EXPECT_TRUE(test::all_close(
      rows(down<float>(yd, static_cast<size_t>(n * (d + 5))), n, d, d + 5), want,
      [](size_t) { return 0.0; }, "gather_rows"));
  // Embedding tables in every storage dtype (d a multiple of the groups).
  const int64_t e = 128;
  const auto t32 = test::random_floats(static_cast<size_t>(n_vocab * e), -1.0f, 1.0f, 301);
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8S32, DType::kQ4A32}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t rb = row_bytes(t, e);
    std::vector<uint8_t> table(rb * static_cast<size_t>(n_vocab));
    for (int64_t r = 0; r < n_vocab; ++r) {
      encode_row(t, t32.data() + r * e, table.data() + r * rb, e);
    }
    DeviceBuffer td = up(table);
    MatrixView view{td.data(), t, n_vocab, e, rb};
    DeviceBuffer ed = be_->alloc(static_cast<size_t>(n * e) * sizeof(float));
    be_->embedding(ed.as<float>(), e, view, idd.as<int32_t>(), n);
    std::vector<float> ref(static_cast<size_t>(n * e));
    ASSERT_EQ(cpu::embedding_ref(ref.data(), e, table.data(), t, rb, n_vocab, e, ids.data(), n),
              Status::kOk);
    EXPECT_TRUE(test::all_close(
        down<float>(ed, ref.size()), test::to_double(ref), [](size_t) { return 0.0; },
        "embedding"));
  }
}

TEST_P(BackendOps, Matmul) {
  struct Case {
    int64_t m, n, k;
  };
  const std::vector<Case> cases = {
      {1, 1, 32}, {3, 7, 64}, {17, 33, 96}, {32, 64, 576}, {5, 111, 128}};
  uint32_t seed = 400;
  for (const DType compute : {DType::kF32, DType::kBF16}) {
    for (const DType wt : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8S32, DType::kQ4A32}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message()
                     << "compute " << dtype_name(compute) << " w " << dtype_name(wt) << " " << c.m
                     << "x" << c.n << "x" << c.k);
        const auto x =
            test::random_floats(static_cast<size_t>(c.m * (c.k + 3)), -1.0f, 1.0f, seed++);
        const auto w32 = test::random_floats(static_cast<size_t>(c.n * c.k), -1.0f, 1.0f, seed++);
        const auto bias = test::random_floats(static_cast<size_t>(c.n), -0.5f, 0.5f, seed++);
        const size_t rb = row_bytes(wt, c.k);
        std::vector<uint8_t> w(rb * static_cast<size_t>(c.n));
        for (int64_t r = 0; r < c.n; ++r) {
          encode_row(wt, w32.data() + r * c.k, w.data() + r * rb, c.k);
        }
        DeviceBuffer xd = up(x), wd = up(w), bd = up(bias);
        DeviceBuffer yd = be_->alloc(static_cast<size_t>(c.m * c.n) * sizeof(float));
        be_->matmul(yd.as<float>(), c.n, xd.as<float>(), c.k + 3,
                    MatrixView{wd.data(), wt, c.n, c.k, rb}, bd.as<float>(), c.m, compute);
        std::vector<float> ref(static_cast<size_t>(c.m * c.n));
        const cpu::ComputeType ct =
            compute == DType::kBF16 ? cpu::ComputeType::kBF16 : cpu::ComputeType::kF32;
        ASSERT_EQ(cpu::matmul_ref(ref.data(), c.n, x.data(), c.k + 3, w.data(), wt, rb, bias.data(),
                                  c.m, c.n, c.k, ct),
                  Status::kOk);
        // sum |x w| over the operands as rounded for `compute`.
        std::vector<float> wrow(static_cast<size_t>(c.k));
        std::vector<double> abs_sum(ref.size(), 0.0);
        for (int64_t j = 0; j < c.n; ++j) {
          row_to_f32(wt, w.data() + j * rb, wrow.data(), c.k);
          for (int64_t i = 0; i < c.m; ++i) {
            double s = std::fabs(bias[static_cast<size_t>(j)]);
            for (int64_t p = 0; p < c.k; ++p) {
              float xv = x[static_cast<size_t>(i * (c.k + 3) + p)],
                    wv = wrow[static_cast<size_t>(p)];
              if (compute == DType::kBF16) {
                xv = bf16_to_f32(f32_to_bf16(xv));
                wv = bf16_to_f32(f32_to_bf16(wv));
              }
              s += std::fabs(static_cast<double>(xv) * wv);
            }
            abs_sum[static_cast<size_t>(i * c.n + j)] = s;
          }
        }
        const auto r = test::to_double(ref);
        EXPECT_TRUE(test::all_close(
            down<float>(yd, ref.size()), r,
            [&](size_t i) {
              return (c.k + 2) * kU32 * abs_sum[i] + kU32 * std::fabs(r[i]) + kTiny;
            },
            "matmul"));
      }
    }
  }
}

// Several weights in one call: the bits of one matmul per weight, in the
// columns after each other (decode sizes, which the CPU runs as one op, and
// a prefill size).
TEST_P(BackendOps, MatmulParts) {
  const int64_t k = 64, rows[] = {37, 13, 13}, n = 63, ld = n + 2;
  uint32_t seed = 500;
  for (const DType compute : {DType::kF32, DType::kBF16}) {
    for (const DType wt : {DType::kF16, DType::kQ4A32}) {
      for (const int64_t m : {int64_t{1}, int64_t{5}, int64_t{40}}) {
        SCOPED_TRACE(::testing::Message()
                     << "compute " << dtype_name(compute) << " w " << dtype_name(wt) << " m=" << m);
        const size_t rb = row_bytes(wt, k);
        std::vector<DeviceBuffer> wd, bd;
        MatmulPart parts[3];
        for (int p = 0; p < 3; ++p) {
          const auto w32 =
              test::random_floats(static_cast<size_t>(rows[p] * k), -1.0f, 1.0f, seed++);
          std::vector<uint8_t> w(rb * static_cast<size_t>(rows[p]));
          for (int64_t r = 0; r < rows[p]; ++r)
            encode_row(wt, w32.data() + r * k, w.data() + r * rb, k);
          wd.push_back(up(w));
          bd.push_back(up(test::random_floats(static_cast<size_t>(rows[p]), -0.5f, 0.5f, seed++)));
          parts[p] = {MatrixView{wd.back().data(), wt, rows[p], k, rb},
                      p == 1 ? nullptr : bd.back().as<float>()};
        }
        DeviceBuffer xd = up(test::random_floats(static_cast<size_t>(m * k), -1.0f, 1.0f, seed++));
        DeviceBuffer fused = up(std::vector<float>(static_cast<size_t>(m * ld), -3.0f));
        DeviceBuffer single = up(std::vector<float>(static_cast<size_t>(m * ld), -3.0f));
        be_->matmul_parts(fused.as<float>(), ld, xd.as<float>(), k, parts, 3, m, compute);
        int64_t col = 0;
        for (const MatmulPart& p : parts) {
          be_->matmul(single.as<float>() + col, ld, xd.as<float>(), k, p.w, p.bias, m, compute);
          col += p.w.rows;
        }
        const auto a = down<float>(fused, static_cast<size_t>(m * ld));
        const auto b = down<float>(single, static_cast<size_t>(m * ld));
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
      }
    }
  }
}

// KV pages through the backend's own pool (kv/page_pool.h): kv_append
// writes them, attention reads them; the reference reads the same pages
// copied back.
TEST_P(BackendOps, KvAppendAndAttention) {
  uint32_t seed = 500;
  for (const DType dtype : {DType::kF32, DType::kF16}) {
    for (const test::AttnCase& c : test::kAttentionCases) {
      SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(dtype));
      KvGeometry g;
      g.n_layer = 1;
      g.n_kv_head = c.n_kv_head;
      g.head_dim = c.head_dim;
      g.dtype = dtype;
      g.page_size = c.page_size;
      int64_t n_pages = 4;
      for (auto [len, n_new] : c.seqs) n_pages += (len + c.page_size - 1) / c.page_size;
      PagePool pool(*be_, g, static_cast<uint64_t>(n_pages) * g.bytes_per_page());
      for (int64_t p = 0; p < n_pages; ++p) pool.allocate();
      const test::PagedBatch b = test::layout_paged_batch(c.seqs, c.page_size, n_pages, seed++);
      // Every key and value of every sequence in one call (the new tokens
      // are among them: appended before attention, as the forward does).
      const std::vector<int64_t> slots = b.all_slots();
      const int64_t n_keys = static_cast<int64_t>(slots.size()), row = g.row();
      const auto k = test::random_floats(static_cast<size_t>(n_keys * row), -1.5f, 1.5f, seed++);
      const auto v = test::random_floats(static_cast<size_t>(n_keys * row), -1.0f, 1.0f, seed++);
      DeviceBuffer kd = up(k), vd = up(v), sd = up(slots), td = up(b.touched), fd = up(b.n_filled);
      const KvLayer kv = pool.layer(0);
      be_->kv_append(kv, kd.as<float>(), row, vd.as<float>(), row, sd.as<int64_t>(), n_keys,
                     td.as<int32_t>(), fd.as<int32_t>(), static_cast<int64_t>(b.touched.size()));
      const int64_t n_head = c.n_kv_head * c.group, q_row = n_head * c.head_dim;
      const int64_t n_tok = b.n_tokens(), q_stride = q_row + 3;
      const auto q = test::random_floats(
          static_cast<size_t>(std::max<int64_t>(n_tok, 1) * q_stride), -2.0f, 2.0f, seed++);
      DeviceBuffer qd = up(q), qi = up(b.q_indptr), kl = up(b.kv_len), pi = up(b.page_indptr),
                   pids = up(b.page_ids);
      AttentionSeqs seqs = b.view<AttentionSeqs>();
      seqs.q_indptr = qi.as<int32_t>();
      seqs.kv_len = kl.as<int32_t>();
      seqs.page_indptr = pi.as<int32_t>();
      seqs.page_ids = pids.as<int32_t>();
      DeviceBuffer od =
          be_->alloc(static_cast<size_t>(std::max<int64_t>(n_tok, 1) * q_row) * sizeof(float));
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      be_->attention(od.as<float>(), q_row, qd.as<float>(), q_stride, n_head, kv, seqs, scale);
      // The pages as stored, back on the host, for the reference.
      const size_t pb = g.page_bytes();
      std::vector<std::vector<char>> kh(static_cast<size_t>(n_pages), std::vector<char>(pb)),
          vh(static_cast<size_t>(n_pages), std::vector<char>(pb));
      std::vector<const void*> kp, vp;
      be_->synchronize();
      for (int64_t p = 0; p < n_pages; ++p) {
        const auto [kpage, vpage] = pool.entry(0, static_cast<int32_t>(p));
        be_->copy_to_host(kh[static_cast<size_t>(p)].data(), kpage, pb);
        be_->copy_to_host(vh[static_cast<size_t>(p)].data(), vpage, pb);
        kp.push_back(kh[static_cast<size_t>(p)].data());
        vp.push_back(vh[static_cast<size_t>(p)].data());
      }
      // What kv_append stored is the rounding of the input rows.
      for (size_t t = 0; t < slots.size(); ++t) {
        const int64_t page = slots[t] / c.page_size, off = slots[t] % c.page_size;
        for (int64_t e2 = 0; e2 < row; ++e2) {
          const double want = dtype == DType::kF32
                                  ? k[t * static_cast<size_t>(row) + e2]
                                  : f16_to_f32(f32_to_f16(k[t * static_cast<size_t>(row) + e2]));
          ASSERT_EQ(test::kv_stored(dtype, kp[static_cast<size_t>(page)], off * row + e2), want)
              << "key " << t << " element " << e2;
        }
      }
      cpu::KvPages hk;
      hk.k = kp.data();
      hk.v = vp.data();
      hk.n_pages = n_pages;
      hk.dtype = dtype;
      hk.page_size = c.page_size;
      hk.n_kv_head = c.n_kv_head;
      hk.head_dim = c.head_dim;
      std::vector<float> ref(static_cast<size_t>(n_tok * q_row));
      ASSERT_EQ(cpu::paged_attention_ref(ref.data(), q_row, q.data(), q_stride, n_head, hk,
                                         b.view<cpu::AttentionBatch>(), scale),
                Status::kOk);
      // The bound of the file comment, per output element: any
      // implementation, so up to one exponential per key and then some.
      const auto r = test::to_double(ref);
      const test::AttentionHeads a{n_head, c.n_kv_head, c.head_dim, c.page_size};
      const std::vector<double> tol = test::attention_bound(
          b, a, q.data(), q_stride, scale, r, test::stored_rows(dtype, kp, a),
          test::stored_rows(dtype, vp, a), [](int64_t nk, double e_max, double range) {
            return 2 * e_max + 2 * static_cast<double>(nk + 2) * (kAnyExpErr + range * kU32) +
                   static_cast<double>(5 * nk + 6) * kU32;
          });
      EXPECT_TRUE(test::all_close(
          down<float>(od, ref.size()), r, [&](size_t i) { return tol[i]; }, "attention"));
    }
  }
}

#ifdef STRATA_BACKEND_OPS_CUDA
INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, ::testing::Values("cuda"),
                         [](const auto& info) { return info.param; });
#else
INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, ::testing::Values("cpu", "separate"),
                         [](const auto& info) { return info.param; });
#endif

}  // namespace
}  // namespace strata
