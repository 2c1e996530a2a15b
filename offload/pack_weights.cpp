#include "offload/pack_weights.h"

#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "io/mapped_file.h"
#include "model/model.h"
#include "offload/pack_build.h"

namespace strata {

PackMatrices::PackMatrices(Pack pack) : pack_(std::move(pack)) {
  map_ = std::make_unique<MappedFile>(pack_.weights_path());
  if (map_->size() < pack_.weights_bytes()) {
    fail("{}: the file has {} bytes, its manifest says {}; rebuild the pack (strata convert "
         "--force)",
         pack_.weights_path(), map_->size(), pack_.weights_bytes());
  }
  for (const PackUnit& u : pack_.units()) {
    for (const PackTensor& t : u.tensors) {
      if (t.shape.size() == 2) matrix_bytes_ += t.nbytes;
    }
  }
}

PackMatrices::~PackMatrices() = default;

std::optional<MatrixView> PackMatrices::find(const TensorInfo& t) const {
  const PackTensor* pt = pack_.find_tensor(t.name);
  if (pt == nullptr) return std::nullopt;
  if (pt->shape != t.shape || pt->shape.size() != 2) {
    fail("{}: tensor {} has another shape in the pack than in the model; rebuild the pack "
         "(strata convert --force)",
         pack_.manifest_path(), t.name);
  }
  MatrixView m;
  m.dtype = pt->dtype;
  m.rows = pt->shape[0];
  m.cols = pt->shape[1];
  if (m.rows < 1 || m.cols < 1 || !row_elems_ok(m.dtype, m.cols)) {
    fail("{}: tensor {} [{}, {}] is not whole rows of {}; rebuild the pack", pack_.manifest_path(),
         t.name, m.rows, m.cols, dtype_name(m.dtype));
  }
  m.row_bytes = row_bytes(m.dtype, m.cols);
  const uint64_t bytes = static_cast<uint64_t>(m.rows) * m.row_bytes;
  if (bytes != pt->nbytes || !map_->in_bounds(pt->offset, bytes)) {
    fail("{}: tensor {} ({} bytes at offset {}) does not fit the {} bytes of {}; rebuild the pack",
         pack_.manifest_path(), t.name, pt->nbytes, pt->offset, map_->size(),
         pack_.weights_path());
  }
  m.data = map_->data() + pt->offset;
  return m;
}

void PackMatrices::verify_matrices(const PackUnit& unit, size_t first, size_t last) const {
  for (size_t k = first; k < last && k < unit.tensors.size(); ++k) {
    const PackTensor& t = unit.tensors[k];
    if (t.shape.size() != 2) continue;
    if (!map_->in_bounds(t.offset, t.nbytes)) {
      fail("{}: tensor {} ({} bytes at offset {}) does not fit the {} bytes of {}; rebuild the pack",
           pack_.manifest_path(), t.name, t.nbytes, t.offset, map_->size(), pack_.weights_path());
    }
    if (auto bad = pack_.check_tensor(unit, t, map_->data() + t.offset)) pack_.fail_damaged(*bad);
  }
}

MatrixSource PackMatrices::source() const {
  return [this](const TensorInfo& t) { return find(t); };
}

std::unique_ptr<PackMatrices> open_pack_matrices(const Model& model, const std::string& dir,
                                                 DType weight_dtype) {
  if (!is_quantized(weight_dtype)) {
    fail("weight compression {} is not a quantized format; use q4 or q8",
         dtype_name(weight_dtype));
  }
  PackOptions po;
  po.weight_dtype = weight_dtype;
  auto m = std::make_unique<PackMatrices>(open_or_build_pack(model, dir, po));
  spdlog::info("weights: {} of matrices from the {} pack in {}",
               format_bytes(static_cast<double>(m->matrix_bytes())), dtype_name(weight_dtype),
               dir);
  return m;
}

}  // namespace strata
