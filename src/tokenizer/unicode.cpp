// UTF-8 decoding (Unicode's table of well-formed sequences, maximal-subpart
// replacement), the byte-level alphabet and normalization through utf8proc.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace strata::tok {

Utf8Step utf8_step(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  const size_t avail = s.size() - pos;
  const unsigned char c = p[0];
  if (c < 0x80) return {Utf8Step::kValid, 1, c};
  uint32_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1, 0};
  }
  for (uint32_t k = 1; k < need; ++k) {
    if (k >= avail) return {Utf8Step::kIncomplete, static_cast<uint32_t>(avail), 0};
    const unsigned char b = p[k];
    const unsigned char l = k == 1 ? lo : 0x80;
    const unsigned char h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Utf8Step::kInvalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kValid, need, cp};
}

bool utf8_is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(s, i);
    if (st.kind != Utf8Step::kValid) return false;
    i += st.len;
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s, i);
    if (st.kind == Utf8Step::kValid) {
      out.append(s.data() + i, st.len);
    } else {
      utf8_append(out, kReplacementChar);
    }
    i += st.len;
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // An incomplete sequence starts in the last three bytes. Every byte that is
  // not a continuation byte starts a new step of the decoder, so walking from
  // the last such byte before them gives the same steps as from the start.
  size_t i = s.size() > 3 ? s.size() - 3 : 0;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  while (i < s.size()) {
    const Utf8Step st = utf8_step(s, i);
    if (st.kind == Utf8Step::kIncomplete) return i;
    i += st.len;
  }
  return s.size();
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const std::array<char32_t, 256>& byte_level_alphabet() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& alpha = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) utf8_append(out, alpha[c]);
  return out;
}

std::string byte_level_decode(std::string_view text, bool* all_in_alphabet) {
  // Inverse table: code point -> byte, for the 324 code points below U+0144.
  static const std::array<int16_t, 0x144> inverse = [] {
    std::array<int16_t, 0x144> inv;
    inv.fill(-1);
    const auto& alpha = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) inv[alpha[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  std::string out;
  out.reserve(text.size());
  bool all = true;
  for (size_t i = 0; i < text.size();) {
    const Utf8Step st = utf8_step(text, i);
    if (st.kind == Utf8Step::kValid && st.cp < inverse.size() && inverse[st.cp] >= 0) {
      out.push_back(static_cast<char>(inverse[st.cp]));
    } else {
      out.append(text.data() + i, st.len);
      all = false;
    }
    i += st.len;
  }
  if (all_in_alphabet) *all_in_alphabet = all;
  return out;
}

std::string normalize(std::string_view text, NormalForm form) {
  bool ascii = true;
  for (unsigned char c : text) {
    if (c >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii || text.empty()) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &dst,
                                          static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(dst, &std::free);
  // Input is valid UTF-8 (sanitized before normalization), so this cannot fail
  // except by running out of memory.
  STRATA_ASSERT_MSG(n >= 0, "utf8proc_map: {}", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Step st = utf8_step(text, i);
    if (st.kind == Utf8Step::kValid) {
      utf8_append(out,
                  static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(st.cp))));
    } else {
      out.append(text.data() + i, st.len);
    }
    i += st.len;
  }
  return out;
}

bool is_unicode_space(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(char32_t cp) {
  if (cp == '_') return true;
  if (cp < 0x80)
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

}  // namespace strata::tok
