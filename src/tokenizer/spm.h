// SentencePiece-style BPE by score (GGUF tokenizer.ggml.model "llama": Llama
// 1/2, Mistral): the text (spaces already U+2581) starts as UTF-8 characters;
// the adjacent pair whose concatenation is the highest-scoring token merges
// first, leftmost on ties, through a priority queue; characters that are not
// tokens become <0xXX> byte tokens, or the unknown token without them.
// The text is processed in segments that start at each U+2581 following
// another character when no token spans such a boundary (true of SentencePiece
// vocabularies, whose pieces carry U+2581 only as a prefix); segments are
// independent then, so this gives the same ids as one pass and keeps the
// queue small; results of short segments are cached. Control tokens are
// never formed by merging.
// Stateless after construction and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace strata::tok {

class SpmModel {
 public:
  // `vocab` (with scores) must outlive the model.
  SpmModel(const Vocab& vocab, int32_t unk_id);

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_cached(std::string_view segment, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  int32_t unk_id_;
  bool segment_at_spaces_ = false;

  static constexpr size_t kMaxCachedSegment = 128;  // bytes
  static constexpr size_t kMaxCacheEntries = 1 << 18;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
  std::array<int32_t, 256> byte_token_{};  // <0xXX> ids, -1 if none
};

}  // namespace strata::tok
