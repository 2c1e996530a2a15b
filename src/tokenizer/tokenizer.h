// Text <-> token ids for a model: byte-level BPE (GPT-2, Llama 3, Qwen2/3,
// SmolLM, OPT, ...) from a Hugging Face tokenizer.json or from GGUF metadata
// (tokenizer.ggml.model "gpt2"), and SentencePiece-style BPE by score from
// GGUF (tokenizer.ggml.model "llama": Llama 2, Mistral). Encoding runs: added
// and special tokens found in the raw text -> normalizer -> pre-tokenizer
// (PCRE2 regexes) -> BPE per word -> optional BOS template. Decoding
// concatenates the raw bytes of each token and replaces invalid UTF-8 with
// U+FFFD. A Tokenizer is immutable after loading and safe to use from many
// threads at once. Bad files give an Error naming the file and the field.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class GgufFile;

namespace tok {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // A GGUF file, a tokenizer.json file, or a Hugging Face model directory
  // (tokenizer.json, else vocab.json + merges.txt).
  static std::unique_ptr<Tokenizer> from_path(const std::string& path);
  // tokenizer.json; tokenizer_config.json, chat_template.jinja and
  // generation_config.json beside it are read when present (chat template,
  // BOS/EOS, add_bos_token).
  static std::unique_ptr<Tokenizer> from_json_file(const std::string& path);
  // GPT-2-style vocab.json + merges.txt in `dir` (tokenizer_config.json too).
  static std::unique_ptr<Tokenizer> from_vocab_merges(const std::string& dir);
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& gguf);
  static std::unique_ptr<Tokenizer> from_gguf_file(const std::string& path);

  explicit Tokenizer(std::unique_ptr<tok::TokenizerImpl> impl);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`. Added and special tokens written in the text (e.g.
  // "<|im_start|>") become their ids. add_bos applies the model's template for
  // one sequence (its BOS, and its EOS where the template appends one).
  // Invalid UTF-8 in `text` is read as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;

  // Text of `ids`; special tokens are left out when skip_special. Invalid
  // UTF-8 (a sequence cut between ids) becomes U+FFFD. Throws Error for an id
  // outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  // The raw bytes token `id` stands for (may be part of a UTF-8 sequence).
  const std::string& piece(int32_t id) const;
  // The token as written in the file (byte-level alphabet, U+2581, ...).
  const std::string& token_text(int32_t id) const;
  // The id of the token written `text` in the file, if any.
  std::optional<int32_t> find_token(std::string_view text) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t pad_id() const;  // -1 when the model has none
  // Tokens that end generation: EOS, end-of-turn and end-of-text markers.
  std::vector<int32_t> eos_ids() const;
  bool add_bos_default() const;
  bool is_special(int32_t id) const;
  const std::string& chat_template() const;  // "" when none
  // E.g. "byte-level BPE (gpt-2 pattern)", "SentencePiece BPE (llama)".
  std::string kind() const;
  const std::string& source() const;  // the file it was read from

 private:
  friend class StreamDecoder;
  std::unique_ptr<tok::TokenizerImpl> impl_;
};

// Incremental decoding for streaming output: push ids one at a time and get
// the text they complete. Never returns half a UTF-8 sequence: an incomplete
// tail is held until the next push completes it; finish() flushes what is
// left (invalid bytes as U+FFFD) and resets. Concatenating every push() and
// finish() gives decode(ids, skip_special).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  std::string push(int32_t id);
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool first_ = true;    // no token emitted yet (SentencePiece strips one leading space)
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

}  // namespace strata
