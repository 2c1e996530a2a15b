// StreamDecoder (declared in tokenizer.h): decode() one id at a time, holding
// back an incomplete UTF-8 tail.
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace strata {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string& p = tokenizer_.piece(id);
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  if (first_ && tokenizer_.impl_->strip_leading_space && !p.empty() && p[0] == ' ') {
    pending_.append(p, 1, std::string::npos);
  } else {
    pending_ += p;
  }
  first_ = false;
  const size_t n = tok::utf8_complete_prefix(pending_);
  std::string out = tok::utf8_sanitize(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = tok::utf8_sanitize(pending_);
  pending_.clear();
  first_ = true;
  return out;
}

}  // namespace strata
