// Score-ordered bigram merging over UTF-8 characters.
#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/unicode.h"

namespace strata::tok {

namespace {

struct Symbol {
  uint32_t begin;  // byte offset into the text
  uint32_t len;    // bytes; 0 once merged into the left neighbour
  int32_t prev;
  int32_t next;
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t len;  // bytes of the merged text, to detect stale entries
};

struct BigramAfter {
  // Highest score first; on equal score the leftmost pair.
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

// Offsets where a U+2581 follows a character other than U+2581.
bool has_inner_space(std::string_view t, size_t from) {
  for (size_t p = t.find(kSpace, std::max<size_t>(from, 1)); p != std::string_view::npos;
       p = t.find(kSpace, p + 1)) {
    if (p < kSpace.size() || t.substr(p - kSpace.size(), kSpace.size()) != kSpace) return true;
  }
  return false;
}

}  // namespace

SpmModel::SpmModel(const Vocab& vocab, int32_t unk_id) : vocab_(vocab), unk_id_(unk_id) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_token_[b] = vocab_.find(name);
  }
  segment_at_spaces_ = true;
  for (int32_t i = 0; i < vocab_.size() && segment_at_spaces_; ++i) {
    if (vocab_.kind[i] == TokenKind::kControl) continue;
    if (has_inner_space(vocab_.text[i], 1)) segment_at_spaces_ = false;
  }
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (!segment_at_spaces_) {
    encode_segment(text, out);
    return;
  }
  size_t begin = 0;
  size_t p = text.find(kSpace, 1);
  while (p != std::string_view::npos) {
    const bool after_space =
        p >= kSpace.size() && text.substr(p - kSpace.size(), kSpace.size()) == kSpace;
    if (!after_space) {
      encode_cached(text.substr(begin, p - begin), out);
      begin = p;
    }
    p = text.find(kSpace, p + 1);
  }
  encode_cached(text.substr(begin), out);
}

void SpmModel::encode_cached(std::string_view segment, std::vector<int32_t>& out) const {
  if (segment.size() > kMaxCachedSegment) {
    encode_segment(segment, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(segment);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  encode_segment(segment, out);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(segment), std::vector<int32_t>(out.begin() + start, out.end()));
}

void SpmModel::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  thread_local std::vector<Symbol> sym;
  sym.clear();
  for (size_t i = 0; i < text.size();) {
    const size_t len =
        std::min(utf8_lead_len(static_cast<unsigned char>(text[i])), text.size() - i);
    const int32_t idx = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), idx - 1, -1});
    if (idx > 0) sym[idx - 1].next = idx;
    i += len;
  }
  thread_local std::vector<Bigram> heap;
  heap.clear();
  const BigramAfter after;
  const bool have_scores = !vocab_.score.empty();
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = sym[left].len + sym[right].len;
    const int32_t id = vocab_.find(text.substr(sym[left].begin, len));
    if (id < 0 || vocab_.kind[id] == TokenKind::kControl) return;
    heap.push_back({have_scores ? vocab_.score[id] : 0.0f, left, right, len});
    std::push_heap(heap.begin(), heap.end(), after);
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) consider(i - 1, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    consider(l.prev, b.left);
    consider(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].begin, sym[i].len);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Only single characters can be missing (merges always form tokens): their
    // bytes as <0xXX> tokens, or one unknown token when those do not exist.
    bool all_bytes = true;
    for (unsigned char c : piece) all_bytes = all_bytes && byte_token_[c] >= 0;
    if (all_bytes) {
      for (unsigned char c : piece) out.push_back(byte_token_[c]);
    } else if (unk_id_ >= 0) {
      out.push_back(unk_id_);
    }
  }
}

}  // namespace strata::tok
