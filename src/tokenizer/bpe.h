// Byte-pair encoding of one pre-tokenized word by merge rank. Symbols start as
// the word's bytes (byte-level BPE: each byte is a token of the GPT-2
// alphabet) or its UTF-8 characters (character BPE, with <0xXX> byte fallback
// or the unknown token for characters not in the vocabulary). Merges are
// applied lowest rank first, leftmost on ties, through a priority queue over
// adjacent pairs: O(n log n) per word, never a rescan per merge. Results of
// short words are cached. Thread-safe: encode_word may be called concurrently.
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

struct BpeMerge {
  int32_t left;  // token ids; left + right (as text) is the token `merged`
  int32_t right;
  int32_t merged;
};

struct BpeOptions {
  bool byte_level = true;      // symbols are bytes (GPT-2 alphabet) instead of characters
  bool byte_fallback = false;  // unknown characters -> <0xXX> tokens
  bool ignore_merges = false;  // a word that is itself a token is emitted whole
  bool fuse_unk = false;       // consecutive unknown symbols become one
  int32_t unk_id = -1;
};

class BpeModel {
 public:
  // `vocab` must outlive the model. `merges` are in rank order (index = rank);
  // a later duplicate of a pair is ignored.
  BpeModel(const Vocab& vocab, const std::vector<BpeMerge>& merges, BpeOptions options);

  // Appends the ids of `word` (raw bytes for byte-level, else model text).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  size_t n_merges() const { return merges_.size(); }
  const BpeOptions& options() const { return options_; }

 private:
  struct MergeInfo {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;

  const Vocab& vocab_;
  BpeOptions options_;
  std::unordered_map<uint64_t, MergeInfo> merges_;
  std::array<int32_t, 256> byte_token_{};      // byte-level: id of each single byte, -1 if none
  std::array<int32_t, 256> fallback_token_{};  // <0xXX> ids, -1 if none

  static constexpr size_t kMaxCachedWord = 128;  // bytes
  static constexpr size_t kMaxCacheEntries = 1 << 18;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace strata::tok
