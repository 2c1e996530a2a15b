// The memory a block of sequences needs beyond the weights, as pure
// functions of the model's shape, the KV geometry, the placement and the
// block's lengths, and the tier each part lives on in the engine's memory
// mode (offload/memory_mode.h). One derivation: the engine checks a planned
// full block with it when it is made, checks every block with it before the
// block's first compute, and sizes the block's buffers from it.
//
// Parts of a block (bytes):
//   KV pages       backed pool pages at the peak (kv/kv_cache.h: RAM pages,
//                  plus one partial or just-completed disk page per sequence)
//   KV staging     two buffers of the largest micro-batch's disk pages of one
//                  layer (records of the KV file, offload/kv_file.h)
//   activations    every micro-batch's hidden state, f32, at its largest step
//                  (the prefill, or a decode step verifying draft tokens)
//   scratch        the forward's working memory for the largest group of
//                  tokens computed at once (kMaxGroupTokens)
//   logits         f32 rows of the step that hands out the most
//   KV dequantized quantized KV's pages as f32 for the CPU attention kernel
//                  (kernels/cpu/attention_quant.h), a run of a micro-batch's
//                  sequences of at most kKvDequantBytes, or its longest
//                  sequence alone (RAM: the CPU computes attention)
//   attention rows the q/k/v rows copied down and the output rows copied up
//                  of every micro-batch (CPU attention only)
//   KV on disk     the KV file's records
//   draft model    with speculation by a draft model, its f32 KV cache for
//                  every sequence at its longest and its logits rows (RAM)
#pragma once

#include <cstdint>
#include <vector>

#include "core/placement.h"
#include "generate/engine.h"  // DraftMemory
#include "kv/kv_cache.h"
#include "model/config.h"
#include "offload/memory_mode.h"

namespace strata {

// Tokens the forward computes at once: a micro-batch's sequences are cut
// into groups of at most this many tokens (a longer prompt is a group of its
// own), which bounds the forward's scratch; matmuls are as efficient at this
// height as at any larger one.
inline constexpr int64_t kMaxGroupTokens = 4096;

// The largest group the cut above makes of sequences with these new-token
// counts.
int64_t largest_group(const std::vector<int64_t>& n_new);

// Scratch the forward holds for micro-batches of up to t tokens
// (Forward::reserve).
uint64_t forward_scratch_bytes(const ModelConfig& c, int64_t t);

// The sequences of a block by micro-batch.
struct BlockShape {
  std::vector<std::vector<int64_t>>
      stored;  // [micro-batch][seq] tokens each stores: prompt + new - 1
  std::vector<std::vector<int64_t>> prompt;  // [micro-batch][seq] prompt tokens
  // [micro-batch][seq] first pages the sequence takes from another of the
  // block (a shared prompt prefix: kv_block_needs); empty: none.
  std::vector<std::vector<int64_t>> shared;
  bool all_rows = false;      // logits of every prompt position (scoring)
  int64_t decode_tokens = 1;  // tokens a decode step feeds a sequence at most (1 + drafts)
  // Slots per disk extent of the KV file (kv_block_needs); 0: the block's
  // own choice.
  int64_t disk_extent = 0;

  // A full block: `gpu_batch` x `n_micro_batches` sequences of `prompt`
  // tokens generating `new_tokens` each, fed `decode_tokens` per decode step.
  static BlockShape full(int64_t gpu_batch, int64_t n_micro_batches, int64_t prompt,
                         int64_t new_tokens, int64_t decode_tokens = 1);
  // The same, the last `seqs` of its sequences each taking its first `pages`
  // from another (PlanSharing).
  static BlockShape full(int64_t gpu_batch, int64_t n_micro_batches, int64_t prompt,
                         int64_t new_tokens, int64_t decode_tokens, const PlanSharing& sharing);
};

struct BlockMemory {
  KvNeeds kv;
  uint64_t kv_pages = 0;    // backed pages
  uint64_t kv_staging = 0;  // both staging buffers
  uint64_t kv_disk = 0;     // bytes of the KV file
  uint64_t hidden = 0;      // activations of every micro-batch
  uint64_t scratch = 0;     // the forward's working memory
  uint64_t logits = 0;
  uint64_t attention_rows = 0;         // q/k/v and output rows of every micro-batch (one copy)
  uint64_t draft = 0;                  // the draft model's KV cache and logits (RAM)
  uint64_t kv_dequant = 0;             // quantized KV's f32 pages (CPU attention; RAM)
  int64_t group_tokens = 0;            // the largest group
  std::vector<int64_t> hidden_tokens;  // [n_mb] tokens of each micro-batch's largest step

  // Activations, the forward's scratch and the logits: always where the
  // device computes.
  uint64_t working() const { return hidden + scratch + logits; }
};

// The draft model's part of a block (draft/draft_model.h, begin_block):
// every sequence's KV pages at its longest (its context and a draft, within
// the draft's context) and a logits row per sequence of one pass.
uint64_t draft_block_bytes(const DraftMemory& d, const BlockShape& shape);

// The CPU attention kernel's f32 copy of quantized KV pages for a block of
// this shape, at most (0 unless g.dtype is quantized).
uint64_t kv_dequant_bytes(const KvGeometry& g, const BlockShape& shape);

// `placement` as folded for the device; `draft`: the draft model's memory.
BlockMemory block_memory(const ModelConfig& c, const KvGeometry& g, const Placement& placement,
                         const BlockShape& shape, const DraftMemory& draft = {});

// What a block adds to each tier in a memory mode (the weights and their
// staging come on top), with its KV part on the device and in RAM for
// messages.
struct BlockTiers {
  uint64_t device = 0;  // device memory (0 in kHostMemory: everything is RAM)
  uint64_t ram = 0;
  uint64_t disk = 0;
  uint64_t kv_device = 0, kv_ram = 0;  // the KV cache, its staging and the attention rows
};
BlockTiers block_tiers(const BlockMemory& m, MemoryMode mode);

}  // namespace strata
