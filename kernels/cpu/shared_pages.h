// The pages a decode batch's sequences share: sequences whose page tables
// begin with the same page ids (a shared prompt prefix, src/kv/shared_prefix.h)
// read the same keys and values there, so the decode attention
// (attention_decode.cpp) reads those pages once for the whole group and
// scores every member's queries against them together (a matrix product
// instead of one vector product per sequence), then merges each member's
// part with its own tail by the log-sum-exp rule, as it merges key chunks.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"

namespace strata::cpu {

struct SharedPages {
  std::vector<int32_t> seqs;  // >= 2 sequences of the batch, in batch order
  int64_t n_pages = 0;        // >= 1: the first n_pages of every member's table are the same
};

// The groups of sequences with one new token each (decode) and one page list
// (not sparse attention's per-head lists) whose tables begin with the same
// page id: a group's n_pages is the longest run of page ids every member
// shares from the first, capped so that each member keeps at least its last
// key outside it (n_pages * page_size < kv_len). A sequence sharing no whole
// page with another is in no group. Groups are in the order of their first
// member.
std::vector<SharedPages> shared_page_groups(const AttentionBatch& b, int64_t page_size);

}  // namespace strata::cpu
