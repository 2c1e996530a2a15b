// Normalizer steps, applied in order.
#include "tokenizer/normalizer.h"

namespace strata::tok {

namespace {

std::string strip_spaces(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      const Utf8Step st = utf8_step(s, b);
      if (st.kind != Utf8Step::kValid || !is_unicode_space(st.cp)) break;
      b += st.len;
    }
  }
  if (right) {
    while (e > b) {
      size_t p = e - 1;
      while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
      const Utf8Step st = utf8_step(s, p);
      if (st.kind != Utf8Step::kValid || !is_unicode_space(st.cp)) break;
      e = p;
    }
  }
  return std::string(s.substr(b, e - b));
}

}  // namespace

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  std::vector<Span> matches;
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case NormalizerStep::Kind::kForm:
        s = normalize(s, step.form);
        break;
      case NormalizerStep::Kind::kLowercase:
        s = lowercase(s);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.text);
        break;
      case NormalizerStep::Kind::kReplace: {
        matches.clear();
        step.regex->find_all(s, matches);
        if (matches.empty()) break;
        std::string out;
        out.reserve(s.size());
        size_t prev = 0;
        for (const Span& m : matches) {
          if (m.end == m.begin) continue;
          out.append(s, prev, m.begin - prev);
          out += step.text;
          prev = m.end;
        }
        out.append(s, prev, std::string::npos);
        s = std::move(out);
        break;
      }
      case NormalizerStep::Kind::kStrip:
        s = strip_spaces(s, step.strip_left, step.strip_right);
        break;
    }
  }
  return s;
}

std::string Normalizer::describe() const {
  std::string out;
  for (const NormalizerStep& step : steps_) {
    if (!out.empty()) out += "+";
    switch (step.kind) {
      case NormalizerStep::Kind::kForm:
        out += step.form == NormalForm::kNfc    ? "NFC"
               : step.form == NormalForm::kNfd  ? "NFD"
               : step.form == NormalForm::kNfkc ? "NFKC"
                                                : "NFKD";
        break;
      case NormalizerStep::Kind::kLowercase:
        out += "lowercase";
        break;
      case NormalizerStep::Kind::kPrepend:
        out += "prepend";
        break;
      case NormalizerStep::Kind::kReplace:
        out += "replace";
        break;
      case NormalizerStep::Kind::kStrip:
        out += "strip";
        break;
    }
  }
  return out;
}

}  // namespace strata::tok
