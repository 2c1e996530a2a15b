// Query-aware page selection for sparse decode attention (QUEST: Tang et
// al., ICML 2024). A decode query bounds its logit on any key of a page from
// the page's element-wise key min/max (kernels/cpu/attention.h keeps them):
// q.k <= sum_i max(q_i max_i, q_i min_i). With GQA one selection serves a kv
// head: its score of a page is the sum of that bound over the head's query
// heads (a bound on the sum of their logits), so one read of a page serves
// the whole group.
//
// Per sequence and kv head, of a sequence's n pages the selection keeps
// min(n, budget_pages): the last page always (it holds the new key), the
// first when keep_first (the attention sink), and the others by score,
// highest first, ties to the earlier page; listed in table order. A sequence
// of at most budget_pages pages keeps every page.
//
// Output layout (what paged attention takes with one page list per kv head,
// AttentionBatch::lists): the lists of sequence s are at
// sel_ids[sel_indptr[s] + g * m_s .. + m_s) for kv head g, m_s =
// min(n_pages_s, budget_pages); the selected keys number
// (m_s - 1) * page_size + the keys of its last page (sparse_kv_len).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/status.h"

namespace strata::cpu {

// The host side of the layout for a batch: sel_indptr [n_seq + 1] and the
// selected keys of each sequence, kv_len_sel [n_seq] (inline: the forward's
// micro-batch builds it without linking the CPU kernels).
inline void sparse_layout(const int32_t* kv_len, int64_t n_seq, int64_t page_size,
                          int64_t n_kv_head, int64_t budget_pages, std::vector<int32_t>* sel_indptr,
                          std::vector<int32_t>* kv_len_sel) {
  sel_indptr->assign(1, 0);
  kv_len_sel->clear();
  for (int64_t s = 0; s < n_seq; ++s) {
    const int64_t len = kv_len[s];
    const int64_t n = (len + page_size - 1) / page_size;
    const int64_t m = std::min(n, budget_pages);
    const int64_t last = len - (n - 1) * page_size;  // keys of the last page
    sel_indptr->push_back(static_cast<int32_t>(sel_indptr->back() + n_kv_head * m));
    kv_len_sel->push_back(static_cast<int32_t>(m == n ? len : (m - 1) * page_size + last));
  }
}

struct PageSelect {
  const float* k_min = nullptr;  // [n_pages, n_kv_head, head_dim] f32 (the pool's)
  const float* k_max = nullptr;
  int64_t n_pages = 0;  // page ids are in [0, n_pages)
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t page_size = 16;
  int64_t budget_pages = 0;  // >= 1 (>= 2 with keep_first)
  bool keep_first = false;
};

// q: [n_seq, n_head, head_dim] f32 rows (one decode token per sequence,
// row stride q_stride); batch: the sequences' page tables (q_indptr must give
// each sequence exactly one row); sel_indptr from sparse_layout; sel_ids
// [sel_indptr[n_seq]] is written. kInvalidArgument for a malformed batch, a
// page id out of range or a budget below the pages it must keep.
Status select_pages(const float* q, int64_t q_stride, int64_t n_head, const PageSelect& sel,
                    const AttentionBatch& batch, const int32_t* sel_indptr, int32_t* sel_ids);
// The reference: every page's score in double precision, a full sort.
Status select_pages_ref(const float* q, int64_t q_stride, int64_t n_head, const PageSelect& sel,
                        const AttentionBatch& batch, const int32_t* sel_indptr, int32_t* sel_ids);

}  // namespace strata::cpu
