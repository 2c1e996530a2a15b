// The weights the forward pass reads, as plain views: pointers, dtypes and
// shapes of each tensor wherever it currently lives (a model's mapping, a RAM
// buffer loaded from disk, device memory). Matrices stay in their stored
// dtype (f32, f16, bf16 or quantized); the small vectors (norm weights and
// biases) are f32, converted once. The forward never loads anything; whoever
// fills these views owns the bytes and keeps them alive while they are used.
//
// ResidentWeights fills them from a model's mapping: the small vectors are
// converted to f32 and copied into one device buffer; the matrices point at
// host memory, in place in the mapping, or where a MatrixSource says (a
// weight pack's mapping, possibly requantized: offload/pack_weights.h). On a
// device whose memory is host memory those views are used as they are; on
// any other device (a GPU) the matrix views are *host* views, and whoever
// hands them to the forward must point them at device copies first
// (offload/weight_store.h does).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "kernels/backend.h"

namespace strata {

class Model;

// One transformer layer. Absent tensors (no bias, no gate) are null / empty
// (MatrixView::data == nullptr).
struct LayerWeights {
  const float* attn_norm = nullptr;    // [n_embd]
  const float* attn_norm_b = nullptr;  // [n_embd] LayerNorm only
  MatrixView q, k, v;                  // [n_head*hd, n_embd], [n_kv_head*hd, n_embd] x 2
  const float* q_bias = nullptr;       // [n_head*hd]
  const float* k_bias = nullptr;       // [n_kv_head*hd]
  const float* v_bias = nullptr;       // [n_kv_head*hd]
  MatrixView o;                        // [n_embd, n_head*hd]
  const float* o_bias = nullptr;       // [n_embd]
  const float* ffn_norm = nullptr;     // [n_embd]
  const float* ffn_norm_b = nullptr;   // [n_embd]
  MatrixView gate, up;                 // [n_ff, n_embd] (gate: gated FFN only)
  const float* up_bias = nullptr;      // [n_ff]
  MatrixView down;                     // [n_embd, n_ff]
  const float* down_bias = nullptr;    // [n_embd]
};

// Embeddings and head.
struct GlobalWeights {
  MatrixView token_embd;                 // [n_vocab, n_embd]
  MatrixView position_embd;              // [n_ctx + pos_offset, n_embd], learned positions only
  const float* output_norm = nullptr;    // [n_embd]
  const float* output_norm_b = nullptr;  // [n_embd]
  MatrixView output;                     // [n_vocab, n_embd]; token_embd when tied
};

struct TensorInfo;

// The view of a matrix tensor of the model held somewhere other than the
// model's mapping, or nullopt to read it in place from the model. The view
// must have the tensor's shape; its dtype may differ (requantized).
using MatrixSource = std::function<std::optional<MatrixView>(const TensorInfo& t)>;

class ResidentWeights {
 public:
  // Throws Error when a tensor's dtype cannot serve as a small f32 vector
  // or `source` gives a view of another shape.
  ResidentWeights(const Model& model, Backend& backend, const MatrixSource& source = {});

  const GlobalWeights& global() const { return global_; }
  const LayerWeights& layer(int64_t l) const { return layers_[static_cast<size_t>(l)]; }
  int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
  // Bytes of the matrices read in place (from the model or the source), and
  // of the converted small vectors.
  uint64_t matrix_bytes() const { return matrix_bytes_; }
  uint64_t vector_bytes() const { return vectors_.size(); }

 private:
  GlobalWeights global_;
  std::vector<LayerWeights> layers_;
  DeviceBuffer vectors_;
  uint64_t matrix_bytes_ = 0;
};

}  // namespace strata
