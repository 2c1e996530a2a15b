// BPE merging with a priority queue over adjacent symbol pairs.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>

#include "core/log.h"
#include "tokenizer/unicode.h"

namespace strata::tok {

namespace {

struct Symbol {
  int32_t id;    // -1 once merged into its left neighbour
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
};

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol
  int32_t left;
  int32_t right;
  int32_t merged;
};

struct CandidateAfter {
  // Lowest rank first; on equal rank the leftmost pair.
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
  }
};

}  // namespace

BpeModel::BpeModel(const Vocab& vocab, const std::vector<BpeMerge>& merges, BpeOptions options)
    : vocab_(vocab), options_(options) {
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    merges_.emplace(key(merges[r].left, merges[r].right),
                    MergeInfo{static_cast<int32_t>(r), merges[r].merged});
  }
  for (int b = 0; b < 256; ++b) {
    const std::string single(1, static_cast<char>(b));
    byte_token_[b] = vocab_.find(byte_level_encode(single));
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    fallback_token_[b] = vocab_.find(name);
  }
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  auto push_unknown = [&](std::string_view bytes) {
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char c : bytes) all = all && fallback_token_[c] >= 0;
      if (all) {
        for (unsigned char c : bytes) ids.push_back(fallback_token_[c]);
        return;
      }
    }
    if (options_.unk_id < 0) return;  // no way to represent it: dropped
    if (options_.fuse_unk && !ids.empty() && ids.back() == options_.unk_id) return;
    ids.push_back(options_.unk_id);
  };
  if (options_.byte_level) {
    for (size_t i = 0; i < word.size(); ++i) {
      const int32_t id = byte_token_[static_cast<unsigned char>(word[i])];
      if (id >= 0) {
        ids.push_back(id);
      } else {
        push_unknown(word.substr(i, 1));
      }
    }
    return;
  }
  for (size_t i = 0; i < word.size();) {
    const size_t len =
        std::min(utf8_lead_len(static_cast<unsigned char>(word[i])), word.size() - i);
    const std::string_view ch = word.substr(i, len);
    const int32_t id = vocab_.find(ch);
    if (id >= 0) {
      ids.push_back(id);
    } else {
      push_unknown(ch);
    }
    i += len;
  }
}

void BpeModel::merge(std::vector<int32_t>& ids) const {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Candidate> heap;  // binary heap ordered by CandidateAfter
  sym.resize(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  heap.clear();
  const CandidateAfter after;
  auto consider = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t nx = sym[pos].next;
    if (nx < 0) return;
    auto it = merges_.find(key(sym[pos].id, sym[nx].id));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, pos, sym[pos].id, sym[nx].id, it->second.merged});
    std::push_heap(heap.begin(), heap.end(), after);
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const Candidate c = heap.back();
    heap.pop_back();
    // Stale when either side changed since the pair was queued: a symbol only
    // changes by growing (a longer token, so a new id) or by being absorbed (-1).
    if (sym[c.pos].id != c.left) continue;
    const int32_t nx = sym[c.pos].next;
    if (nx < 0 || sym[nx].id != c.right) continue;
    sym[c.pos].id = c.merged;
    sym[c.pos].next = sym[nx].next;
    if (sym[nx].next >= 0) sym[sym[nx].next].prev = c.pos;
    sym[nx].id = -1;
    consider(sym[c.pos].prev);
    consider(c.pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const int32_t id =
        options_.byte_level ? vocab_.find(byte_level_encode(word)) : vocab_.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  ids.clear();
  initial_symbols(word, ids);
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), ids);
  }
}

}  // namespace strata::tok
