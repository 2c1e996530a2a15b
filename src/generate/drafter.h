// Where speculative decoding's draft tokens come from (SeqAction::draft in
// generate/engine.h). The driver asks once per step for every sequence of
// the block that goes on, so a drafter that computes (a draft model) runs
// them as one batch. Two kinds:
//   NgramDrafter (generate/ngram_draft.h): prompt lookup, no model;
//   DraftModel (draft/draft_model.h): a small model with the same tokenizer,
//     greedy, with its own KV cache.
// A drafter's tokens only change the speed: the driver keeps a draft token
// only where the target's own choice equals it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "generate/engine.h"

namespace strata {

class Drafter {
 public:
  virtual ~Drafter() = default;

  // A block of sequences begins (the engine's run_block gets the same
  // `seqs`); a sequence is named by its index in it from now on. Drafts
  // have at most `max_draft` tokens. What the drafter kept of the last
  // block is dropped.
  virtual void begin_block(std::span<const SeqInput> seqs, int64_t max_draft) = 0;

  struct Request {
    int32_t seq = 0;                   // index in the block
    std::span<const int32_t> context;  // prompt and output so far; the last token is fed next
    int64_t k = 0;                     // tokens wanted, 1 .. max_draft
  };
  // out[i]: at most requests[i].k tokens to follow requests[i].context
  // (fewer, or none, when the drafter has no good guess).
  virtual void propose(std::span<const Request> requests, std::span<std::vector<int32_t>> out) = 0;

  // The sequence left the block (finished); its state may be dropped.
  virtual void finished(int32_t seq) = 0;
};

}  // namespace strata
