// Weight views per column and the disk reads behind them (weight_store.h).
#include "offload/weight_store.h"

#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "model/model.h"
#include "offload/aligned_buffer.h"
#include "offload/pack_weights.h"

namespace strata {

namespace {

// The field of a layer's views that a tensor (name without "blk.N.") fills.
MatrixView* layer_field(LayerWeights& w, std::string_view stem) {
  if (stem == "attn_q.weight") return &w.q;
  if (stem == "attn_k.weight") return &w.k;
  if (stem == "attn_v.weight") return &w.v;
  if (stem == "attn_output.weight") return &w.o;
  if (stem == "ffn_gate.weight") return &w.gate;
  if (stem == "ffn_up.weight") return &w.up;
  if (stem == "ffn_down.weight") return &w.down;
  return nullptr;
}

// The fields of the global views a tensor fills (the head reads token_embd
// when the embeddings are tied).
std::vector<MatrixView*> global_fields(GlobalWeights& g, std::string_view name, bool tied) {
  if (name == "token_embd.weight") {
    if (tied) return {&g.token_embd, &g.output};
    return {&g.token_embd};
  }
  if (name == "position_embd.weight") return {&g.position_embd};
  if (name == "output.weight") return {&g.output};
  return {};
}

std::string_view layer_stem(std::string_view name) {
  // "blk.12.attn_q.weight" -> "attn_q.weight"
  const size_t dot = name.find('.', 4);
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

}  // namespace

WeightStore::WeightStore(const Model& model, Backend& backend, const WeightPlacement& placement,
                         const Pack* pack, const PackMatrices* ram_source)
    : placement_(placement) {
  const ModelConfig& c = model.config();
  n_layer_ = c.n_layer;
  tied_ = c.tie_embeddings;
  base_ = std::make_unique<ResidentWeights>(model, backend,
                                            ram_source ? ram_source->source() : MatrixSource{});
  layers_.resize(static_cast<size_t>(n_layer_));
  for (int64_t l = 0; l < n_layer_; ++l) layers_[static_cast<size_t>(l)] = base_->layer(l);
  global_ = base_->global();

  columns_.resize(static_cast<size_t>(n_columns()));
  auto column_of_unit = [&](const UnitPlacement& u) -> std::vector<int64_t> {
    if (u.layer >= 0) return {1 + u.layer};
    if (u.name == "embed") return tied_ ? std::vector<int64_t>{0, n_layer_ + 1} : std::vector<int64_t>{0};
    if (u.name == "output") return {n_layer_ + 1};
    return {};
  };
  for (const UnitPlacement& u : placement_.units) {
    resident_matrix_bytes_ += u.matrix_bytes[static_cast<size_t>(Tier::kGpu)] +
                              u.matrix_bytes[static_cast<size_t>(Tier::kCpu)];
    if (!u.on_disk()) continue;
    if (pack == nullptr) fail("weights of {} are placed on disk but there is no weight pack", u.name);
    const PackUnit* pu = pack->find_unit(u.name);
    if (pu == nullptr || pu->tensors.size() != u.n_tensors ||
        pu->tail_bytes(u.first_disk) != u.disk_read_bytes) {
      fail("{}: unit {} does not have the layout its placement expects ({} bytes from tensor {}); "
           "rebuild the pack (strata convert --force)",
           pack->manifest_path(), u.name, u.disk_read_bytes, u.first_disk);
    }
    const uint64_t start = pu->tensors[u.first_disk].offset;
    Read r;
    r.offset = start;
    r.bytes = static_cast<size_t>(align_up(u.disk_read_bytes, kDiskAlign));
    if (start % kDiskAlign != 0 || start + r.bytes > pack->weights_bytes()) {
      fail("{}: the disk share of unit {} ({} bytes at offset {}) is not whole pages inside the "
           "{} bytes of {}; rebuild the pack (strata convert --force)",
           pack->manifest_path(), u.name, r.bytes, start, pack->weights_bytes(),
           pack->weights_path());
    }
    std::vector<Patch> patches;
    for (size_t i = u.first_disk; i < u.n_tensors; ++i) {
      patches.push_back({pu->tensors[i].name, pu->tensors[i].offset - start});
    }
    // Null the in-place views of what lives on disk.
    for (const Patch& p : patches) {
      if (u.layer >= 0) {
        MatrixView* m = layer_field(layers_[static_cast<size_t>(u.layer)], layer_stem(p.name));
        STRATA_ASSERT_MSG(m != nullptr, "no view for tensor {}", p.name);
        m->data = nullptr;
      } else {
        for (MatrixView* m : global_fields(global_, p.name, tied_)) m->data = nullptr;
      }
    }
    for (int64_t col : column_of_unit(u)) {
      Column& cc = columns_[static_cast<size_t>(col)];
      cc.unit = &u;
      cc.read = r;
      cc.patches = patches;
    }
    staging_bytes_ = std::max(staging_bytes_, r.bytes);
  }
}

WeightStore::~WeightStore() = default;

uint64_t WeightStore::vector_bytes() const {
  return base_->vector_bytes();
}

const UnitPlacement* WeightStore::disk_unit(int64_t column) const {
  STRATA_ASSERT(column >= 0 && column < n_columns());
  return columns_[static_cast<size_t>(column)].unit;
}

WeightStore::Read WeightStore::disk_read(int64_t column) const {
  STRATA_ASSERT(column >= 0 && column < n_columns());
  return columns_[static_cast<size_t>(column)].read;
}

LayerWeights WeightStore::layer(int64_t j, const std::byte* staged) const {
  STRATA_ASSERT(j >= 0 && j < n_layer_);
  LayerWeights w = layers_[static_cast<size_t>(j)];
  const Column& col = columns_[static_cast<size_t>(j + 1)];
  if (col.unit == nullptr) return w;
  STRATA_ASSERT_MSG(staged != nullptr, "layer {}: weights on disk but no staged buffer", j);
  for (const Patch& p : col.patches) layer_field(w, layer_stem(p.name))->data = staged + p.rel;
  return w;
}

GlobalWeights WeightStore::embed(const std::byte* staged) const {
  GlobalWeights g = global_;
  const Column& col = columns_[0];
  if (col.unit == nullptr) return g;
  STRATA_ASSERT_MSG(staged != nullptr, "embeddings on disk but no staged buffer");
  for (const Patch& p : col.patches) {
    // The embed column reads token and position embeddings only.
    for (MatrixView* m : global_fields(g, p.name, false)) m->data = staged + p.rel;
  }
  return g;
}

GlobalWeights WeightStore::head(const std::byte* staged) const {
  GlobalWeights g = global_;
  const Column& col = columns_[static_cast<size_t>(n_layer_ + 1)];
  if (col.unit == nullptr) return g;
  STRATA_ASSERT_MSG(staged != nullptr, "output head on disk but no staged buffer");
  for (const Patch& p : col.patches) {
    if (p.name == "token_embd.weight" && tied_) {
      g.output.data = staged + p.rel;
    } else if (p.name == "output.weight") {
      g.output.data = staged + p.rel;
    }
  }
  return g;
}

}  // namespace strata
