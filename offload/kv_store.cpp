// Page tables, page homes and the disk file of the offload engine's KV cache
// (kv_store.h).
#include "offload/kv_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "offload/aligned_buffer.h"

namespace strata {

KvStore::KvStore(Backend& backend, const KvGeometry& geometry, uint64_t budget_bytes,
                 const Placement& placement)
    : pool_(backend, geometry, budget_bytes), f_(placement) {
  f_.validate("placement");
  record_bytes_ = align_up(2 * geometry.page_bytes(), kDiskAlign);
}

KvStore::~KvStore() {
  for (Seq& s : seqs_) {
    for (int32_t p : s.pages) release_page(p);
  }
}

KvStore::Seq& KvStore::get(int32_t seq) {
  STRATA_ASSERT_MSG(
      seq >= 0 && static_cast<size_t>(seq) < seqs_.size() && seqs_[static_cast<size_t>(seq)].live,
      "no live sequence {}", seq);
  return seqs_[static_cast<size_t>(seq)];
}

const KvStore::Seq& KvStore::get(int32_t seq) const {
  return const_cast<KvStore*>(this)->get(seq);
}

int32_t KvStore::add_sequence() {
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<int32_t>(seqs_.size());
    seqs_.emplace_back();
  }
  Seq& s = seqs_[static_cast<size_t>(id)];
  s.live = true;
  s.length = 0;
  s.pages.clear();
  s.completed.clear();
  ++n_live_;
  return id;
}

void KvStore::release_page(int32_t page) {
  const size_t p = static_cast<size_t>(page);
  if (p < slot_of_.size() && slot_of_[p] >= 0) {
    free_slots_.push_back(slot_of_[p]);
    slot_of_[p] = -1;
  }
  if (p < created_.size()) created_[p] = -1;
  std::erase_if(retiring_, [&](const Retiring& r) { return r.page == page; });
  pool_.release(page);
}

void KvStore::remove_sequence(int32_t seq) {
  Seq& s = get(seq);
  for (int32_t p : s.pages) release_page(p);
  s.pages.clear();
  s.completed.clear();
  s.length = 0;
  s.live = false;
  free_ids_.push_back(seq);
  --n_live_;
}

int64_t KvStore::length(int32_t seq) const {
  return get(seq).length;
}

std::span<const int32_t> KvStore::pages(int32_t seq) const {
  return get(seq).pages;
}

std::span<const int32_t> KvStore::completed(int32_t seq) const {
  return get(seq).completed;
}

int32_t KvStore::take_disk_slot() {
  STRATA_ASSERT_MSG(!free_slots_.empty(), "KV disk file of {} pages per layer is full",
                    slot_capacity_);
  const int32_t s = free_slots_.back();
  free_slots_.pop_back();
  return s;
}

int64_t KvStore::extend(int32_t seq, int64_t n_new, int32_t step) {
  Seq& s = get(seq);
  STRATA_ASSERT(n_new >= 0);
  const KvGeometry& g = pool_.geometry();
  const int64_t ps = g.page_size;
  const int64_t old_len = s.length, new_len = old_len + n_new;
  const int64_t want = g.pages_for(new_len);
  const size_t had = s.pages.size();
  try {
    for (int64_t p = static_cast<int64_t>(had); p < want; ++p) {
      const bool full = (p + 1) * ps <= new_len;
      const Tier home = home_of_index(p);
      int32_t id;
      if (home == Tier::kDisk && full) {
        id = pool_.allocate_unbacked();
      } else {
        id = pool_.allocate();
        if (home != Tier::kDisk) pool_.set_home(id, to_page_tier(home));
      }
      s.pages.push_back(id);
      const size_t cap = static_cast<size_t>(pool_.capacity());
      if (slot_of_.size() < cap) {
        slot_of_.resize(cap, -1);
        created_.resize(cap, -1);
      }
      if (!pool_.backed(id)) created_[static_cast<size_t>(id)] = step;
    }
  } catch (...) {
    while (s.pages.size() > had) {
      release_page(s.pages.back());
      s.pages.pop_back();
    }
    throw;
  }
  // Disk pages these tokens complete: stored in this step.
  s.completed.clear();
  for (int64_t p = old_len / ps; (p + 1) * ps <= new_len; ++p) {
    if (home_of_index(p) != Tier::kDisk) continue;
    const int32_t id = s.pages[static_cast<size_t>(p)];
    if (slot_of_[static_cast<size_t>(id)] < 0) slot_of_[static_cast<size_t>(id)] = take_disk_slot();
    s.completed.push_back(id);
  }
  s.length = new_len;
  return old_len;
}

KvStore::Needs KvStore::needs(const std::vector<std::vector<int64_t>>& lengths) const {
  const KvGeometry& g = pool_.geometry();
  Needs n;
  for (const std::vector<int64_t>& mb : lengths) {
    int64_t records = 0;
    for (int64_t len : mb) {
      const int64_t n_pages = g.pages_for(len), n_full = len / g.page_size;
      int64_t ram = 0, disk_full = 0;
      bool any_disk_page = false;
      for (int64_t p = 0; p < n_pages; ++p) {
        if (home_of_index(p) == Tier::kDisk) {
          any_disk_page = true;
          if (p < n_full) ++disk_full;
        } else {
          ++ram;
        }
      }
      // At most one disk page of a sequence is backed at a time: the partial
      // one, or the one completed in the previous step until it retires.
      n.backed_pages += ram + (any_disk_page ? 1 : 0);
      n.disk_pages += disk_full;
      records += disk_full;
    }
    n.stage_records = std::max(n.stage_records, records);
  }
  return n;
}

void KvStore::prepare_file(const std::string& dir, int64_t disk_pages) {
  if (disk_pages <= slot_capacity_) return;
  STRATA_ASSERT_MSG(n_live_ == 0, "KV disk file resized with {} live sequences", n_live_);
  namespace fs = std::filesystem;
  if (!file_.is_open()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      fail("--offload-dir {}: cannot create the directory: {}; choose a directory you can write to",
           dir, ec.message());
    }
    static std::atomic<int> counter{0};
    const std::string path =
        (fs::path(dir) / fmt::format("strata-kv-{}-{}.bin", ::getpid(), counter++)).string();
    file_ = DiskFile::open(path, OpenMode::kCreate, true);
    // The name goes at once: the descriptor keeps the file, and nothing is
    // left behind however the process ends.
    ::unlink(path.c_str());
    spdlog::info("kv: pages on disk go to {} ({})", dir,
                 file_.direct() ? "O_DIRECT" : "buffered: the filesystem has no O_DIRECT");
  }
  const uint64_t bytes = static_cast<uint64_t>(pool_.geometry().n_layer) *
                         static_cast<uint64_t>(disk_pages) * record_bytes_;
  file_.allocate(bytes);
  slot_capacity_ = disk_pages;
  free_slots_.clear();
  for (int64_t s = slot_capacity_ - 1; s >= 0; --s) free_slots_.push_back(static_cast<int32_t>(s));
}

uint64_t KvStore::file_bytes() const {
  return static_cast<uint64_t>(pool_.geometry().n_layer) * static_cast<uint64_t>(slot_capacity_) *
         record_bytes_;
}

uint64_t KvStore::record_offset(int64_t layer, int32_t slot) const {
  STRATA_ASSERT(layer >= 0 && layer < pool_.geometry().n_layer);
  STRATA_ASSERT(slot >= 0 && slot < slot_capacity_);
  return (static_cast<uint64_t>(layer) * static_cast<uint64_t>(slot_capacity_) +
          static_cast<uint64_t>(slot)) *
         record_bytes_;
}

int32_t KvStore::disk_slot(int32_t page) const {
  const size_t p = static_cast<size_t>(page);
  return p < slot_of_.size() ? slot_of_[p] : -1;
}

bool KvStore::fresh(int32_t page, int32_t step) const {
  const size_t p = static_cast<size_t>(page);
  return !pool_.backed(page) && p < created_.size() && created_[p] == step;
}

void KvStore::mark_retiring(int32_t page, uint64_t last_store) {
  for (Retiring& r : retiring_) {
    if (r.page == page) {
      r.last_store = std::max(r.last_store, last_store);
      return;
    }
  }
  retiring_.push_back({page, last_store});
}

uint64_t KvStore::retiring_until() const {
  uint64_t n = 0;
  for (const Retiring& r : retiring_) n = std::max(n, r.last_store);
  return n;
}

void KvStore::retire(uint64_t done) {
  std::erase_if(retiring_, [&](const Retiring& r) {
    if (r.last_store > done) return false;
    pool_.drop_storage(r.page);
    return true;
  });
}

}  // namespace strata
