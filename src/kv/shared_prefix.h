// Shared prompt prefixes: which prompts of a set begin with the same whole
// KV pages of tokens, so that a block computes and stores those pages once
// (kv/kv_cache.h: share_prefix) and the batch driver puts such prompts in
// the same blocks.
//
// Prompts are sorted by their tokens; neighbours whose common prefix holds
// whole pages form a group, the group's prefix being the pages all its
// members share. A prompt joins the group before it while that keeps at
// least half of the group's pages (so one short match does not shrink a
// long shared preamble to a page); otherwise it starts a new group. Each
// member keeps at least its last prompt token out of the prefix: the
// prefill computes it, and with it the logits the first new token is drawn
// from.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace strata {

struct PrefixGroup {
  std::vector<size_t> members;  // indices of the prompts, ascending; two or more
  int64_t tokens = 0;           // shared tokens: a positive multiple of the page size
};

// The groups of `prompts` (each non-empty) for pages of `page_size` tokens;
// a prompt is in at most one group.
std::vector<PrefixGroup> find_prefix_groups(std::span<const std::span<const int32_t>> prompts,
                                            int64_t page_size);

// Pages each of `n_prompts` prompts takes from another prompt of its group
// rather than storing them: the group's pages for every member but the first
// (which computes and stores them; offload/block_state.cpp), 0 for the first
// and for prompts in no group.
std::vector<int64_t> referenced_pages(std::span<const PrefixGroup> groups, size_t n_prompts,
                                      int64_t page_size);

// Prefix sharing across blocks: after a block's prefix step the engine
// keeps one computed group's prefix pages for the next block, whose group
// whose prefix begins with them takes them instead of computing them. The
// one kept: of the groups with computed[i], the one with the most tokens x
// members (the first of equals); -1 for none.
int64_t group_to_keep(std::span<const PrefixGroup> groups, std::span<const uint8_t> computed);

// What the next block takes from the kept prefix `held` (its tokens): the
// group whose shared prefix begins with the most whole pages of it (the
// first of equals) takes that many. All of its prefix (pages * page_size ==
// tokens): every member takes them and the group computes nothing; fewer
// (a prefix nested in the kept one, e.g. a system prompt before another
// document): its leader takes them and computes only the rest of the
// group's prefix. group -1 and pages 0 when no group's prefix begins with a
// whole page of `held`.
struct KeptTake {
  int64_t group = -1;
  int64_t pages = 0;
  // Whether group g computes its prefix (or part of it) in a prefix step.
  bool computes(const PrefixGroup& g, size_t i, int64_t page_size) const {
    return static_cast<int64_t>(i) != group || pages * page_size < g.tokens;
  }
};
KeptTake take_from_kept(std::span<const PrefixGroup> groups,
                        std::span<const std::span<const int32_t>> prompts,
                        std::span<const int32_t> held, int64_t page_size);

// An order of the prompts for forming blocks: longest first (ties in input
// order), except that the members of a group follow one another (longest
// first), the group placed where its longest member would be.
std::vector<size_t> order_for_sharing(std::span<const std::span<const int32_t>> prompts,
                                      int64_t page_size);

}  // namespace strata
