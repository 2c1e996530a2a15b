// The pipeline of a tokenizer.json around its model: the normalizer, the
// pre-tokenizer, the decoder (per-token rewrites to raw bytes) and the
// post-processor (the ids placed around a sequence), each parsed from its
// JSON with errors naming the file and field (json_fields.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace strata::tok {

void parse_normalizer(const JsonFields& f, const json& j, const std::string& field,
                      Normalizer& out);
void parse_pre_tokenizer(const JsonFields& f, const json& j, const std::string& field,
                         PreTokenizer& out);

// Decoders: per-token rewrites that give each token's raw bytes, plus how many
// leading spaces the decoded text loses.
struct DecoderOp {
  enum class Kind { kByteLevel, kReplace, kByteFallback } kind;
  std::string from, to;
};
struct DecoderSpec {
  std::vector<DecoderOp> ops;
  bool strip_leading_space = false;
  bool byte_level = false;
};
void parse_decoder(const JsonFields& f, const json& j, const std::string& field, DecoderSpec& out);
// A token's text through the decoder's rewrites.
std::string apply_decoder(const DecoderSpec& d, const std::string& text);

// Post-processor: the ids placed before and after one sequence.
void parse_post_processor(const JsonFields& f, const json& j, const std::string& field,
                          const Vocab& vocab, std::vector<int32_t>& prefix,
                          std::vector<int32_t>& suffix);

}  // namespace strata::tok
