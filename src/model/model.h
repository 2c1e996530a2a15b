// A model on disk, described: its config, its files, and for every weight the
// canonical name, shape, dtype and where its bytes are (file, offset, length),
// so the forward pass can read a tensor from the mapping and the offload
// engine can read the same bytes from any tier. Loading maps the files and
// checks every name, shape and range; it copies no weights.
//
// Canonical names follow GGUF's: "token_embd.weight", "position_embd.weight"
// (OPT), "output_norm.weight"/".bias", "output.weight" (absent when tied), and
// per layer "blk.N.<name>" with <name> one of
//   attn_norm.weight/.bias, attn_q.weight/.bias, attn_k..., attn_v...,
//   attn_output.weight/.bias, ffn_norm.weight/.bias,
//   ffn_gate.weight (Llama), ffn_up.weight/.bias, ffn_down.weight/.bias
// (OPT's fc1 is ffn_up, fc2 is ffn_down). Linear weights are [out, in]
// row-major, embeddings [n_vocab, n_embd], as both HF and GGUF store them;
// position_embd is [n_ctx + pos_offset, n_embd]. GGUF's rope_freqs.weight is
// read into ModelConfig::rope_freq_factors, not listed here. Tensors of the
// files that the model does not use (rotary inv_freq, a tied lm_head) are
// ignored with a debug log.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace strata {

class MappedFile;
class GgufFile;
class SafetensorsSet;

struct TensorInfo {
  std::string name;             // canonical
  std::string source_name;      // as written in the file
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;   // row-major, outermost first
  int file = 0;                 // index into ModelDesc::files
  uint64_t offset = 0;          // absolute offset in that file
  uint64_t nbytes = 0;
  int64_t n_elems() const;
};

enum class ModelFormat { kHfDirectory, kGguf };

struct SourceFile {
  std::string path;
  uint64_t size = 0;
  int64_t mtime_ns = 0;  // identity for rebuild checks
};

struct ModelDesc {
  ModelFormat format = ModelFormat::kHfDirectory;
  std::string path;                 // what the user passed
  ModelConfig config;
  std::vector<SourceFile> files;
  std::vector<TensorInfo> tensors;  // globals then layers, each in a fixed order
  std::unordered_map<std::string, size_t> index;

  const TensorInfo* find(const std::string& name) const;
  // Throws Error naming the model and the tensor when it is missing.
  const TensorInfo& get(const std::string& name) const;
  static std::string layer_name(int64_t layer, std::string_view name);  // "blk.3.attn_q.weight"

  int64_t n_params() const;
  // Bytes of weights per dtype name, for inspect.
  std::vector<std::pair<std::string, uint64_t>> bytes_per_dtype() const;
};

// A loaded model: the description plus the open mappings of its files.
class Model {
 public:
  // Loads a HF model directory or a .gguf file; throws Error naming the path
  // and what is wrong (missing file, bad JSON, unknown architecture, missing
  // tensor, wrong shape, range outside the file).
  static std::unique_ptr<Model> open(const std::string& path);
  ~Model();

  const ModelDesc& desc() const { return desc_; }
  const ModelConfig& config() const { return desc_.config; }
  // The bytes of a tensor in its mapping.
  std::span<const std::byte> bytes(const TensorInfo& t) const;
  // The GGUF file for GGUF models (tokenizer metadata lives there), else null.
  const GgufFile* gguf() const { return gguf_.get(); }

 private:
  Model();
  void open_hf_dir(const std::string& dir);
  void open_gguf_file(const std::string& path);
  void finish();

  ModelDesc desc_;
  std::vector<const MappedFile*> maps_;  // one per desc_.files, owned below
  std::unique_ptr<SafetensorsSet> safetensors_;
  std::unique_ptr<GgufFile> gguf_;
};

}  // namespace strata
