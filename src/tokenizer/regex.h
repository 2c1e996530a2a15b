// A compiled PCRE2 pattern (UTF + UCP, so \s, \w, \d and \p{..} are the Unicode
// classes; JIT-compiled where the platform allows) and the one operation the
// tokenizer needs from it: all non-overlapping matches in a text, left to
// right. This is the only file that includes pcre2.h. A Regex is immutable
// after construction and may be used from several threads at once; each call
// uses its own match data and a per-thread JIT stack.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tok {

struct Span {
  size_t begin;  // byte offsets into the text, begin <= end
  size_t end;
};

class Regex {
 public:
  // Compiles `pattern` (taken literally when `literal`); throws Error
  // "<context>: cannot compile regex '<pattern>': <reason> at offset N".
  Regex(std::string pattern, bool literal, std::string_view context);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the matches in `text` (valid UTF-8) to `out`, left to right. Empty
  // matches are reported too; the search then resumes one code point later.
  void find_all(std::string_view text, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
  bool jit_ = false;
};

}  // namespace strata::tok
