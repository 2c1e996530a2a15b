// KV staging (kv_staging.h).
#include "offload/kv_staging.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "offload/cpu_attention.h"
#include "offload/executor.h"

namespace strata {

KvStaging::KvStaging(KvCache& kv, MemoryMode mode, Backend& device, TierPool& ram,
                     int64_t n_micro_batches, CpuAttention* attention)
    : kv_(kv),
      mode_(mode),
      device_(device),
      ram_(ram),
      n_mb_(n_micro_batches),
      attention_(attention),
      file_(kv.geometry()),
      plans_(static_cast<size_t>(n_micro_batches)),
      last_store_(static_cast<size_t>(kv.geometry().n_layer * n_micro_batches), 0) {}

KvStaging::~KvStaging() = default;

void KvStaging::release() {
  for (Slot& s : slots_) s = Slot{};
}

uint64_t KvStaging::prepare(const KvNeeds& needs, const std::string& dir) {
  const uint64_t bytes = static_cast<uint64_t>(needs.stage_records) * file_.record_bytes();
  for (Slot& s : slots_) {
    s = Slot{};
    if (bytes == 0) continue;
    if (kv_in_host_memory(mode_)) {
      s.host = ram_.allocate(bytes, "KV staging buffer");
    } else {
      s.dev = device_.alloc(bytes);
      s.host = ram_.allocate(bytes, "KV staging relay buffer");
    }
  }
  if (needs.disk_pages == 0) return 0;
  kv_.set_disk_slots(needs.disk_pages, needs.disk_extent);
  file_.prepare(dir, kv_.disk_slots());
  return file_.bytes();
}

std::byte* KvStaging::record(const Slot& s, size_t r) const {
  std::byte* base = kv_in_host_memory(mode_) ? s.host.data() : s.dev.as<std::byte>();
  return base + r * file_.record_bytes();
}

std::byte* KvStaging::relay(const Slot& s, size_t r) const {
  if (kv_in_host_memory(mode_)) return nullptr;
  return s.host.data() + r * file_.record_bytes();
}

Place KvStaging::place(void* p) const {
  return Place::memory(kv_in_host_memory(mode_) ? Tier::kCpu : Tier::kGpu, p);
}

void KvStaging::wait_attention(int64_t layer, int64_t k) const {
  if (attention_ != nullptr) attention_->wait(layer, k);
}

void KvStaging::plan(int64_t k, std::span<const int32_t> kv_sequences, int32_t step) {
  Plan& p = plans_[static_cast<size_t>(k)];
  p.pages.clear();
  p.fresh.clear();
  p.completed_backed.clear();
  const PagePool& pool = kv_.pool();
  for (const int32_t seq : kv_sequences) {
    for (int32_t page : kv_.pages(seq)) {
      if (pool.backed(page)) continue;
      p.pages.push_back(page);
      p.fresh.push_back(kv_.fresh(page, step) ? 1 : 0);
    }
    for (int32_t page : kv_.completed(seq)) {
      if (pool.backed(page)) p.completed_backed.push_back(page);
    }
  }
}

KvStaging::Slot& KvStaging::slot_for(int64_t layer, int64_t k, int32_t step, Executor& exec) {
  // Consecutive layer computes (in schedule order, across steps) alternate.
  const int64_t q = (static_cast<int64_t>(step) * kv_.geometry().n_layer + layer) * n_mb_ + k;
  Slot& s = slots_[static_cast<size_t>(q % 2)];
  if (s.layer != layer || s.micro_batch != k || s.step != step) {
    // Taken over from an earlier compute: what it stored from it must be
    // out, and the CPU attention that read it done.
    if (s.last_store > 0) exec.stores().wait(s.last_store);
    if (s.layer >= 0) wait_attention(s.layer, s.micro_batch);
    s.layer = layer;
    s.micro_batch = k;
    s.step = step;
    s.load = 0;
  }
  return s;
}

void KvStaging::load(int64_t layer, int64_t k, int32_t step, Executor& exec) {
  const Plan& p = plans_[static_cast<size_t>(k)];
  if (p.pages.empty()) return;
  // The records were written by earlier steps' stores of this layer and
  // micro-batch: they must be on disk before the read.
  const uint64_t written = last_store_[static_cast<size_t>(layer * n_mb_ + k)];
  if (written > 0) exec.stores().wait(written);
  Slot& slot = slot_for(layer, k, step, exec);
  const uint64_t rec = file_.record_bytes();
  // Runs of records whose disk slots are consecutive are one read each.
  size_t r = 0;
  while (r < p.pages.size()) {
    if (p.fresh[r]) {
      ++r;
      continue;
    }
    const int32_t first = kv_.disk_slot(p.pages[r]);
    size_t e = r + 1;
    while (e < p.pages.size() && !p.fresh[e] &&
           kv_.disk_slot(p.pages[e]) == first + static_cast<int32_t>(e - r)) {
      ++e;
    }
    slot.load = exec.mover().copy(place(record(slot, r)),
                                  Place::disk(file_.file(), file_.record_offset(layer, first)),
                                  (e - r) * rec, exec.loads(),
                                  {fmt::format("kv layer {} k={}", layer, k), "kv", step},
                                  relay(slot, r));
    r = e;
  }
}

void KvStaging::stage(int64_t layer, int64_t k, int32_t step, Executor& exec) {
  const Plan& p = plans_[static_cast<size_t>(k)];
  if (p.pages.empty()) return;
  Slot& slot = slot_for(layer, k, step, exec);
  if (slot.load > 0) exec.loads().wait(slot.load);
  const uint64_t pb = kv_.geometry().page_bytes();
  for (size_t r = 0; r < p.pages.size(); ++r) {
    std::byte* rec = record(slot, r);
    kv_.pool().stage(layer, p.pages[r], rec, rec + pb);
  }
}

void KvStaging::store(int64_t layer, int64_t k, int32_t step, Executor& exec) {
  const Plan& p = plans_[static_cast<size_t>(k)];
  wait_attention(layer, k);  // its KV append wrote what is stored
  const uint64_t rec = file_.record_bytes(), pb = kv_.geometry().page_bytes();
  const TransferLabel label{fmt::format("kv layer {} k={}", layer, k), "kv", step};
  uint64_t last = 0;
  // Fresh pages: from their staging records, runs of consecutive disk slots
  // in one write.
  size_t r = 0;
  while (r < p.pages.size()) {
    if (!p.fresh[r]) {
      ++r;
      continue;
    }
    const int32_t first = kv_.disk_slot(p.pages[r]);
    size_t e = r + 1;
    while (e < p.pages.size() && p.fresh[e] &&
           kv_.disk_slot(p.pages[e]) == first + static_cast<int32_t>(e - r)) {
      ++e;
    }
    Slot& slot = slot_for(layer, k, step, exec);
    last = exec.mover().copy(Place::disk(file_.file(), file_.record_offset(layer, first)),
                             place(record(slot, r)), (e - r) * rec, exec.stores(), label,
                             relay(slot, r));
    slot.last_store = last;
    r = e;
  }
  // Pages completed in RAM: K and V of this layer from the pool.
  for (int32_t page : p.completed_backed) {
    const auto [k_page, v_page] = kv_.pool().entry(layer, page);
    const uint64_t off = file_.record_offset(layer, kv_.disk_slot(page));
    exec.mover().copy(Place::disk(file_.file(), off), place(k_page), pb, exec.stores(), label);
    last = exec.mover().copy(Place::disk(file_.file(), off + pb), place(v_page), pb, exec.stores(),
                             label);
    if (layer == kv_.geometry().n_layer - 1) kv_.mark_retiring(page, last);
  }
  if (last > 0) last_store_[static_cast<size_t>(layer * n_mb_ + k)] = last;
}

void KvStaging::retire(Executor& exec) {
  if (kv_.n_retiring() == 0) return;
  exec.stores().wait(kv_.retiring_until());
  kv_.retire(exec.stores().n_done());
}

void KvStaging::wait_retiring(Executor& exec) {
  if (kv_.n_retiring() > 0) exec.stores().wait(kv_.retiring_until());
}

}  // namespace strata
