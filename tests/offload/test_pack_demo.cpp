// The weight pack of the demo model (SmolLM2-135M-Instruct, GGUF Q4_1): as
// stored and requantized to q8a64, every tensor checked against the source
// bytes or the reference quantizer. Skips when the model is not fetched.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/file_writers.h"
#include "core/dtype.h"
#include "model/model.h"
#include "offload/pack.h"
#include "offload/pack_build.h"
#include "offload/offload_test_util.h"
#include "quant/quant_ref.h"

namespace strata {
namespace {

const std::string kDemo = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

TEST(PackDemo, SourceAndRequantizedPacks) {
  if (!std::filesystem::exists(kDemo))
    GTEST_SKIP() << kDemo << " is absent; run scripts/fetch-demo-model.sh";
  const auto model = Model::open(kDemo);
  test_files::TempDir dir;
  const std::string out = dir / "pack";
  for (const PackOptions& o : {PackOptions{}, PackOptions{DType::kQ8A64}}) {
    SCOPED_TRACE(o.to_string());
    build_pack(*model, out, o);
    const Pack p = Pack::open(out, model.get());
    p.verify();
    const std::vector<std::byte> w = offload_test::read_file(p.weights_path());
    ASSERT_EQ(w.size(), p.weights_bytes());
    std::vector<float> x;
    std::vector<std::byte> q;
    for (const TensorInfo& src : model->desc().tensors) {
      const PackTensor* t = p.find_tensor(src.name);
      ASSERT_NE(t, nullptr) << src.name;
      const auto b = model->bytes(src);
      if (t->dtype == src.dtype) {
        ASSERT_EQ(t->nbytes, b.size());
        EXPECT_EQ(std::memcmp(w.data() + t->offset, b.data(), b.size()), 0) << src.name;
        continue;
      }
      EXPECT_EQ(t->dtype, DType::kQ8A64) << src.name;
      const int64_t n = src.shape.back(), rows = src.n_elems() / n;
      const size_t src_row = row_bytes(src.dtype, n), dst_row = row_bytes(t->dtype, n);
      x.resize(n);
      q.resize(dst_row);
      int bad_rows = 0;
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row_ref(src.dtype, b.data() + r * src_row, x.data(), n);
        quantize_row_ref(t->dtype, x.data(), q.data(), n);
        bad_rows += std::memcmp(w.data() + t->offset + r * dst_row, q.data(), dst_row) != 0;
      }
      EXPECT_EQ(bad_rows, 0) << src.name;
    }
  }
}

}  // namespace
}  // namespace strata
