// Internal: the parts of a loaded tokenizer, filled by the loaders
// (tokenizer_json.cpp, tokenizer_gguf.cpp) and run by tokenizer.cpp. Not part
// of the public interface. Invariant after finish(): every id stored here is
// inside the vocabulary, `special` has n_vocab entries, exactly one of bpe and
// spm is set.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"

namespace strata::tok {

struct TokenizerImpl {
  std::string source;  // file path, for messages
  std::string kind;    // human-readable description

  Vocab vocab;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;  // empty: the whole fragment is one word
  std::unique_ptr<BpeModel> bpe;
  std::unique_ptr<SpmModel> spm;
  AddedTokenMatcher added;

  std::vector<int32_t> bos_prefix;  // template for one sequence: ids before it
  std::vector<int32_t> eos_suffix;  // ... and after it
  int32_t bos_id = -1;
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  std::vector<int32_t> eos_ids;
  bool add_bos_default = false;
  bool strip_leading_space = false;  // decode drops one leading space (SentencePiece)
  std::string chat_template;
  std::vector<bool> special;  // [n_vocab] left out by decode(skip_special)

  // Derives `special` from the vocabulary kinds and added tokens, adds the
  // end-of-turn tokens found by text to eos_ids, checks the invariant.
  void finish();
};

// Tokens that end a turn or a text in common chat formats, found by text.
const std::vector<std::string>& end_of_generation_texts();

}  // namespace strata::tok
