// Weight views per column and the disk reads behind them (weight_store.h).
#include "offload/weight_store.h"

#include <chrono>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
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
                         const Pack* pack, const PackMatrices* ram_source, TierPool* host_pool)
    : placement_(placement), host_memory_(backend.memory_is_host()) {
  const ModelConfig& c = model.config();
  n_layer_ = c.n_layer;
  tied_ = c.tie_embeddings;
  base_ = std::make_unique<ResidentWeights>(model, backend,
                                            ram_source ? ram_source->source() : MatrixSource{});
  layers_.resize(static_cast<size_t>(n_layer_));
  for (int64_t l = 0; l < n_layer_; ++l) layers_[static_cast<size_t>(l)] = base_->layer(l);
  global_ = base_->global();

  columns_.resize(static_cast<size_t>(n_columns()));
  for (const UnitPlacement& u : placement_.units) {
    // The RAM share read from a requantized pack's mapping: checked once
    // here, before any compute reads it (the disk share is checked as the
    // engine first reads it).
    if (ram_source != nullptr) {
      const PackUnit* pu = ram_source->pack().find_unit(u.name);
      if (pu != nullptr) ram_source->verify_matrices(*pu, u.first_matrix, u.first_disk);
    }
    if (host_memory_) {
      resident_matrix_bytes_ += u.matrix_bytes[static_cast<size_t>(Tier::kGpu)] +
                                u.matrix_bytes[static_cast<size_t>(Tier::kCpu)];
    }
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
      for (MatrixView* m : fields(u, p.name)) m->data = nullptr;
    }
    for (int64_t col : columns_of(u)) {
      Column& cc = columns_[static_cast<size_t>(col)];
      cc.unit = &u;
      cc.read = r;
      cc.patches = patches;
    }
    staging_bytes_ = std::max(staging_bytes_, r.bytes);
  }
  if (!host_memory_) {
    STRATA_ASSERT_MSG(host_pool != nullptr, "a device without host memory needs the cpu tier");
    place_on_device(model, backend, *host_pool);
  }
}

std::vector<int64_t> WeightStore::columns_of(const UnitPlacement& u) const {
  if (u.layer >= 0) return {1 + u.layer};
  if (u.name == "embed") return tied_ ? std::vector<int64_t>{0, n_layer_ + 1} : std::vector<int64_t>{0};
  if (u.name == "output") return {n_layer_ + 1};
  return {};
}

std::vector<MatrixView*> WeightStore::fields(const UnitPlacement& u, const std::string& name) {
  if (u.layer >= 0) {
    MatrixView* m = layer_field(layers_[static_cast<size_t>(u.layer)], layer_stem(name));
    STRATA_ASSERT_MSG(m != nullptr, "no view for tensor {}", name);
    return {m};
  }
  return global_fields(global_, name, tied_);
}

void WeightStore::place_on_device(const Model& model, Backend& backend, TierPool& host_pool) {
  constexpr uint64_t kAlign = 256;
  const std::vector<PackLayoutUnit> layout = pack_layout(model.desc());
  device_bytes_ = base_->vector_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  spdlog::info("weights: copying {} to {} and {} into RAM (the cpu share)...",
               format_bytes(static_cast<double>(placement_.bytes(Tier::kGpu))), backend.name(),
               format_bytes(static_cast<double>(placement_.bytes(Tier::kCpu))));
  for (const UnitPlacement& u : placement_.units) {
    const PackLayoutUnit* lu = nullptr;
    for (const PackLayoutUnit& l : layout) {
      if (l.name == u.name) lu = &l;
    }
    STRATA_ASSERT_MSG(lu != nullptr && lu->tensors.size() == u.n_tensors,
                      "unit {} is not in the model's pack layout", u.name);
    // The host view of each matrix of a share, and its offset in a buffer
    // holding the share (kAlign apart).
    struct Item {
      std::string name;
      MatrixView view;
      uint64_t off = 0;
    };
    auto share = [&](size_t first, size_t end, uint64_t& total) {
      std::vector<Item> items;
      total = 0;
      for (size_t i = first; i < end; ++i) {
        const std::string& name = lu->tensors[i]->name;
        const std::vector<MatrixView*> f = fields(u, name);
        STRATA_ASSERT_MSG(!f.empty() && f[0]->data != nullptr, "no host view of {}", name);
        total = align_up(total, kAlign);
        items.push_back({name, *f[0], total});
        total += f[0]->row_bytes * static_cast<uint64_t>(f[0]->rows);
      }
      return items;
    };
    // The gpu share: copied once into device memory.
    uint64_t gpu_total = 0;
    const std::vector<Item> gpu = share(u.first_matrix, u.first_cpu, gpu_total);
    if (gpu_total > 0) {
      DeviceBuffer buf = backend.alloc(gpu_total);
      for (const Item& it : gpu) {
        std::byte* dst = buf.as<std::byte>() + it.off;
        backend.copy_to_device(dst, it.view.data,
                               it.view.row_bytes * static_cast<size_t>(it.view.rows));
        for (MatrixView* m : fields(u, it.name)) m->data = dst;
      }
      device_bytes_ += gpu_total;
      gpu_units_.push_back(std::move(buf));
    }
    // The cpu share: copied once into the cpu tier, streamed per column.
    uint64_t cpu_total = 0;
    const std::vector<Item> cpu = share(u.first_cpu, u.first_disk, cpu_total);
    std::vector<HostPart> parts;
    std::vector<Patch> patches;
    if (cpu_total > 0) {
      PoolBlock blk = host_pool.allocate(cpu_total, fmt::format("weights of {} kept in RAM", u.name));
      for (const Item& it : cpu) {
        const size_t bytes = it.view.row_bytes * static_cast<size_t>(it.view.rows);
        std::memcpy(blk.data() + it.off, it.view.data, bytes);
        parts.push_back({blk.data() + it.off, bytes, it.off});
        patches.push_back({it.name, it.off});
        for (MatrixView* m : fields(u, it.name)) m->data = nullptr;
      }
      cpu_units_.push_back(std::move(blk));
    }
    spdlog::debug("weights: {} placed ({} on the device, {} in RAM)", u.name,
                  format_bytes(static_cast<double>(gpu_total)),
                  format_bytes(static_cast<double>(cpu_total)));
    const uint64_t disk_rel = align_up(cpu_total, kAlign);
    for (int64_t col : columns_of(u)) {
      Column& cc = columns_[static_cast<size_t>(col)];
      cc.host_parts = parts;
      cc.host_patches = patches;
      cc.disk_rel = disk_rel;
      const uint64_t need = cc.unit != nullptr ? disk_rel + cc.read.bytes : cpu_total;
      device_staging_bytes_ = std::max<size_t>(device_staging_bytes_, need);
    }
  }
  backend.synchronize();
  spdlog::info("weights: placed in {:.1f} s; device staging {} x 2",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               format_bytes(static_cast<double>(device_staging_bytes_)));
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

bool WeightStore::streams(int64_t column) const {
  STRATA_ASSERT(column >= 0 && column < n_columns());
  const Column& c = columns_[static_cast<size_t>(column)];
  return c.unit != nullptr || !c.host_parts.empty();
}

const std::vector<WeightStore::HostPart>& WeightStore::host_parts(int64_t column) const {
  STRATA_ASSERT(column >= 0 && column < n_columns());
  return columns_[static_cast<size_t>(column)].host_parts;
}

uint64_t WeightStore::disk_rel(int64_t column) const {
  STRATA_ASSERT(column >= 0 && column < n_columns());
  return columns_[static_cast<size_t>(column)].disk_rel;
}

LayerWeights WeightStore::layer(int64_t j, const std::byte* staged) const {
  STRATA_ASSERT(j >= 0 && j < n_layer_);
  LayerWeights w = layers_[static_cast<size_t>(j)];
  const Column& col = columns_[static_cast<size_t>(j + 1)];
  if (!streams(j + 1)) return w;
  STRATA_ASSERT_MSG(staged != nullptr, "layer {}: streamed weights but no staged buffer", j);
  for (const Patch& p : col.patches) {
    layer_field(w, layer_stem(p.name))->data = staged + col.disk_rel + p.rel;
  }
  for (const Patch& p : col.host_patches) layer_field(w, layer_stem(p.name))->data = staged + p.rel;
  return w;
}

GlobalWeights WeightStore::embed(const std::byte* staged) const {
  GlobalWeights g = global_;
  const Column& col = columns_[0];
  if (!streams(0)) return g;
  STRATA_ASSERT_MSG(staged != nullptr, "embeddings streamed but no staged buffer");
  // The embed column reads token and position embeddings only.
  for (const Patch& p : col.patches) {
    for (MatrixView* m : global_fields(g, p.name, false)) m->data = staged + col.disk_rel + p.rel;
  }
  for (const Patch& p : col.host_patches) {
    for (MatrixView* m : global_fields(g, p.name, false)) m->data = staged + p.rel;
  }
  return g;
}

GlobalWeights WeightStore::head(const std::byte* staged) const {
  GlobalWeights g = global_;
  const Column& col = columns_[static_cast<size_t>(n_layer_ + 1)];
  if (!streams(n_layer_ + 1)) return g;
  STRATA_ASSERT_MSG(staged != nullptr, "output head streamed but no staged buffer");
  auto patch = [&](const Patch& p, const std::byte* at) {
    if ((p.name == "token_embd.weight" && tied_) || p.name == "output.weight") g.output.data = at;
  };
  for (const Patch& p : col.patches) patch(p, staged + col.disk_rel + p.rel);
  for (const Patch& p : col.host_patches) patch(p, staged + p.rel);
  return g;
}

}  // namespace strata
