// KV staging (kv_staging.h).
#include "offload/kv_staging.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <unordered_set>

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
      last_store_(static_cast<size_t>(kv.geometry().n_layer * n_micro_batches), 0),
      selected_(static_cast<size_t>(kv.geometry().n_layer)) {
  listeners_.reserve(static_cast<size_t>(n_micro_batches));
  for (int64_t k = 0; k < n_micro_batches; ++k) listeners_.emplace_back(this, k);
}

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

void KvStaging::plan(int64_t k, std::span<const int32_t> kv_sequences,
                     std::span<const uint8_t> sparse, int32_t step) {
  STRATA_ASSERT(sparse.size() == kv_sequences.size());
  Plan& p = plans_[static_cast<size_t>(k)];
  p.pages.clear();
  p.fresh.clear();
  p.selective.clear();
  p.record_of.clear();
  p.completed_backed.clear();
  const PagePool& pool = kv_.pool();
  // A page shared by several sequences (a prompt prefix) has one record.
  std::unordered_set<int32_t> shared;
  for (size_t i = 0; i < kv_sequences.size(); ++i) {
    const int32_t seq = kv_sequences[i];
    for (int32_t page : kv_.pages(seq)) {
      if (pool.backed(page)) continue;
      // It is read whole: a sequence that attends to all of it may hold it.
      const bool many = kv_.refs(page) > 1;
      if (many && !shared.insert(page).second) continue;
      const bool selective = sparse[i] != 0 && !many;
      if (selective) p.record_of.emplace(page, static_cast<int32_t>(p.pages.size()));
      p.pages.push_back(page);
      p.fresh.push_back(kv_.fresh(page, step) ? 1 : 0);
      p.selective.push_back(selective ? 1 : 0);
    }
    for (int32_t page : kv_.completed(seq)) {
      if (pool.backed(page)) p.completed_backed.push_back(page);
    }
  }
}

KvStaging::Slot& KvStaging::slot_for(int64_t layer, int64_t k, int32_t step, Executor& exec) {
  // The compute's place in schedule order (steps, then layers, then micro-
  // batches). A new compute takes over the slot of the older one: the two
  // slots serve consecutive computes that stage KV, whichever micro-batches
  // are live (a prefix step computes one of them: alternating by the
  // position alone gave it the same slot at every layer, and each layer
  // waited for the store of the one before).
  const int64_t q = (static_cast<int64_t>(step) * kv_.geometry().n_layer + layer) * n_mb_ + k;
  for (Slot& s : slots_) {
    if (s.order == q) return s;
  }
  Slot& s = slots_[0].order <= slots_[1].order ? slots_[0] : slots_[1];
  STRATA_ASSERT_MSG(s.order < q, "KV staging: a slot taken over before its compute ran");
  // Taken over from an earlier compute: what it stored from it must be
  // out, and the CPU attention that read it done.
  if (s.last_store > 0) exec.stores().wait(s.last_store);
  if (s.layer >= 0) wait_attention(s.layer, s.micro_batch);
  s.order = q;
  s.layer = layer;
  s.micro_batch = k;
  s.load = 0;
  return s;
}

bool KvStaging::prefetch(const Plan& p, size_t r, int64_t layer) const {
  if (p.fresh[r]) return false;  // written by the layer's KV append
  if (!p.selective[r] || layer < kSparseFirstLayer) return true;
  const std::vector<uint8_t>& last = selected_[static_cast<size_t>(layer)];
  const auto page = static_cast<size_t>(p.pages[r]);
  return page < last.size() && last[page] != 0;
}

template <typename Want>
size_t KvStaging::run_end(const Plan& p, size_t r, Want want) const {
  const int32_t first = kv_.disk_slot(p.pages[r]);
  size_t end = r + 1;
  for (size_t e = r + 1; e < p.pages.size() && !p.fresh[e] &&
                         kv_.disk_slot(p.pages[e]) == first + static_cast<int32_t>(e - r);
       ++e) {
    if (want(e)) {
      end = e + 1;
    } else if (e + 1 - end > kReadGapRecords) {
      break;
    }
  }
  return end;
}

uint64_t KvStaging::read_records(Slot& slot, const Plan& p, size_t r, size_t e, int64_t layer,
                                 int64_t k, int32_t step, Executor& exec, TransferQueue& queue) {
  std::fill(slot.loaded.begin() + static_cast<ptrdiff_t>(r),
            slot.loaded.begin() + static_cast<ptrdiff_t>(e), 1);
  const int32_t first = kv_.disk_slot(p.pages[r]);
  return exec.mover().copy(place(record(slot, r)),
                           Place::disk(file_.file(), file_.record_offset(layer, first)),
                           (e - r) * file_.record_bytes(), queue,
                           {fmt::format("kv layer {} k={}", layer, k), "kv", step}, relay(slot, r));
}

void KvStaging::load(int64_t layer, int64_t k, int32_t step, Executor& exec) {
  const Plan& p = plans_[static_cast<size_t>(k)];
  if (p.pages.empty()) return;
  // The records were written by earlier steps' stores of this layer and
  // micro-batch: they must be on disk before the read.
  const uint64_t written = last_store_[static_cast<size_t>(layer * n_mb_ + k)];
  if (written > 0) exec.stores().wait(written);
  Slot& slot = slot_for(layer, k, step, exec);
  slot.loaded.assign(p.fresh.begin(), p.fresh.end());
  // Runs of records whose disk slots are consecutive are one read each.
  size_t r = 0;
  while (r < p.pages.size()) {
    if (!prefetch(p, r, layer)) {
      ++r;
      continue;
    }
    const size_t e = run_end(p, r, [&](size_t i) { return prefetch(p, i, layer); });
    slot.load = read_records(slot, p, r, e, layer, k, step, exec, exec.loads());
    r = e;
  }
}

void KvStaging::fetch_selected(int64_t layer, int64_t k, const MicroBatch& mb) {
  const Plan& p = plans_[static_cast<size_t>(k)];
  if (p.record_of.empty() || layer < kSparseFirstLayer) return;
  STRATA_ASSERT(exec_ != nullptr && mb.sel_ids != nullptr);
  Executor& exec = *exec_;
  Slot& slot = slot_for(layer, k, step_, exec);
  STRATA_ASSERT(slot.loaded.size() == p.pages.size());
  // The records this group's selections take (over all its kv heads).
  std::vector<uint8_t> sel(p.pages.size(), 0);
  const int32_t n_sel = mb.sparse.page_indptr[mb.sparse.n_seq];
  for (int32_t i = 0; i < n_sel; ++i) {
    const auto it = p.record_of.find(mb.sel_ids[i]);
    if (it != p.record_of.end()) sel[static_cast<size_t>(it->second)] = 1;
  }
  // Its sequences' selections replace their last ones for the next step's
  // prefetch; what the prefetch brought is counted.
  std::vector<uint8_t>& last = selected_[static_cast<size_t>(layer)];
  const int32_t n_pages = mb.seqs.page_indptr[mb.seqs.n_seq];
  for (int32_t i = 0; i < n_pages; ++i) {
    const int32_t page = mb.seqs.page_ids[i];
    const auto it = p.record_of.find(page);
    if (it == p.record_of.end()) continue;
    const auto r = static_cast<size_t>(it->second);
    if (static_cast<size_t>(page) >= last.size()) {
      last.resize(std::max<size_t>(static_cast<size_t>(page) + 1, 2 * last.size()), 0);
    }
    last[static_cast<size_t>(page)] = sel[r];
    if (slot.loaded[r]) ++(sel[r] ? sparse_reads_.hits : sparse_reads_.unused);
  }
  // The misses: read now, in runs of consecutive disk slots, and waited for.
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t last_read = 0;
  size_t r = 0;
  while (r < p.pages.size()) {
    if (!sel[r] || slot.loaded[r]) {
      ++r;
      continue;
    }
    const size_t e = run_end(p, r, [&](size_t i) { return sel[i] && !slot.loaded[i]; });
    for (size_t i = r; i < e; ++i) sparse_reads_.misses += sel[i] && !slot.loaded[i];
    last_read = read_records(slot, p, r, e, layer, k, step_, exec, exec.urgent_loads());
    r = e;
  }
  if (last_read == 0) return;
  exec.urgent_loads().wait(last_read);
  sparse_reads_.stall_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void KvStaging::stage(int64_t layer, int64_t k, int32_t step, Executor& exec) {
  exec_ = &exec;
  step_ = step;
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
