// The live state of one block while the engine runs it: its sequences (the
// KV sequence of each, the tokens fed to the next step: the next token and
// the draft tokens taken for verification, the tokens produced), the micro-batches they fill in
// order (gpu_batch_size each) and, for each generation step, each micro-batch's groups of sequences
// the forward computes at once (at most kMaxGroupTokens tokens, with the host arrays of the
// micro-batch: offload/block_budget.h) and its hidden state. It assigns KV slots for the step's new
// tokens (kv/kv_cache.h); it moves no bytes and computes nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "generate/engine.h"
#include "kernels/backend.h"
#include "kv/shared_prefix.h"
#include "model/forward.h"

namespace strata {

class KvCache;

class BlockState {
 public:
  // One group of a micro-batch: sequences computed together.
  struct Group {
    MicroBatchHost host;
    MicroBatch dev;
    DeviceBuffer meta;   // device copy of `host` (unused when memory is host memory)
    int64_t token0 = 0;  // its first row in the micro-batch's hidden
    int64_t row0 = 0;    // its first row in the step's logits
  };
  struct MicroState {
    std::vector<int32_t> members;  // block indices of its live sequences, ascending
    int64_t row0 = 0;              // its first row in the step's logits
    std::vector<Group> groups;     // [n_groups] this step's groups (the vector only grows)
    int64_t n_groups = 0;
    DeviceBuffer hidden;  // [n_tokens, n_embd] f32, kept between columns (sized by the engine)
    bool live() const { return !members.empty(); }
    // Tokens of this step (rows of `hidden` in use).
    int64_t n_tokens() const;
  };

  // `pos_offset`: the learned positions' offset, -1 without them.
  BlockState(KvCache& kv, int64_t gpu_batch_size, int64_t n_micro_batches, int64_t pos_offset);
  // Frees the KV sequences still live.
  ~BlockState();
  BlockState(const BlockState&) = delete;
  BlockState& operator=(const BlockState&) = delete;

  // Sparse decode attention: the groups of decode steps plan page
  // selections of `budget_pages` pages (MicroBatchHost::plan_sparse); 0:
  // dense.
  void set_sparse(int64_t budget_pages, bool keep_first) {
    sparse_pages_ = budget_pages;
    sparse_keep_first_ = keep_first;
  }
  // Decode attention's KV bytes so far (K and V pages of every layer a
  // decode step attended) and those sparse attention's selections skipped.
  uint64_t kv_attended_bytes() const { return kv_attended_; }
  uint64_t kv_skipped_bytes() const { return kv_skipped_; }
  // Speculative decoding: the most draft tokens a decode step feeds a
  // sequence (SeqAction::draft); 0: drafts are ignored.
  void set_max_draft(int64_t n) { max_draft_ = n; }
  // Prefix sharing (kv/shared_prefix.h): prompts of a block that
  // begin with the same whole KV pages compute and store them once. A
  // prefix is also kept across blocks: after a prefix step one computed
  // group's prefix pages (group_to_keep) stay in a KV sequence of their own,
  // and the next block's groups whose prefixes begin with them take them
  // at start() instead of computing them (take_from_kept: all of a group's
  // prefix, or its first pages, its leader computing the rest in the prefix
  // step); its pages on disk stay in their slots: the engine lets it go
  // before a block that would lay the KV file out anew,
  // KvCache::disk_layout_holds.
  void set_prefix_sharing(bool on);
  // Groups the prompts of the next block, `seqs` (find_prefix_groups; none
  // without sharing or when scoring), and lets the kept prefix go (or the
  // pages of it that no group takes): before the block's memory is checked
  // (the kept pages count as the taking groups' leaders', kv_block_needs).
  // start() runs on these groups.
  void group(std::span<const SeqInput> seqs, bool all_rows);
  const std::vector<PrefixGroup>& groups() const { return groups_; }
  void forget_kept_prefix();
  bool has_kept_prefix() const { return kept_ >= 0; }
  // A new block of `seqs`, grouped by group() (each with a KV sequence); `all_rows`: logits of
  // every prompt position (scoring one sequence). With prefix sharing and
  // some prompts sharing pages, the block starts with a *prefix step*: one
  // sequence of each group (its leader) computes the group's shared
  // prefix; then the others take those pages (KvCache::share_prefix) and
  // the prefill step computes only what follows them.
  void start(std::span<const SeqInput> seqs, bool all_rows);
  // The block's prefill step: 1 after a prefix step, else 0. Steps before it
  // give the caller no logits; decode steps follow it.
  int32_t prefill_step() const { return prefix_step_ ? 1 : 0; }
  // Generation step `step`: the active rows, KV slots for every live
  // sequence's new tokens (its shared prefix at a prefix step, the rest of
  // its prompt at the prefill step, then the token fed back and its draft
  // tokens, a logits row each) and the groups. False when no sequence is
  // live (the block is over).
  bool begin_step(int32_t step);
  // After the prefix step: every group's other members share their
  // leader's prefix pages and join the micro-batches. Returns the prompt
  // tokens they took from shared prefixes instead of computing them, the
  // KV pages (of every layer) they did not store, and the tokens the prefix
  // step computed (each group's prefix once, by its leader, less what the
  // leader took from the kept prefix).
  struct Reused {
    int64_t tokens = 0, pages = 0, computed = 0;
  };
  Reused end_prefix_step();
  // What start() took from the kept prefix (computed: 0).
  const Reused& taken_from_kept() const { return taken_; }
  // True when `actions` (one per active row, a sequence's in its first)
  // end a sequence: its KV pages are freed by end_step.
  bool finishes_any(std::span<const SeqAction> actions) const;
  // What end_step counted: tokens the caller kept (one per sequence, plus
  // its accepted draft tokens), draft tokens verified and accepted.
  struct Kept {
    int64_t tokens = 0, drafted = 0, accepted = 0;
  };
  // After the step: hands each sequence's action over. The KV rows of its
  // rejected draft tokens are dropped; a sequence that is finished (or has
  // produced max_new_tokens) leaves the block and frees its KV; the others
  // are fed their next token and the draft tokens taken (draft_room). Error
  // for a token outside the vocabulary or an accepted count out of range.
  Kept end_step(std::span<const SeqAction> actions, int64_t n_vocab);
  // Frees every live sequence's KV (however a block ends).
  void clear();

  int64_t n_micro_batches() const { return static_cast<int64_t>(mbs_.size()); }
  MicroState& micro_batch(int64_t k) { return mbs_[static_cast<size_t>(k)]; }
  const MicroState& micro_batch(int64_t k) const { return mbs_[static_cast<size_t>(k)]; }
  // The KV sequences of micro-batch k's live members, in member order.
  std::vector<int32_t> kv_sequences(int64_t k) const;
  // For the same members: 1 where this step's attention reads only the
  // pages it selects from kSparseFirstLayer on (its group selects pages and
  // it has more pages than the budget).
  std::vector<uint8_t> sparse_members(int64_t k) const;
  // Block indices of the sequences whose logits this step produces, in row order.
  const std::vector<int32_t>& active() const { return active_; }
  // Logits rows of this step.
  int64_t n_rows() const;
  int64_t n_live() const { return n_live_; }
  int32_t step() const { return step_; }

 private:
  // Adds a decode step's attended and skipped KV bytes of micro-batch m.
  void count_attended(const MicroState& m);
  struct SeqState {
    int32_t kv = -1;           // KV sequence, -1 once finished
    std::vector<int32_t> fed;  // tokens fed to the next decode step: next, then drafts
    int32_t produced = 0;      // tokens produced so far (kept by the caller)
    int64_t shared = 0;        // tokens of its prompt in a shared prefix
    int32_t leader = -1;       // block index of the sequence whose prefix pages it takes
    int64_t taken = 0;         // tokens of its prompt taken from the kept prefix
    bool stale_minmax = false;  // rejected drafts' keys were folded into its last page's min/max
  };
  // How many of `wanted` draft tokens sequence b is fed next: at most
  // max_draft_, none past its max_new_tokens, and none that would complete a
  // disk-homed KV page (whose record is stored in the step that completes it).
  int64_t draft_room(const SeqState& s, size_t b, int64_t wanted) const;

  KvCache& kv_;
  int64_t gpu_batch_size_;
  int64_t page_size_;
  int64_t pos_offset_;
  int64_t sparse_pages_ = 0;
  int64_t max_draft_ = 0;
  bool sparse_keep_first_ = false;
  bool share_ = false, prefix_step_ = false;
  bool keep_ = false;                 // keep a prefix across blocks
  int32_t kept_ = -1;                 // the KV sequence holding its pages
  std::vector<int32_t> kept_tokens_;  // its tokens
  // The groups of the block's prompts (group()), whether each computes
  // its prefix or part of it (1) or takes it all from the kept one (0), and
  // what each takes from the kept one.
  std::vector<PrefixGroup> groups_;
  std::vector<uint8_t> computed_;  // [group]
  KeptTake from_kept_;
  const SeqInput* grouped_ = nullptr;  // the prompts group() grouped
  Reused taken_;
  uint64_t kv_attended_ = 0, kv_skipped_ = 0;
  std::span<const SeqInput> seqs_;
  bool all_rows_ = false;
  std::vector<SeqState> st_;
  std::vector<MicroState> mbs_;
  std::vector<int32_t> active_;
  int64_t n_live_ = 0;
  int32_t step_ = -1;
};

}  // namespace strata
