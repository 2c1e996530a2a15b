// Weight placement (weight_placement.h): cuts by error diffusion.
#include "offload/weight_placement.h"

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "model/model.h"

namespace strata {

const UnitPlacement* WeightPlacement::find(const std::string& name) const {
  for (const UnitPlacement& u : units) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

uint64_t WeightPlacement::bytes(Tier t) const {
  uint64_t n = 0;
  for (const UnitPlacement& u : units) n += u.matrix_bytes[static_cast<size_t>(t)];
  return n;
}

uint64_t WeightPlacement::vector_bytes() const {
  uint64_t n = 0;
  for (const UnitPlacement& u : units) n += u.vector_bytes;
  return n;
}

uint64_t WeightPlacement::largest_disk_read() const {
  uint64_t n = 0;
  for (const UnitPlacement& u : units) n = std::max(n, u.disk_read_bytes);
  return n;
}

bool WeightPlacement::any_on_disk() const {
  for (const UnitPlacement& u : units) {
    if (u.on_disk()) return true;
  }
  return false;
}

WeightPlacement place_weights(const ModelDesc& desc, const PackOptions& options,
                              const Placement& f) {
  f.validate("placement");
  WeightPlacement wp;
  // Bytes placed so far on disk and on gpu, against the bytes seen so far.
  double seen = 0, placed_disk = 0, placed_gpu = 0;
  const double disk = f.disk(DataKind::kWeights);
  for (const PackLayoutUnit& lu : pack_layout(desc)) {
    UnitPlacement u;
    u.name = lu.name;
    u.layer = lu.layer;
    u.n_tensors = lu.tensors.size();
    std::vector<uint64_t> bytes(u.n_tensors);
    u.first_matrix = u.n_tensors;
    for (size_t i = 0; i < u.n_tensors; ++i) {
      const TensorInfo& t = *lu.tensors[i];
      bytes[i] = packed_bytes(t, options);
      if (t.shape.size() == 2) {
        u.first_matrix = std::min(u.first_matrix, i);
      } else {
        STRATA_ASSERT_MSG(u.first_matrix == u.n_tensors, "pack unit {}: vector {} after a matrix",
                          u.name, t.name);
        // Resident as f32, each vector 64-byte aligned (ResidentWeights).
        u.vector_bytes += static_cast<uint64_t>((t.n_elems() + 15) / 16 * 16) * sizeof(float);
      }
    }
    // tail[k]: matrix bytes of tensors [k, n).
    std::vector<uint64_t> tail(u.n_tensors + 1, 0);
    for (size_t i = u.n_tensors; i-- > u.first_matrix;) tail[i] = tail[i + 1] + bytes[i];
    for (size_t i = u.first_matrix; i-- > 0;) tail[i] = tail[i + 1];
    const double total = static_cast<double>(tail[u.first_matrix]);
    seen += total;
    // The disk tail first: the cut k whose tail brings the disk bytes
    // closest to disk * seen (ties: less on disk). Then the gpu head within
    // what stays in RAM, the same way.
    u.first_disk = u.n_tensors;
    double best_err = INFINITY;
    for (size_t k = u.n_tensors + 1; k-- > u.first_matrix;) {
      const double err = std::fabs(placed_disk + static_cast<double>(tail[k]) - disk * seen);
      if (err < best_err - 1e-6) {
        best_err = err;
        u.first_disk = k;
      }
    }
    u.first_cpu = u.first_matrix;
    best_err = INFINITY;
    for (size_t k = u.first_matrix; k <= u.first_disk; ++k) {
      const double head = static_cast<double>(tail[u.first_matrix] - tail[k]);
      const double err = std::fabs(placed_gpu + head - f[Share::kWGpu] * seen);
      if (err < best_err - 1e-6) {
        best_err = err;
        u.first_cpu = k;
      }
    }
    placed_disk += static_cast<double>(tail[u.first_disk]);
    placed_gpu += static_cast<double>(tail[u.first_matrix] - tail[u.first_cpu]);
    u.matrix_bytes[static_cast<size_t>(Tier::kGpu)] = tail[u.first_matrix] - tail[u.first_cpu];
    u.matrix_bytes[static_cast<size_t>(Tier::kCpu)] = tail[u.first_cpu] - tail[u.first_disk];
    u.matrix_bytes[static_cast<size_t>(Tier::kDisk)] = tail[u.first_disk];
    // The pack lays tensors out at kPackTensorAlign: the read runs from the
    // first disk tensor to the end of the last one.
    if (u.first_disk < u.n_tensors) {
      for (size_t i = u.first_disk; i + 1 < u.n_tensors; ++i) {
        u.disk_read_bytes += align_up(bytes[i], kPackTensorAlign);
      }
      u.disk_read_bytes += bytes[u.n_tensors - 1];
    }
    wp.units.push_back(std::move(u));
  }
  return wp;
}

}  // namespace strata
