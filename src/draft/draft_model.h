// A draft model for speculative decoding (--speculate model --draft-model
// PATH): a small model with the target's tokenizer proposes, per sequence
// and step, the k tokens it would choose greedily after the sequence's
// context; the target verifies them in its next pass over the weights
// (generate/drafter.h). Its weights stay where the model file maps them
// (RAM; a quantized GGUF file is read as it is stored), its KV cache is its
// own, in RAM, f32, and it computes on the CPU with the forward pass every
// engine uses (model/forward.h), one batch for all sequences of a step.
//
// Between steps a sequence keeps the keys of every token it was fed. The
// next call compares them with the new context: the common prefix stays,
// the keys of draft tokens the target rejected are dropped (KvCache::
// truncate) and only the tokens after the prefix are fed, so a step costs
// the accepted tokens and the k draft tokens, not the whole context. The
// first call of a sequence feeds its prompt (the draft's prefill).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "generate/drafter.h"
#include "kernels/backend.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "model/layer_weights.h"

namespace strata {

class Model;
class Tokenizer;

// Throws Error naming `draft_path` unless the draft's tokenizer has the
// target's vocabulary: the same size, the same text for every id, the same
// BOS and EOS (a draft token means the same text to both models).
void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft,
                           const std::string& draft_path);

struct DraftModelOptions {
  DType compute = DType::kF32;  // f32, bf16 or i8, as the target's
  int threads = 0;              // the CPU's threads (0: all cores)
  // Proposals are ids below this (the tokenizer's vocabulary: padding rows
  // of an embedding have no text); 0: the model's n_vocab.
  int64_t n_sample = 0;
  // Tokens one forward pass computes at most: a block's first proposals
  // (every prompt) are cut into passes of about this many tokens, so the
  // scratch stays small whatever the prompts.
  int64_t max_pass_tokens = 1024;
};

// What the draft model did, summed over blocks.
struct DraftStats {
  int64_t passes = 0;      // forward passes over the draft's weights
  int64_t fed_tokens = 0;  // tokens computed (prefill and draft tokens)
  int64_t proposed = 0;    // tokens proposed
  double seconds = 0;      // wall time of propose()
};

class DraftModel final : public Drafter {
 public:
  // `model` must outlive the DraftModel. Throws Error for a model the
  // forward cannot run.
  DraftModel(const Model& model, const DraftModelOptions& options);
  ~DraftModel() override;

  void begin_block(std::span<const SeqInput> seqs, int64_t max_draft) override;
  // A sequence whose context and draft would pass the draft model's
  // context length gets no proposal.
  void propose(std::span<const Request> requests, std::span<std::vector<int32_t>> out) override;
  void finished(int32_t seq) override;

  const DraftStats& stats() const { return stats_; }
  // Tokens whose keys sequence `seq` holds now (tests).
  std::span<const int32_t> cached(int32_t seq) const;
  // KV pages in use now (tests).
  int64_t pages_in_use() const;
  // The RAM it takes beside the engine: its weights, vectors and working
  // memory for a pass of max_pass_tokens, and per block its KV pages and
  // logits rows (the engine counts them in its RAM budget).
  DraftMemory memory() const;

 private:
  struct Seq {
    int32_t kv = -1;              // the KvCache sequence, -1 before its first proposal
    std::vector<int32_t> cached;  // the tokens whose keys it holds, in order
  };
  // One forward pass over `feed[i]` of each request in `which` (appended to
  // their sequences); the greedy choice after each goes to out[i].
  void pass(std::span<const size_t> which, std::span<const Request> requests,
            std::span<std::vector<int32_t>> feed, std::span<std::vector<int32_t>> out);
  // One forward over the chunk's feeds; `choose`: their greedy choices to out.
  void forward_chunk(std::span<const size_t> chunk, std::span<const Request> requests,
                     std::span<std::vector<int32_t>> feed, std::span<std::vector<int32_t>> out,
                     bool choose);

  const Model& model_;
  DraftModelOptions opt_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ResidentWeights> weights_;
  std::unique_ptr<Forward> fwd_;
  std::unique_ptr<KvCache> kv_;
  std::vector<Seq> seqs_;
  MicroBatchHost host_;
  DeviceBuffer meta_, hidden_, logits_;
  DraftStats stats_;
};

}  // namespace strata
