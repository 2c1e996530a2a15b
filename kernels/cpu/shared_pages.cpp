#include "kernels/cpu/shared_pages.h"

#include <algorithm>
#include <unordered_map>

namespace strata::cpu {

std::vector<SharedPages> shared_page_groups(const AttentionBatch& b, int64_t page_size) {
  std::vector<SharedPages> groups;
  if (b.lists != 1 || page_size < 1) return groups;
  std::unordered_map<int32_t, size_t> by_first;  // first page id -> group
  std::vector<int64_t> cap;                      // per group: the members' least cap
  for (int64_t s = 0; s < b.n_seq; ++s) {
    if (b.q_indptr[s + 1] - b.q_indptr[s] != 1) continue;
    const int64_t own = (b.kv_len[s] - 1) / page_size;  // whole pages before its last key
    if (own < 1) continue;
    const int32_t first = b.page_ids[b.page_indptr[s]];
    const auto [it, fresh] = by_first.try_emplace(first, groups.size());
    if (fresh) {
      groups.emplace_back();
      cap.push_back(own);
    }
    groups[it->second].seqs.push_back(static_cast<int32_t>(s));
    cap[it->second] = std::min(cap[it->second], own);
  }
  std::vector<SharedPages> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    SharedPages& grp = groups[g];
    if (grp.seqs.size() < 2) continue;
    const int32_t* lead = b.page_ids + b.page_indptr[grp.seqs[0]];
    int64_t n = cap[g];
    for (size_t i = 1; i < grp.seqs.size() && n > 0; ++i) {
      const int32_t* p = b.page_ids + b.page_indptr[grp.seqs[i]];
      n = std::mismatch(lead, lead + n, p).first - lead;
    }
    grp.n_pages = n;
    out.push_back(std::move(grp));
  }
  return out;
}

}  // namespace strata::cpu
