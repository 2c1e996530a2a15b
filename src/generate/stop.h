// When one sequence stops, and the text it produced. Tokens are pushed one at
// a time as they are sampled; the completion text grows through a
// StreamDecoder (special tokens left out, never half a UTF-8 character), and
// stop strings are searched in that text, so a stop string split over several
// tokens is found as soon as its last byte arrives.
//
// Rules, in the order they are checked after each token:
//   1. the token is one of the model's end ids (EOS, end of turn):
//      finish "stop"; the token contributes no text;
//   2. the text now contains a stop string: finish "stop"; the completion is
//      cut right before the earliest occurrence (the stop string and anything
//      after it are dropped);
//   3. max_new_tokens tokens have been produced: finish "length".
// The ids of every sampled token, the end token and the tokens of a stop
// string included, stay in ids(): they are what the model produced and what
// completion_tokens counts.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace strata {

enum class FinishReason { kNone, kStop, kLength };

// "stop", "length" ("" for kNone).
const char* finish_reason_name(FinishReason r);

class StopChecker {
 public:
  // `eos_ids`: the ids that end generation (empty: EOS ignored, as in bench).
  // `stops`: non-empty stop strings. `max_new_tokens` >= 1.
  StopChecker(const Tokenizer& tokenizer, std::vector<int32_t> eos_ids,
              std::vector<std::string> stops, int32_t max_new_tokens);

  // Takes the next sampled token; returns the reason the sequence finished
  // with it, or kNone when it continues. Must not be called after finishing.
  FinishReason push(int32_t token);

  bool finished() const { return reason_ != FinishReason::kNone; }
  FinishReason reason() const { return reason_; }
  // The completion so far (final once finished).
  const std::string& text() const { return text_; }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  // Looks for a stop string that ends at or after `from` (bytes of text_ that
  // are new); cuts the text and returns true when one is found.
  bool find_stop(size_t new_from);

  StreamDecoder decoder_;
  std::vector<int32_t> eos_ids_;
  std::vector<std::string> stops_;
  int32_t max_new_tokens_;
  std::string text_;
  std::vector<int32_t> ids_;
  FinishReason reason_ = FinishReason::kNone;
};

}  // namespace strata
