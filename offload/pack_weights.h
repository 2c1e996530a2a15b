// Matrices read in place from a weight pack (offload/pack.h) mapped into host
// memory: the MatrixSource (model/layer_weights.h) that makes the resident
// engine use a pack's matrices instead of the model's. With a requantized
// pack (PackOptions::weight_dtype, `strata convert --weights q4|q8`,
// `--compress-weight`), disk and RAM then hold the small form and the CPU
// matmul dequantizes each L2 panel next to the product.
//
// Invariant: every view handed out lies inside the mapping of weights.bin
// and has the bytes its shape and dtype imply (checked against the mapped
// size, not only against the manifest). The mapping lives as long as the
// object; views must not outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kernels/backend.h"
#include "model/layer_weights.h"
#include "offload/pack.h"

namespace strata {

class MappedFile;
class Model;

class PackMatrices {
 public:
  // Maps the pack's weights.bin. Throws Error naming the file when it cannot
  // be mapped or is shorter than the manifest says.
  explicit PackMatrices(Pack pack);
  ~PackMatrices();
  PackMatrices(const PackMatrices&) = delete;
  PackMatrices& operator=(const PackMatrices&) = delete;

  const Pack& pack() const { return pack_; }
  // The view of the pack's copy of a 2-D tensor, or nullopt when the pack
  // has no tensor of that name. Throws Error when the pack's tensor has
  // another shape than t.
  std::optional<MatrixView> find(const TensorInfo& t) const;
  // find() as a MatrixSource; valid while this object lives.
  MatrixSource source() const;
  // Checks the checksums of the 2-D tensors [first, last) of `unit` in the
  // mapping (Pack::verify_tensor): those a run reads from RAM.
  void verify_matrices(const PackUnit& unit, size_t first, size_t last) const;
  // Bytes of the pack's matrices (what the engine reads per forward).
  uint64_t matrix_bytes() const { return matrix_bytes_; }

 private:
  Pack pack_;
  std::unique_ptr<MappedFile> map_;
  uint64_t matrix_bytes_ = 0;
};

// The pack of `model` in `dir` with its matrices in `weight_dtype` (built or
// rebuilt when missing or stale, with a log line saying why), mapped.
std::unique_ptr<PackMatrices> open_pack_matrices(const Model& model, const std::string& dir,
                                                 DType weight_dtype);

}  // namespace strata
