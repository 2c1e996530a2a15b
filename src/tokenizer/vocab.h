// The vocabulary shared by every part of a tokenizer: for each id the token as
// written in its file (byte-level alphabet or U+2581 form), the raw bytes it
// decodes to, its kind and (SentencePiece) its score, plus text -> id lookup.
// Invariant: all per-id vectors have n_vocab entries; text_to_id maps each
// distinct non-empty text to its lowest id.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::tok {

// GGUF's token types (tokenizer.ggml.token_type 1..6) and HF's added tokens.
enum class TokenKind : uint8_t {
  kNormal,
  kControl,      // special: BOS, EOS, chat markers; skipped by decode(skip_special)
  kUserDefined,  // matched in raw text like control tokens, decoded as text
  kByte,         // <0xXX> byte-fallback token
  kUnknown,
  kUnused,
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Vocab {
  std::vector<std::string> text;   // [n_vocab] as written in the file
  std::vector<std::string> piece;  // [n_vocab] raw bytes the token decodes to
  std::vector<TokenKind> kind;     // [n_vocab]
  std::vector<float> score;        // [n_vocab] SentencePiece scores; empty otherwise
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> text_to_id;

  int32_t size() const { return static_cast<int32_t>(text.size()); }
  // -1 when no token has this text.
  int32_t find(std::string_view t) const {
    auto it = text_to_id.find(t);
    return it == text_to_id.end() ? -1 : it->second;
  }
  // Rebuilds text_to_id from `text`.
  void index() {
    text_to_id.clear();
    text_to_id.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      if (!text[i].empty()) text_to_id.emplace(text[i], static_cast<int32_t>(i));
    }
  }
};

}  // namespace strata::tok
