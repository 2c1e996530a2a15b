// Text normalization applied to each text fragment (the text between added
// tokens) before pre-tokenization, as tokenizer.json's "normalizer" describes
// it: Unicode normal forms, lowercase, prepend, replace, strip, in sequence.
// Input and output are valid UTF-8.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace strata::tok {

struct NormalizerStep {
  enum class Kind { kForm, kLowercase, kPrepend, kReplace, kStrip };
  Kind kind = Kind::kForm;
  NormalForm form = NormalForm::kNfc;  // kForm
  std::string text;                    // kPrepend: the prefix; kReplace: the replacement
  std::shared_ptr<const Regex> regex;  // kReplace: what to replace (literal or regex)
  bool strip_left = false;             // kStrip
  bool strip_right = false;
};

class Normalizer {
 public:
  void add(NormalizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;
  std::string describe() const;

 private:
  std::vector<NormalizerStep> steps_;
};

}  // namespace strata::tok
