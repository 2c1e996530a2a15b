// Leftmost-longest matching of added tokens, bucketed by first byte.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace strata::tok {

namespace {

// The code point that ends just before `pos`, or -1 at the start.
int64_t cp_before(std::string_view s, size_t pos) {
  if (pos == 0) return -1;
  size_t p = pos - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  const Utf8Step st = utf8_step(s, p);
  return st.kind == Utf8Step::kValid ? static_cast<int64_t>(st.cp) : -1;
}

int64_t cp_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return -1;
  const Utf8Step st = utf8_step(s, pos);
  return st.kind == Utf8Step::kValid ? static_cast<int64_t>(st.cp) : -1;
}

}  // namespace

void AddedTokenMatcher::add(AddedToken token) {
  if (token.content.empty()) return;
  if (!contents_.insert(token.content).second) return;
  const uint32_t index = static_cast<uint32_t>(tokens_.size());
  auto& bucket = by_first_byte_[static_cast<unsigned char>(token.content[0])];
  tokens_.push_back(std::move(token));
  // Keep the bucket longest first; equal lengths in insertion order.
  const size_t len = tokens_[index].content.size();
  auto at = std::upper_bound(bucket.begin(), bucket.end(), len, [&](size_t l, uint32_t other) {
    return l > tokens_[other].content.size();
  });
  bucket.insert(at, index);
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Fragment>& out) const {
  size_t text_begin = 0;  // start of the pending plain text
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[pos])];
    const AddedToken* hit = nullptr;
    for (uint32_t idx : bucket) {
      const AddedToken& t = tokens_[idx];
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      if (t.single_word) {
        const int64_t before = cp_before(text, pos);
        const int64_t after = cp_at(text, pos + t.content.size());
        if ((before >= 0 && is_word_char(static_cast<char32_t>(before))) ||
            (after >= 0 && is_word_char(static_cast<char32_t>(after)))) {
          continue;
        }
      }
      hit = &t;
      break;
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + hit->content.size();
    if (hit->lstrip) {
      while (start > text_begin) {
        const int64_t cp = cp_before(text, start);
        if (cp < 0 || !is_unicode_space(static_cast<char32_t>(cp))) break;
        size_t p = start - 1;
        while (p > text_begin && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
        start = p;
      }
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        const Utf8Step st = utf8_step(text, stop);
        if (st.kind != Utf8Step::kValid || !is_unicode_space(st.cp)) break;
        stop += st.len;
      }
    }
    if (start > text_begin) out.push_back({-1, text_begin, start});
    out.push_back({hit->id, start, stop});
    text_begin = stop;
    pos = stop;
  }
  if (text_begin < text.size()) out.push_back({-1, text_begin, text.size()});
}

}  // namespace strata::tok
