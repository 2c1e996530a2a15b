// Weight staging (weight_staging.h).
#include "offload/weight_staging.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "kernels/backend.h"
#include "offload/executor.h"
#include "offload/pack.h"
#include "offload/weight_store.h"

namespace strata {

WeightStaging::WeightStaging(const WeightStore& weights, const Pack* pack, MemoryMode mode,
                             Backend& backend, TierPool& ram)
    : weights_(weights),
      pack_(pack),
      mode_(mode),
      verified_(static_cast<size_t>(weights.n_columns()), 0) {
  if (mode_ != MemoryMode::kHostMemory && weights_.device_staging_bytes() > 0) {
    for (Slot& s : slots_) s.dev = backend.alloc(weights_.device_staging_bytes());
  }
  if (weights_.staging_bytes() > 0) {
    for (Slot& s : slots_) s.host = ram.allocate(weights_.staging_bytes(), "weight staging buffer");
    STRATA_ASSERT(pack_ != nullptr);
    pack_file_ = DiskFile::open(pack_->weights_path(), OpenMode::kRead, true);
    if (!pack_file_.direct()) {
      spdlog::warn("weights: {} has no O_DIRECT; disk reads go through the page cache",
                   pack_->weights_path());
    }
  }
}

WeightStaging::~WeightStaging() = default;

std::vector<std::span<std::byte>> WeightStaging::host_buffers() {
  std::vector<std::span<std::byte>> out;
  for (Slot& s : slots_) {
    if (s.host.size() > 0) out.push_back({s.host.data(), static_cast<size_t>(s.host.size())});
  }
  return out;
}

uint64_t WeightStaging::host_bytes() const {
  return slots_[0].host.size() + slots_[1].host.size();
}

uint64_t WeightStaging::device_bytes() const {
  return slots_[0].dev.size() + slots_[1].dev.size();
}

void WeightStaging::reset() {
  for (Slot& s : slots_) {
    s.column = -1;
    s.step = -1;
  }
}

void WeightStaging::load(int64_t column, int32_t step, Executor& exec) {
  STRATA_ASSERT(weights_.streams(column));
  const UnitPlacement* u = weights_.disk_unit(column);
  // Round robin over the two buffers: this one last held the load before
  // the previous one, for a column whose computes all came before this step.
  Slot& s = slots_[n_loads_++ % 2];
  s.column = column;
  s.step = step;
  const int64_t n_layer = weights_.n_columns() - 2;
  const std::string name = column == 0             ? "embed"
                           : column == n_layer + 1 ? "head"
                                                   : fmt::format("blk.{}", column - 1);
  const TransferLabel label{fmt::format("weights {}", u != nullptr ? u->name : name), "weights",
                            step};
  if (mode_ == MemoryMode::kHostMemory) {
    const WeightStore::Read r = weights_.disk_read(column);
    s.load = exec.mover().copy(Place::memory(Tier::kGpu, s.host.data()),
                               Place::disk(pack_file_, r.offset), r.bytes, exec.loads(), label);
  } else {
    // Into the device buffer: the cpu matrices from their RAM copies, the
    // disk tail through this slot's host buffer (io_uring reads land in it,
    // and it feeds the copy up).
    std::byte* dev = s.dev.as<std::byte>();
    for (const WeightStore::HostPart& p : weights_.host_parts(column)) {
      s.load = exec.mover().copy(Place::memory(Tier::kGpu, dev + p.rel),
                                 Place::memory(Tier::kCpu, const_cast<std::byte*>(p.host)), p.bytes,
                                 exec.loads(), label);
    }
    if (u != nullptr) {
      const WeightStore::Read r = weights_.disk_read(column);
      s.load = exec.mover().copy(Place::memory(Tier::kGpu, dev + weights_.disk_rel(column)),
                                 Place::disk(pack_file_, r.offset), r.bytes, exec.loads(), label,
                                 s.host.data());
    }
  }
  // The first read of this column's disk share in the run: its tensors
  // against the pack's checksums, in the host buffer the read landed in,
  // on the load queue once the read is done.
  uint8_t& verified = verified_[static_cast<size_t>(column)];
  if (u == nullptr || verified) return;
  verified = 1;
  const PackUnit* pu = pack_->find_unit(u->name);
  STRATA_ASSERT(pu != nullptr);
  const WeightStore::Read r = weights_.disk_read(column);
  const Pack* pack = pack_;
  const std::byte* host = s.host.data();
  const size_t first = u->first_disk;
  s.load = exec.loads().push(
      [pack, pu, first, host, r] {
        if (auto bad = pack->check_tensors(*pu, first, {host, r.bytes}, r.offset)) {
          pack->fail_damaged(*bad);
        }
      },
      "", 0, {fmt::format("verify {}", u->name), "weights", step});
}

const std::byte* WeightStaging::staged(int64_t column, int32_t step, Executor& exec) {
  if (!weights_.streams(column)) return nullptr;
  for (Slot& s : slots_) {
    if (s.column == column && s.step == step) {
      exec.loads().wait(s.load);
      return mode_ == MemoryMode::kHostMemory ? s.host.data() : s.dev.as<std::byte>();
    }
  }
  STRATA_ASSERT_MSG(false, "weights of column {} step {} were never loaded", column, step);
  return nullptr;
}

}  // namespace strata
