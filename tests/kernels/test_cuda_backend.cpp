// CudaBackend: device memory and copies (pageable and pinned sources), the
// ops through the Backend interface, and its errors. The ops' accuracy is
// tested on the launchers (test_ops_*.cpp); here each Backend op must give
// exactly the launcher's result for the same arguments (the kernels are
// deterministic), which checks how the backend passes them on — matmul,
// which cuBLAS may compute with another algorithm in another handle, against
// matmul_ref within the bound of test_ops_matmul.cpp. Device-side index
// errors surface as an Error at synchronize() and are cleared after it.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda_test_util.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/launch_plan.h"
#include "kernels/cuda/ops.h"

namespace strata {
namespace {

using test::kU32;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_GPU();
    be_ = std::make_unique<CudaBackend>(0);
  }

  template <typename T>
  DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer b = be_->alloc(std::max<size_t>(v.size() * sizeof(T), 4));
    be_->copy_to_device(b.data(), v.data(), v.size() * sizeof(T));
    be_->synchronize();  // launchers on the legacy stream read it too
    return b;
  }
  template <typename T>
  std::vector<T> download(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    be_->copy_to_host(v.data(), b.data(), n * sizeof(T));
    return v;
  }
  std::vector<float> download_launcher(const DeviceBuffer& b, size_t n) {
    cudaStreamSynchronize(nullptr);
    std::vector<float> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), b.data(), n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

  std::unique_ptr<CudaBackend> be_;
};

TEST_F(CudaBackendTest, Describes) {
  EXPECT_FALSE(be_->memory_is_host());
  EXPECT_NE(be_->name().find("cuda"), std::string::npos) << be_->name();
  EXPECT_GE(be_->sm_count(), 1);
  EXPECT_GE(cuda_device_count(), 1);
  EXPECT_TRUE(cuda_built());
  EXPECT_FALSE(cuda_device_description(0).empty());
  auto b = make_cuda_backend(0);
  EXPECT_EQ(b->name(), be_->name());
}

TEST_F(CudaBackendTest, MemoryAndCopies) {
  const auto v = test::random_floats(1000, -1, 1, 1);
  DeviceBuffer a = upload(v);
  ASSERT_TRUE(a);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  DeviceBuffer b = be_->alloc(4000);
  be_->copy(b.data(), a.data(), 4000);
  EXPECT_EQ(download<float>(b, 1000), v);
  be_->fill_zero(b.as<char>() + 400, 800);
  const auto z = download<float>(b, 1000);
  for (size_t i = 0; i < 1000; ++i) EXPECT_EQ(z[i], (i >= 100 && i < 300) ? 0.0f : v[i]) << i;
  // From pinned memory: the source may be reused as soon as the call returns.
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 4000), cudaSuccess);
  std::memcpy(pinned, v.data(), 4000);
  be_->copy_to_device(b.data(), pinned, 4000);
  std::memset(pinned, 0, 4000);
  EXPECT_EQ(download<float>(b, 1000), v);
  cudaFreeHost(pinned);
  // Zero-sized buffers and copies.
  DeviceBuffer e = be_->alloc(0);
  EXPECT_FALSE(e);
  be_->copy_to_device(b.data(), v.data(), 0);
  be_->synchronize();
  // Many allocations freed while queued work may still use them.
  for (int i = 0; i < 100; ++i) {
    DeviceBuffer t = be_->alloc(1 << 20);
    be_->fill_zero(t.data(), 1 << 20);
  }
  be_->synchronize();
}

TEST_F(CudaBackendTest, RowOpsEqualTheLaunchers) {
  const int64_t rows = 9, d = 333, stride = 340;
  const auto xv = test::random_floats(rows * stride, -3, 3, 2);
  const auto wv = test::random_floats(d, 0.5f, 1.5f, 3);
  const auto bv = test::random_floats(d, -1, 1, 4);
  DeviceBuffer x = upload(xv), w = upload(wv), bias = upload(bv);
  DeviceBuffer y1 = be_->alloc(rows * stride * 4), y2 = be_->alloc(rows * stride * 4);
  be_->fill_zero(y1.data(), y1.size());
  be_->fill_zero(y2.data(), y2.size());
  be_->synchronize();
  const size_t n = static_cast<size_t>(rows * stride);
  float* x_p = x.as<float>();
  auto compare = [&](const char* what) {
    const auto a = download<float>(y1, n);
    const auto b = download_launcher(y2, n);
    EXPECT_TRUE(test::same_bits(a, b, what));
  };

  be_->rms_norm(y1.as<float>(), stride, x_p, stride, w.as<float>(), 1e-5f, rows, d);
  ASSERT_EQ(
      cuda::rms_norm(y2.as<float>(), stride, x_p, stride, w.as<float>(), 1e-5f, rows, d, nullptr),
      Status::kOk);
  compare("rms_norm");
  be_->layer_norm(y1.as<float>(), stride, x_p, stride, w.as<float>(), bias.as<float>(), 1e-5f, rows,
                  d);
  ASSERT_EQ(cuda::layer_norm(y2.as<float>(), stride, x_p, stride, w.as<float>(), bias.as<float>(),
                             1e-5f, rows, d, nullptr),
            Status::kOk);
  compare("layer_norm");
  for (ActFn f : {ActFn::kRelu, ActFn::kGelu, ActFn::kGeluTanh, ActFn::kSilu}) {
    be_->activation(f, y1.as<float>(), stride, x_p, stride, rows, d);
    ASSERT_EQ(cuda::activation(f, y2.as<float>(), stride, x_p, stride, rows, d, nullptr),
              Status::kOk);
    compare("activation");
  }
  be_->swiglu(y1.as<float>(), stride, x_p, stride, x_p + 3, stride, rows, d);
  ASSERT_EQ(cuda::swiglu(y2.as<float>(), stride, x_p, stride, x_p + 3, stride, rows, d, nullptr),
            Status::kOk);
  compare("swiglu");
  be_->add(y1.as<float>(), stride, x_p, stride, x_p + 5, stride, rows, d);
  ASSERT_EQ(cuda::add(y2.as<float>(), stride, x_p, stride, x_p + 5, stride, rows, d, nullptr),
            Status::kOk);
  compare("add");
  DeviceBuffer sel = upload(std::vector<int32_t>{8, 0, 3});
  be_->gather_rows(y1.as<float>(), stride, x_p, stride, sel.as<int32_t>(), 3, d);
  ASSERT_EQ(cuda::gather_rows(y2.as<float>(), stride, x_p, stride, sel.as<int32_t>(), 3, d, nullptr,
                              nullptr),
            Status::kOk);
  compare("gather_rows");
  // RoPE in place on copies of x: q [rows, 4 heads, 64] in the first 256
  // columns, k [rows, 1 head, 64] after it.
  DeviceBuffer pos = upload(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 1000});
  DeviceBuffer freq = upload(test::random_floats(32, 0.001f, 1.0f, 5));
  be_->copy(y1.data(), x.data(), n * 4);
  be_->copy(y2.data(), x.data(), n * 4);
  be_->synchronize();
  be_->rope(y1.as<float>(), stride, 4, y1.as<float>() + 256, stride, 1, 64, pos.as<int32_t>(), rows,
            freq.as<float>(), 64, RopePairs::kInterleaved);
  ASSERT_EQ(
      cuda::rope(y2.as<float>(), stride, 4, y2.as<float>() + 256, stride, 1, 64, pos.as<int32_t>(),
                 rows, freq.as<float>(), 64, RopePairs::kInterleaved, nullptr, nullptr),
      Status::kOk);
  compare("rope");
  // Embedding from a q4a32 table.
  const int64_t vocab = 50;
  const size_t rb = row_bytes(DType::kQ4A32, 320);
  const auto table = test::weight_rows(DType::kQ4A32, vocab, 320, rb, 6);
  DeviceBuffer tab = upload(table);
  DeviceBuffer ids = upload(std::vector<int32_t>{49, 0, 7, 7, 30});
  MatrixView tv{tab.data(), DType::kQ4A32, vocab, 320, rb};
  be_->embedding(y1.as<float>(), stride, tv, ids.as<int32_t>(), 5);
  ASSERT_EQ(cuda::embedding(y2.as<float>(), stride, tab.data(), DType::kQ4A32, rb, vocab, 320,
                            ids.as<int32_t>(), 5, nullptr, nullptr),
            Status::kOk);
  compare("embedding");
}

TEST_F(CudaBackendTest, MatmulWithinBound) {
  for (auto [w_dtype, compute, m] :
       std::vector<std::tuple<DType, DType, int64_t>>{{DType::kF16, DType::kF32, 5},
                                                      {DType::kQ4A32, DType::kBF16, 1},
                                                      {DType::kQ8S32, DType::kF32, 40},
                                                      {DType::kF32, DType::kF32, 3}}) {
    SCOPED_TRACE(::testing::Message()
                 << dtype_name(w_dtype) << " " << dtype_name(compute) << " m=" << m);
    const int64_t n = 77, k = 256;
    const size_t rb = row_bytes(w_dtype, k);
    const auto wb = test::weight_rows(w_dtype, n, k, rb, 9, false, -1.0f, 1.0f);
    const auto xv = test::random_floats(static_cast<size_t>(m * k), -1, 1, 10);
    const auto bv = test::random_floats(n, -1, 1, 11);
    DeviceBuffer w = upload(wb), x = upload(xv), bias = upload(bv);
    DeviceBuffer y = be_->alloc(static_cast<size_t>(m * n) * 4);
    be_->matmul(y.as<float>(), n, x.as<float>(), k, MatrixView{w.data(), w_dtype, n, k, rb},
                bias.as<float>(), m, compute);
    const auto got = download<float>(y, static_cast<size_t>(m * n));

    cuda::MatmulPlan plan;
    ASSERT_EQ(cuda::plan_matmul(w_dtype, compute, m, n, k, &plan), Status::kOk);
    auto round_op = [&](float v) {
      if (plan.operand == DType::kF16) return f16_to_f32(f32_to_f16(v));
      if (plan.operand == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
      return v;
    };
    std::vector<float> wf(static_cast<size_t>(n * k)), xo(xv.size());
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* row = wb.data() + static_cast<size_t>(j) * rb;
      float* dst = wf.data() + j * k;
      if (w_dtype == DType::kF32) {
        std::memcpy(dst, row, static_cast<size_t>(k) * 4);
      } else if (w_dtype == DType::kF16) {
        for (int64_t l = 0; l < k; ++l) {
          uint16_t h;
          std::memcpy(&h, row + 2 * l, 2);
          dst[l] = f16_to_f32(h);
        }
      } else {
        dequantize_row_ref(w_dtype, row, dst, k);
      }
      for (int64_t l = 0; l < k; ++l) dst[l] = round_op(dst[l]);
    }
    for (size_t i = 0; i < xv.size(); ++i) xo[i] = round_op(xv[i]);
    std::vector<float> ref(static_cast<size_t>(m * n));
    ASSERT_EQ(
        cpu::matmul_ref(ref.data(), n, xo.data(), k, wf.data(), DType::kF32,
                        static_cast<size_t>(k) * 4, bv.data(), m, n, k, cpu::ComputeType::kF32),
        Status::kOk);
    const double gamma = (plan.operand == DType::kF32 ? 1.0 : 2.0) * (k + 1) * kU32;
    const auto r = test::to_double(ref);
    EXPECT_TRUE(test::all_close(
        got, r,
        [&](size_t e) {
          const int64_t i = static_cast<int64_t>(e) / n, j = static_cast<int64_t>(e) % n;
          double s = std::fabs(bv[static_cast<size_t>(j)]);
          for (int64_t l = 0; l < k; ++l) {
            s += std::fabs(static_cast<double>(xo[static_cast<size_t>(i * k + l)]) *
                           wf[static_cast<size_t>(j * k + l)]);
          }
          return gamma * s + kU32 * std::fabs(r[e]) + k * 0x1p-126;
        },
        "backend matmul"));
  }
  EXPECT_GT(be_->workspace_bytes(), 0u);
}

TEST_F(CudaBackendTest, KvAppendAndAttentionEqualTheLaunchers) {
  const int64_t ps = 16, n_kv = 2, hd = 64, n_pages = 12, n_head = 6;
  const size_t page_bytes = static_cast<size_t>(ps * n_kv * hd * 2);
  // Two identical pools (f16): one written through the backend, one through
  // the launchers.
  std::vector<DeviceBuffer> pages;
  std::vector<void*> k1, v1, k2, v2;
  for (int64_t i = 0; i < 4 * n_pages; ++i) {
    pages.push_back(be_->alloc(page_bytes));
    be_->fill_zero(pages.back().data(), page_bytes);
  }
  for (int64_t i = 0; i < n_pages; ++i) {
    k1.push_back(pages[static_cast<size_t>(i)].data());
    v1.push_back(pages[static_cast<size_t>(n_pages + i)].data());
    k2.push_back(pages[static_cast<size_t>(2 * n_pages + i)].data());
    v2.push_back(pages[static_cast<size_t>(3 * n_pages + i)].data());
  }
  DeviceBuffer k1a = upload(k1), v1a = upload(v1), k2a = upload(k2), v2a = upload(v2);
  const size_t mm = static_cast<size_t>(n_pages * n_kv * hd);
  DeviceBuffer mn1 = be_->alloc(mm * 4), mx1 = be_->alloc(mm * 4), mn2 = be_->alloc(mm * 4),
               mx2 = be_->alloc(mm * 4);
  for (DeviceBuffer* b : {&mn1, &mx1, &mn2, &mx2}) be_->fill_zero(b->data(), mm * 4);
  auto layer = [&](DeviceBuffer& k, DeviceBuffer& v, DeviceBuffer& mn, DeviceBuffer& mx) {
    KvLayer l;
    l.k_pages = static_cast<void* const*>(k.data());
    l.v_pages = static_cast<void* const*>(v.data());
    l.k_min = mn.as<float>();
    l.k_max = mx.as<float>();
    l.n_pages = n_pages;
    l.dtype = DType::kF16;
    l.page_size = ps;
    l.n_kv_head = n_kv;
    l.head_dim = hd;
    return l;
  };
  const KvLayer l1 = layer(k1a, v1a, mn1, mx1), l2 = layer(k2a, v2a, mn2, mx2);
  // Sequence 0: 40 keys on pages 3, 7, 0 (prefill of 40); sequence 1: 20 keys
  // on pages 5, 9, decode of its last token after 19 cached ones.
  const std::vector<int32_t> q_indptr = {0, 40, 41}, kv_len = {40, 20}, page_indptr = {0, 3, 5},
                             page_ids = {3, 7, 0, 5, 9};
  std::vector<int64_t> slots;
  for (int64_t j = 0; j < 40; ++j)
    slots.push_back(page_ids[static_cast<size_t>(j / ps)] * ps + j % ps);
  for (int64_t j = 0; j < 20; ++j)
    slots.push_back(page_ids[3 + static_cast<size_t>(j / ps)] * ps + j % ps);
  const int64_t n_keys = static_cast<int64_t>(slots.size());
  const auto kv_rows = test::random_floats(static_cast<size_t>(n_keys * n_kv * hd), -1, 1, 20);
  DeviceBuffer kd = upload(kv_rows), slots_d = upload(slots);
  const std::vector<int32_t> touched = {3, 7, 0, 5, 9}, filled = {16, 16, 8, 16, 4};
  DeviceBuffer touched_d = upload(touched), filled_d = upload(filled);
  be_->kv_append(l1, kd.as<float>(), n_kv * hd, kd.as<float>(), n_kv * hd, slots_d.as<int64_t>(),
                 n_keys, touched_d.as<int32_t>(), filled_d.as<int32_t>(), 5);
  be_->synchronize();
  ASSERT_EQ(cuda::kv_append(l2.k_pages, l2.v_pages, n_pages, DType::kF16, ps, n_kv, hd,
                            kd.as<float>(), n_kv * hd, kd.as<float>(), n_kv * hd,
                            slots_d.as<int64_t>(), n_keys, nullptr, nullptr),
            Status::kOk);
  ASSERT_EQ(cuda::page_key_minmax(l2.k_min, l2.k_max, const_cast<const void* const*>(l2.k_pages),
                                  n_pages, DType::kF16, ps, n_kv, hd, touched_d.as<int32_t>(),
                                  filled_d.as<int32_t>(), 5, nullptr, nullptr),
            Status::kOk);
  cudaStreamSynchronize(nullptr);
  EXPECT_TRUE(test::same_bits(download<float>(mn1, mm), download_launcher(mn2, mm), "k_min"));
  EXPECT_TRUE(test::same_bits(download<float>(mx1, mm), download_launcher(mx2, mm), "k_max"));
  for (int64_t i = 0; i < 2 * n_pages; ++i) {
    std::vector<uint8_t> a(page_bytes), b(page_bytes);
    be_->copy_to_host(a.data(), pages[static_cast<size_t>(i)].data(), page_bytes);
    be_->copy_to_host(b.data(), pages[static_cast<size_t>(2 * n_pages + i)].data(), page_bytes);
    ASSERT_EQ(a, b) << "page " << i;
  }

  const int64_t n_tok = 41, row = n_head * hd;
  DeviceBuffer q = upload(test::random_floats(static_cast<size_t>(n_tok * row), -1, 1, 21));
  DeviceBuffer qi = upload(q_indptr), kl = upload(kv_len), pi = upload(page_indptr),
               pid = upload(page_ids);
  AttentionSeqs seqs;
  seqs.n_seq = 2;
  seqs.q_indptr = qi.as<int32_t>();
  seqs.kv_len = kl.as<int32_t>();
  seqs.page_indptr = pi.as<int32_t>();
  seqs.page_ids = pid.as<int32_t>();
  DeviceBuffer o1 = be_->alloc(static_cast<size_t>(n_tok * row) * 4),
               o2 = be_->alloc(static_cast<size_t>(n_tok * row) * 4);
  be_->attention(o1.as<float>(), row, q.as<float>(), row, n_head, l1, seqs, 0.125f);
  const auto got = download<float>(o1, static_cast<size_t>(n_tok * row));
  const cuda::AttentionPlan plan = cuda::plan_attention(2, n_head, n_kv, hd, be_->sm_count());
  DeviceBuffer part = be_->alloc(std::max<size_t>(plan.partial_bytes, 4));
  be_->synchronize();
  ASSERT_EQ(cuda::attention(o2.as<float>(), row, q.as<float>(), row, n_head, l2, seqs, 0.125f, plan,
                            part.as<float>(), nullptr, nullptr),
            Status::kOk);
  EXPECT_TRUE(
      test::same_bits(got, download_launcher(o2, static_cast<size_t>(n_tok * row)), "attention"));
}

TEST_F(CudaBackendTest, DeviceErrorsThrowAtSynchronizeThenClear) {
  const auto table = test::random_floats(10 * 32, -1, 1, 1);
  DeviceBuffer tab = upload(table);
  DeviceBuffer ids = upload(std::vector<int32_t>{3, 12});
  DeviceBuffer y = be_->alloc(2 * 32 * 4);
  be_->embedding(y.as<float>(), 32, MatrixView{tab.data(), DType::kF32, 10, 32, 128},
                 ids.as<int32_t>(), 2);
  try {
    be_->synchronize();
    ADD_FAILURE() << "no Error for token id 12 of a 10-row table";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 12 at row 1 is outside [0, 10)"),
              std::string::npos)
        << e.what();
  }
  be_->synchronize();  // cleared
  // copy_to_host reports it too.
  be_->embedding(y.as<float>(), 32, MatrixView{tab.data(), DType::kF32, 10, 32, 128},
                 ids.as<int32_t>(), 2);
  std::vector<float> out(64);
  EXPECT_THROW(be_->copy_to_host(out.data(), y.data(), 256), Error);
  be_->synchronize();
}

TEST_F(CudaBackendTest, HostVisibleErrorsThrowAtOnce) {
  DeviceBuffer buf = be_->alloc(1 << 16);
  KvLayer kv;
  kv.k_pages = static_cast<void* const*>(buf.data());
  kv.v_pages = kv.k_pages;
  kv.n_pages = 1;
  kv.dtype = DType::kF16;
  kv.page_size = 16;
  kv.n_kv_head = 1;
  kv.head_dim = 72;
  AttentionSeqs seqs;
  seqs.n_seq = 1;
  seqs.q_indptr = seqs.kv_len = seqs.page_indptr = seqs.page_ids = buf.as<int32_t>();
  try {
    be_->attention(buf.as<float>(), 72, buf.as<float>(), 72, 1, kv, seqs, 1.0f);
    ADD_FAILURE() << "no Error for head_dim 72";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("attention failed: unsupported"), std::string::npos) << msg;
    EXPECT_NE(msg.find("head_dim 72 (supported: 64, 80, 96, 112, 128, 256)"), std::string::npos)
        << msg;
  }
  EXPECT_THROW(be_->rms_norm(buf.as<float>(), 3, buf.as<float>(), 4, nullptr, 1e-5f, 2, 4), Error);
  EXPECT_THROW(
      be_->matmul(buf.as<float>(), 8, buf.as<float>(), 64,
                  MatrixView{buf.data(), DType::kF16, 8, 64, 128}, nullptr, 2, DType::kF16),
      Error);
  EXPECT_THROW(be_->alloc(size_t{1} << 60), Error);
  be_->synchronize();
}

}  // namespace
}  // namespace strata
