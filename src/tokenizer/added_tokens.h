// Added tokens (special and not) are found in the raw text before anything
// else runs: the text is cut into fragments that are either one added token or
// plain text for the normalizer, pre-tokenizer and model. Matching is
// leftmost, then longest; lstrip / rstrip make a token swallow the whitespace
// before / after it; single_word tokens match only between non-word
// characters. Invariant: the fragments cover the text in order, except the
// whitespace swallowed by lstrip / rstrip.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace strata::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;  // non-empty
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;  // recorded; matching is always on the raw text
};

struct Fragment {
  int32_t id;    // the added token, or -1 for plain text
  size_t begin;  // plain text: byte range in the input
  size_t end;
};

class AddedTokenMatcher {
 public:
  // A token whose content is already registered replaces nothing (first wins).
  void add(AddedToken token);
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Cuts `text` (valid UTF-8) into fragments, appended to `out`.
  void split(std::string_view text, std::vector<Fragment>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_set<std::string> contents_;
  // Per first byte: indices into tokens_, longest content first.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
};

}  // namespace strata::tok
