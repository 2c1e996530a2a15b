// Pre-tokenization: cutting a normalized text fragment into the words the
// model merges independently. Steps follow tokenizer.json's pre_tokenizer
// types: Split (regex or literal, with HF's five delimiter behaviours and
// invert), Digits (a Split on \p{N}), ByteLevel (optional prefix space and the
// GPT-2 regex; the byte mapping itself is implicit because models work on raw
// bytes) and Metaspace (spaces -> U+2581, prefix, split). Also the table of
// regex sequences that GGUF's tokenizer.ggml.pre names stand for.
// Invariant: the concatenation of the words equals the fragment, except for
// what a step adds (prefix spaces, U+2581) or removes (Removed splits).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace strata::tok {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class Prepend { kAlways, kFirst, kNever };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // kSplit; kByteLevel when it splits with a regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;       // kByteLevel
  std::string replacement;             // kMetaspace (U+2581 usually)
  Prepend prepend = Prepend::kAlways;  // kMetaspace
  bool split = true;                   // kMetaspace
  std::string label;                   // for describe()
};

class PreTokenizer {
 public:
  void add(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  bool has_byte_level() const;

  // Splits `text` (valid UTF-8) into `words` (appended). `at_input_start` says
  // whether the fragment begins the whole input (Metaspace's "first" scheme).
  void split(std::string_view text, bool at_input_start, std::vector<std::string>& words) const;
  std::string describe() const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

// Splits `text` at the matches of `regex` with HF's delimiter behaviour;
// empty pieces are dropped. Appends to `out`.
void split_with(const Regex& regex, SplitBehavior behavior, bool invert, std::string_view text,
                std::vector<std::string>& out);

// The GPT-2 regex used by ByteLevel(use_regex = true).
extern const char* const kGpt2Pattern;

// What a GGUF tokenizer.ggml.pre name stands for: a sequence of regexes, each
// an Isolated split, then byte-level BPE.
struct GgufPreTokenizer {
  std::string family;  // "gpt-2", "llama-bpe", "qwen2", "smollm", ...
  std::vector<std::string> patterns;
  bool ignore_merges = false;  // a word that is a token is not merged (Llama 3)
  bool add_bos = false;        // default of add_bos_token when the file has none
};
std::optional<GgufPreTokenizer> gguf_pre_tokenizer(std::string_view pre);
// The names gguf_pre_tokenizer knows, comma-separated, for messages.
std::string gguf_pre_names();

}  // namespace strata::tok
