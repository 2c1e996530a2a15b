// UTF-8 and Unicode helpers for the tokenizer: decoding one code point with
// the maximal-subpart rule for invalid bytes, replacing invalid input with
// U+FFFD, the GPT-2 byte-level alphabet (each byte 0..255 <-> one printable
// code point), and the Unicode normalization forms (through utf8proc).
// Invariant: every function that returns text returns valid UTF-8, except
// byte_level_decode, which returns the raw bytes a byte-level token stands for.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tok {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Result of decoding one UTF-8 sequence at a position.
struct Utf8Step {
  enum Kind { kValid, kInvalid, kIncomplete } kind;
  uint32_t len;  // bytes consumed: the sequence (kValid), the maximal invalid
                 // subpart (kInvalid, 1..3), or the truncated tail (kIncomplete)
  char32_t cp;   // the code point (kValid only)
};

// Decodes the sequence starting at s[pos] (pos < s.size()). A sequence that is
// a valid prefix cut off by the end of s is kIncomplete.
Utf8Step utf8_step(std::string_view s, size_t pos);

bool utf8_is_valid(std::string_view s);

// s with every invalid subpart and a truncated tail replaced by one U+FFFD each.
std::string utf8_sanitize(std::string_view s);

// Length of the longest prefix of s that does not end inside an incomplete
// (but so far valid) sequence; invalid bytes count as complete.
size_t utf8_complete_prefix(std::string_view s);

void utf8_append(std::string& out, char32_t cp);

// Number of bytes of the UTF-8 sequence announced by lead byte c (1 for
// continuation or invalid bytes, so that a walk always advances).
inline size_t utf8_lead_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// The GPT-2 byte-level alphabet: printable bytes map to themselves as code
// points, the 68 others to U+0100.. in byte order.
const std::array<char32_t, 256>& byte_level_alphabet();

// Raw bytes -> the byte-level string (each byte one code point).
std::string byte_level_encode(std::string_view bytes);

// Byte-level string -> raw bytes. Code points outside the alphabet are kept
// as their UTF-8 bytes; `all_in_alphabet`, when given, says whether any was.
std::string byte_level_decode(std::string_view text, bool* all_in_alphabet = nullptr);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// Unicode normalization of valid UTF-8 text; ASCII text is returned as is.
std::string normalize(std::string_view text, NormalForm form);

// Simple per-code-point lowercase.
std::string lowercase(std::string_view text);

// True for the code points of Unicode's White_Space property.
bool is_unicode_space(char32_t cp);
// Letters, marks, numbers and '_' (what single_word added tokens treat as a word).
bool is_word_char(char32_t cp);

}  // namespace strata::tok
