// The CUDA backend and quantized KV pages: it stores and reads none, and says
// so up front (an Error naming the format and --compress-kv) instead of
// failing inside a kernel. Label cuda; skips with a message without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda_test_util.h"

namespace strata {
namespace {

TEST(CudaQuantKv, IsRefusedWithAMessage) {
  STRATA_REQUIRE_GPU();
  auto be = make_cuda_backend(0);
  KvLayer kv;
  kv.dtype = DType::kQ4A32;
  kv.n_kv_head = 3;
  kv.head_dim = 64;
  AttentionSeqs seqs;
  for (int op = 0; op < 2; ++op) {
    try {
      if (op == 0) {
        be->kv_append(kv, nullptr, 192, nullptr, 192, nullptr, 0, nullptr, nullptr, 0);
      } else {
        be->attention(nullptr, 576, nullptr, 576, 9, kv, seqs, 0.125f);
      }
      ADD_FAILURE() << "expected an Error from op " << op;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("q4a32"), std::string::npos) << msg;
      EXPECT_NE(msg.find("--compress-kv"), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace strata
