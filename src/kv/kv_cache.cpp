// The paged KV cache (kv_cache.h): page homes, page tables, disk slots.
#include "kv/kv_cache.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/kv_layout.h"

namespace strata {

namespace {

// floor((p + 1) f) > floor(p f): page p is one of the fraction f of pages
// (with a tolerance so that f = 1 selects every page despite rounding).
bool selects(double f, int64_t p) {
  if (f >= 1 - 1e-12) return true;
  if (f <= 1e-12) return false;
  const double a = std::floor(static_cast<double>(p) * f + 1e-9);
  const double b = std::floor(static_cast<double>(p + 1) * f + 1e-9);
  return b > a;
}

}  // namespace

Tier kv_page_home(const Placement& f, int64_t page_index) {
  if (!selects(f[Share::kKvGpu] + f[Share::kKvCpu], page_index)) return Tier::kDisk;
  return selects(f[Share::kKvGpu], page_index) ? Tier::kGpu : Tier::kCpu;
}

KvNeeds kv_block_needs(const KvGeometry& g, const Placement& placement,
                       const std::vector<std::vector<int64_t>>& lengths, int64_t decode_tokens,
                       const std::vector<std::vector<int64_t>>& shared, int64_t disk_extent) {
  STRATA_ASSERT(disk_extent >= 0);
  STRATA_ASSERT(shared.empty() || shared.size() == lengths.size());
  KvNeeds n;
  // Disk pages of a sequence backed at once: the partial one, or the one
  // completed in the previous step until it retires; with draft tokens also
  // the page they open after the fed token completes one.
  const int64_t disk_backed = decode_tokens > 1 ? 2 : 1;
  std::vector<int64_t> disk;  // disk pages of each sequence
  for (size_t k = 0; k < lengths.size(); ++k) {
    const std::vector<int64_t>& mb = lengths[k];
    STRATA_ASSERT(shared.empty() || shared[k].size() == mb.size());
    int64_t records = 0;
    for (size_t i = 0; i < mb.size(); ++i) {
      const int64_t len = mb[i], n_pages = g.pages_for(len), n_full = len / g.page_size;
      const int64_t first_own = shared.empty() ? 0 : shared[k][i];
      STRATA_ASSERT(first_own >= 0 && first_own <= n_full);
      int64_t ram = 0, disk_full = 0;
      bool any_disk_page = false;
      for (int64_t p = 0; p < n_pages; ++p) {
        const bool own = p >= first_own;
        if (kv_page_home(placement, p) == Tier::kDisk) {
          any_disk_page = any_disk_page || own;
          if (p < n_full) {
            ++records;
            if (own) ++disk_full;
          }
        } else if (own) {
          ++ram;
        }
      }
      n.backed_pages += ram + (any_disk_page ? disk_backed : 0);
      disk.push_back(disk_full);
    }
    n.stage_records = std::max(n.stage_records, records);
  }
  const int64_t most = disk.empty() ? 1 : *std::max_element(disk.begin(), disk.end());
  n.disk_extent = disk_extent > 0 ? disk_extent : kv_disk_extent_pages(g.page_bytes(), most);
  for (int64_t d : disk) n.disk_pages += (d + n.disk_extent - 1) / n.disk_extent * n.disk_extent;
  return n;
}

KvCache::KvCache(Backend& backend, const KvGeometry& geometry, uint64_t budget_bytes,
                 const Placement& placement)
    : pool_(backend, geometry, budget_bytes), placement_(placement) {
  placement_.validate("placement");
}

KvCache::~KvCache() {
  for (Seq& s : seqs_) {
    for (int32_t p : s.pages) free_page(p);
  }
}

KvCache::Seq& KvCache::get(int32_t seq) {
  STRATA_ASSERT_MSG(
      seq >= 0 && static_cast<size_t>(seq) < seqs_.size() && seqs_[static_cast<size_t>(seq)].live,
      "no live sequence {}", seq);
  return seqs_[static_cast<size_t>(seq)];
}

const KvCache::Seq& KvCache::get(int32_t seq) const {
  return const_cast<KvCache*>(this)->get(seq);
}

int32_t KvCache::add_sequence() {
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

void KvCache::free_page(int32_t page) {
  const size_t p = static_cast<size_t>(page);
  STRATA_ASSERT(p < refs_.size() && refs_[p] >= 1);
  if (--refs_[p] > 0) return;
  if (slot_of_[p] >= 0) release_slot(slot_of_[p]);
  slot_of_[p] = -1;
  created_[p] = -1;
  std::erase_if(retiring_, [&](const Retiring& r) { return r.page == page; });
  pool_.free(page);
}

void KvCache::release_slot(int32_t slot) {
  const auto e = static_cast<size_t>(slot / extent_);
  STRATA_ASSERT(e < extent_pages_.size() && extent_pages_[e] > 0);
  if (--extent_pages_[e] == 0 && extent_orphan_[e] != 0) {
    extent_orphan_[e] = 0;
    free_extents_.push_back(static_cast<int32_t>(e * static_cast<size_t>(extent_)));
  }
}

int32_t KvCache::refs(int32_t page) const {
  const auto p = static_cast<size_t>(page);
  return p < refs_.size() ? refs_[p] : 0;
}

void KvCache::remove_sequence(int32_t seq) {
  Seq& s = get(seq);
  for (int32_t p : s.pages) free_page(p);
  // An extent whose pages another sequence still shares goes with the last of them.
  for (int32_t e : s.extents) {
    const auto i = static_cast<size_t>(e / extent_);
    if (extent_pages_[i] == 0) {
      free_extents_.push_back(e);
    } else {
      extent_orphan_[i] = 1;
    }
  }
  s.extents.clear();
  s.extent_used = 0;
  s.pages.clear();
  s.completed.clear();
  s.length = 0;
  s.live = false;
  free_ids_.push_back(seq);
  --n_live_;
}

int64_t KvCache::length(int32_t seq) const {
  return get(seq).length;
}

std::span<const int32_t> KvCache::pages(int32_t seq) const {
  return get(seq).pages;
}

std::span<const int32_t> KvCache::completed(int32_t seq) const {
  return get(seq).completed;
}

int32_t KvCache::take_disk_slot(Seq& s) {
  if (s.extents.empty() || s.extent_used == extent_) {
    STRATA_ASSERT_MSG(!free_extents_.empty(),
                      "KV disk file of {} pages per layer (extents of {}) is full", slot_capacity_,
                      extent_);
    s.extents.push_back(free_extents_.back());
    free_extents_.pop_back();
    s.extent_used = 0;
  }
  return s.extents.back() + s.extent_used++;
}

int64_t KvCache::extend(int32_t seq, int64_t n_new, int32_t step) {
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
      const int32_t id = kv_page_home(placement_, p) == Tier::kDisk && full
                             ? pool_.allocate_unbacked()
                             : pool_.allocate();
      s.pages.push_back(id);
      const size_t cap = static_cast<size_t>(pool_.capacity());
      if (slot_of_.size() < cap) {
        slot_of_.resize(cap, -1);
        created_.resize(cap, -1);
        refs_.resize(cap, 0);
      }
      refs_[static_cast<size_t>(id)] = 1;
      if (!pool_.backed(id)) created_[static_cast<size_t>(id)] = step;
    }
  } catch (...) {
    while (s.pages.size() > had) {
      free_page(s.pages.back());
      s.pages.pop_back();
    }
    throw;
  }
  // Disk pages these tokens complete: stored in this step.
  s.completed.clear();
  for (int64_t p = old_len / ps; (p + 1) * ps <= new_len; ++p) {
    if (kv_page_home(placement_, p) != Tier::kDisk) continue;
    const int32_t id = s.pages[static_cast<size_t>(p)];
    if (slot_of_[static_cast<size_t>(id)] < 0) {
      const int32_t slot = take_disk_slot(s);
      slot_of_[static_cast<size_t>(id)] = slot;
      ++extent_pages_[static_cast<size_t>(slot / extent_)];
    }
    s.completed.push_back(id);
  }
  s.length = new_len;
  return old_len;
}

void KvCache::truncate(int32_t seq, int64_t n_drop) {
  Seq& s = get(seq);
  STRATA_ASSERT(n_drop >= 0 && n_drop <= s.length);
  const int64_t ps = pool_.geometry().page_size;
  const int64_t new_len = s.length - n_drop;
  for (int64_t p = new_len / ps; (p + 1) * ps <= s.length; ++p) {
    STRATA_ASSERT_MSG(kv_page_home(placement_, p) != Tier::kDisk,
                      "truncating sequence {} would reopen its completed disk page {}", seq, p);
  }
  // Pages from the one the next token goes to on are written again: none is shared.
  for (auto p = static_cast<size_t>(new_len / ps); p < s.pages.size(); ++p) {
    STRATA_ASSERT_MSG(refs(s.pages[p]) == 1, "truncating sequence {} into its shared page {}", seq,
                      p);
  }
  const auto want = static_cast<size_t>(pool_.geometry().pages_for(new_len));
  while (s.pages.size() > want) {
    free_page(s.pages.back());
    s.pages.pop_back();
  }
  s.length = new_len;
}

void KvCache::share_prefix(int32_t dst, int32_t src, int64_t n_pages) {
  STRATA_ASSERT(dst != src);
  Seq& d = get(dst);
  const Seq& from = get(src);
  const int64_t ps = pool_.geometry().page_size;
  STRATA_ASSERT_MSG(d.pages.empty() && d.length == 0,
                    "sequence {} shares a prefix into a table of {} pages", dst, d.pages.size());
  STRATA_ASSERT(n_pages >= 0 && n_pages * ps <= from.length);
  for (int64_t p = 0; p < n_pages; ++p) {
    const int32_t id = from.pages[static_cast<size_t>(p)];
    STRATA_ASSERT_MSG(kv_page_home(placement_, p) != Tier::kDisk || disk_slot(id) >= 0,
                      "shared disk page {} of sequence {} has no record", p, src);
    ++refs_[static_cast<size_t>(id)];
    d.pages.push_back(id);
  }
  d.length = n_pages * ps;
  d.completed.clear();
}

KvNeeds KvCache::needs(const std::vector<std::vector<int64_t>>& lengths) const {
  return kv_block_needs(pool_.geometry(), placement_, lengths);
}

void KvCache::set_disk_slots(int64_t n, int64_t extent) {
  STRATA_ASSERT(extent >= 1 && n % extent == 0);
  if (n <= slot_capacity_ && extent == extent_) return;
  STRATA_ASSERT_MSG(n_live_ == 0, "KV disk slots changed with {} live sequences", n_live_);
  slot_capacity_ = std::max(slot_capacity_, n);
  extent_ = extent;
  free_extents_.clear();
  extent_pages_.assign(static_cast<size_t>(slot_capacity_ / extent), 0);
  extent_orphan_.assign(extent_pages_.size(), 0);
  // Handed out from the back: the lowest slots first.
  for (int64_t e = slot_capacity_ / extent - 1; e >= 0; --e) {
    free_extents_.push_back(static_cast<int32_t>(e * extent));
  }
}

void KvCache::settle(int32_t seq) {
  for (const int32_t page : get(seq).pages) created_[static_cast<size_t>(page)] = -1;
}

void KvCache::continue_extent(int32_t dst, int32_t src) {
  Seq& d = get(dst);
  STRATA_ASSERT(d.extents.empty());
  int32_t last = -1;  // the slot of src's last disk page, in table order
  for (const int32_t page : get(src).pages) {
    if (slot_of_[static_cast<size_t>(page)] >= 0) last = slot_of_[static_cast<size_t>(page)];
  }
  if (last < 0) return;
  const int32_t used = last % static_cast<int32_t>(extent_) + 1;
  const auto e = static_cast<size_t>(last / extent_);
  if (used == extent_ || extent_orphan_[e] == 0) return;
  // Its slots after `used` held pages of the owner that are gone.
  extent_orphan_[e] = 0;
  d.extents.push_back(last - used + 1);
  d.extent_used = used;
}

int32_t KvCache::disk_slot(int32_t page) const {
  const size_t p = static_cast<size_t>(page);
  return p < slot_of_.size() ? slot_of_[p] : -1;
}

bool KvCache::fresh(int32_t page, int32_t step) const {
  const size_t p = static_cast<size_t>(page);
  return !pool_.backed(page) && p < created_.size() && created_[p] == step;
}

void KvCache::mark_retiring(int32_t page, uint64_t last_store) {
  for (Retiring& r : retiring_) {
    if (r.page == page) {
      r.last_store = std::max(r.last_store, last_store);
      return;
    }
  }
  retiring_.push_back({page, last_store});
}

uint64_t KvCache::retiring_until() const {
  uint64_t n = 0;
  for (const Retiring& r : retiring_) n = std::max(n, r.last_store);
  return n;
}

void KvCache::retire(uint64_t done) {
  std::erase_if(retiring_, [&](const Retiring& r) {
    if (r.last_store > done) return false;
    pool_.drop_storage(r.page);
    return true;
  });
}

}  // namespace strata
