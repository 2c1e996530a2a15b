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

// What the next block takes from the kept prefix `held` (its tokens): each
// group the whole pages of it that its shared prefix begins with. A group
// whose whole prefix that is computes nothing (every member takes them);
// one with fewer (a prefix nested in the kept one, e.g. a system prompt
// before another document) has its leader take them and compute the rest
// of its prefix. The leader of the first group taking the most pages fills
// its own pages on in the extent the kept pages end in
// (KvCache::continue_extent); the kept pages after the most go.
struct KeptTake {
  std::vector<int64_t> pages;  // [group], or empty: nothing kept
  int64_t most = 0;            // the most pages a group takes
  int64_t extends = -1;        // the first group taking `most` (-1 when 0)
  int64_t taken(size_t group) const { return pages.empty() ? 0 : pages[group]; }
  // Whether group i, `g`, computes its prefix (or part of it) in a prefix step.
  bool computes(const PrefixGroup& g, size_t i, int64_t page_size) const {
    return taken(i) * page_size < g.tokens;
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
