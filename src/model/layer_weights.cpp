#include "model/layer_weights.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "model/model.h"

namespace strata {

namespace {

// The f32 values of a small vector tensor.
std::vector<float> to_f32(const Model& model, const TensorInfo& t) {
  const std::span<const std::byte> b = model.bytes(t);
  const int64_t n = t.n_elems();
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case DType::kF32:
      STRATA_ASSERT(b.size() == static_cast<size_t>(n) * 4);
      std::memcpy(out.data(), b.data(), b.size());
      break;
    case DType::kF16:
    case DType::kBF16: {
      STRATA_ASSERT(b.size() == static_cast<size_t>(n) * 2);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b.data() + 2 * i, 2);
        out[static_cast<size_t>(i)] = t.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    }
    default:
      fail("{}: tensor {} is stored as {}; norm weights and biases must be f32, f16 or bf16",
           model.desc().path, t.name, dtype_name(t.dtype));
  }
  return out;
}

}  // namespace

ResidentWeights::ResidentWeights(const Model& model, Backend& backend,
                                 const MatrixSource& source) {
  const ModelDesc& d = model.desc();
  const ModelConfig& c = d.config;
  auto matrix = [&](const std::string& name) {
    const TensorInfo& t = d.get(name);
    if (t.shape.size() != 2) {
      fail("{}: tensor {} has {} dimensions; a matrix has 2", d.path, name, t.shape.size());
    }
    if (!row_elems_ok(t.dtype, t.shape[1])) {
      fail("{}: tensor {} rows of {} elements are not whole {} blocks", d.path, name, t.shape[1],
           dtype_name(t.dtype));
    }
    if (source) {
      if (const std::optional<MatrixView> v = source(t)) {
        if (v->data == nullptr || v->rows != t.shape[0] || v->cols != t.shape[1] ||
            !row_elems_ok(v->dtype, v->cols) || v->row_bytes < row_bytes(v->dtype, v->cols)) {
          fail("{}: the stored copy of tensor {} is [{}, {}] {}, not the model's [{}, {}]; "
               "rebuild it",
               d.path, name, v->rows, v->cols, dtype_name(v->dtype), t.shape[0], t.shape[1]);
        }
        matrix_bytes_ += v->row_bytes * static_cast<uint64_t>(v->rows);
        return *v;
      }
    }
    const std::span<const std::byte> b = model.bytes(t);
    MatrixView m;
    m.data = b.data();
    m.dtype = t.dtype;
    m.rows = t.shape[0];
    m.cols = t.shape[1];
    m.row_bytes = row_bytes(t.dtype, m.cols);
    STRATA_ASSERT(b.size() == m.row_bytes * static_cast<size_t>(m.rows));
    matrix_bytes_ += b.size();
    return m;
  };

  // Small vectors: converted into one host staging array, 64-byte aligned
  // each, then copied to the device once; pointers are patched afterwards.
  std::vector<float> staged;
  std::vector<std::pair<const float**, size_t>> patches;  // (field, offset in floats)
  auto vec = [&](const std::string& name, const float** field) {
    const TensorInfo* t = d.find(name);
    if (t == nullptr) return;
    const std::vector<float> v = to_f32(model, *t);
    staged.resize((staged.size() + 15) / 16 * 16);
    patches.emplace_back(field, staged.size());
    staged.insert(staged.end(), v.begin(), v.end());
  };

  global_.token_embd = matrix("token_embd.weight");
  if (c.learned_pos) global_.position_embd = matrix("position_embd.weight");
  global_.output = c.tie_embeddings ? global_.token_embd : matrix("output.weight");
  vec("output_norm.weight", &global_.output_norm);
  vec("output_norm.bias", &global_.output_norm_b);

  layers_.resize(static_cast<size_t>(c.n_layer));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerWeights& w = layers_[static_cast<size_t>(l)];
    auto name = [l](const char* n) { return ModelDesc::layer_name(l, n); };
    vec(name("attn_norm.weight"), &w.attn_norm);
    vec(name("attn_norm.bias"), &w.attn_norm_b);
    w.q = matrix(name("attn_q.weight"));
    w.k = matrix(name("attn_k.weight"));
    w.v = matrix(name("attn_v.weight"));
    vec(name("attn_q.bias"), &w.q_bias);
    vec(name("attn_k.bias"), &w.k_bias);
    vec(name("attn_v.bias"), &w.v_bias);
    w.o = matrix(name("attn_output.weight"));
    vec(name("attn_output.bias"), &w.o_bias);
    vec(name("ffn_norm.weight"), &w.ffn_norm);
    vec(name("ffn_norm.bias"), &w.ffn_norm_b);
    if (c.gated_ffn) w.gate = matrix(name("ffn_gate.weight"));
    w.up = matrix(name("ffn_up.weight"));
    vec(name("ffn_up.bias"), &w.up_bias);
    w.down = matrix(name("ffn_down.weight"));
    vec(name("ffn_down.bias"), &w.down_bias);
  }

  vectors_ = backend.alloc(staged.size() * sizeof(float));
  backend.copy_to_device(vectors_.data(), staged.data(), staged.size() * sizeof(float));
  for (auto& [field, offset] : patches) *field = vectors_.as<float>() + offset;
  spdlog::debug("weights: {} bytes of matrices read in place, {} bytes of f32 vectors",
                matrix_bytes_, vectors_.size());
}

}  // namespace strata
