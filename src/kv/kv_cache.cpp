#include "kv/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

KvCache::KvCache(Backend& backend, const KvGeometry& geometry, uint64_t budget_bytes)
    : pool_(backend, geometry, budget_bytes) {}

KvCache::~KvCache() {
  for (Seq& s : seqs_) {
    for (int32_t p : s.pages) pool_.release(p);
  }
}

const KvCache::Seq& KvCache::get(int32_t seq) const {
  STRATA_ASSERT_MSG(
      seq >= 0 && static_cast<size_t>(seq) < seqs_.size() && seqs_[static_cast<size_t>(seq)].live,
      "no live sequence {}", seq);
  return seqs_[static_cast<size_t>(seq)];
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
  ++n_live_;
  return id;
}

void KvCache::remove_sequence(int32_t seq) {
  get(seq);
  Seq& s = seqs_[static_cast<size_t>(seq)];
  for (int32_t p : s.pages) pool_.release(p);
  s.pages.clear();
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

int64_t KvCache::extend(int32_t seq, int64_t n_new) {
  get(seq);
  STRATA_ASSERT(n_new >= 0);
  Seq& s = seqs_[static_cast<size_t>(seq)];
  const KvGeometry& g = pool_.geometry();
  const int64_t old_len = s.length;
  const int64_t want = g.pages_for(old_len + n_new);
  if (old_len % g.page_size != 0 && n_new > 0) {
    STRATA_ASSERT_MSG(pool_.ref_count(s.pages.back()) == 1,
                      "appending into page {} shared by {} tables", s.pages.back(),
                      pool_.ref_count(s.pages.back()));
  }
  const size_t had = s.pages.size();
  try {
    while (static_cast<int64_t>(s.pages.size()) < want) s.pages.push_back(pool_.allocate());
  } catch (...) {
    while (s.pages.size() > had) {
      pool_.release(s.pages.back());
      s.pages.pop_back();
    }
    throw;
  }
  s.length = old_len + n_new;
  return old_len;
}

int64_t KvCache::pages_needed(std::span<const int32_t> seqs,
                              std::span<const int64_t> total_tokens) const {
  const KvGeometry& g = pool_.geometry();
  int64_t n = 0;
  for (size_t i = 0; i < total_tokens.size(); ++i) {
    const int64_t have = i < seqs.size() ? static_cast<int64_t>(get(seqs[i]).pages.size()) : 0;
    n += std::max<int64_t>(0, g.pages_for(total_tokens[i]) - have);
  }
  return n;
}

}  // namespace strata
