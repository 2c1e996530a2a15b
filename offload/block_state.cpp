// The live state of a block (block_state.h).
#include "offload/block_state.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "offload/block_budget.h"

namespace strata {

int64_t BlockState::MicroState::n_tokens() const {
  if (n_groups == 0) return 0;
  const Group& last = groups[static_cast<size_t>(n_groups - 1)];
  return last.token0 + last.host.n_tokens();
}

BlockState::BlockState(KvCache& kv, int64_t gpu_batch_size, int64_t n_micro_batches,
                       int64_t pos_offset)
    : kv_(kv),
      gpu_batch_size_(gpu_batch_size),
      page_size_(kv.geometry().page_size),
      pos_offset_(pos_offset),
      mbs_(static_cast<size_t>(n_micro_batches)) {}

BlockState::~BlockState() {
  clear();
}

void BlockState::clear() {
  for (SeqState& s : st_) {
    if (s.kv >= 0) kv_.remove_sequence(s.kv);
    s.kv = -1;
  }
  for (MicroState& m : mbs_) m.members.clear();
  n_live_ = 0;
}

void BlockState::start(std::span<const SeqInput> seqs, bool all_rows) {
  clear();
  seqs_ = seqs;
  all_rows_ = all_rows;
  step_ = -1;
  st_.assign(seqs.size(), SeqState{});
  for (size_t b = 0; b < seqs.size(); ++b) {
    st_[b].kv = kv_.add_sequence();
    mbs_[b / static_cast<size_t>(gpu_batch_size_)].members.push_back(static_cast<int32_t>(b));
  }
  n_live_ = static_cast<int64_t>(seqs.size());
}

std::vector<int32_t> BlockState::kv_sequences(int64_t k) const {
  std::vector<int32_t> out;
  for (const int32_t b : mbs_[static_cast<size_t>(k)].members) {
    out.push_back(st_[static_cast<size_t>(b)].kv);
  }
  return out;
}

namespace {

// Pages sequence s of a group has, and those a sparse layer attends (its
// selection per kv head; all of them when the group stays dense).
std::pair<int64_t, int64_t> pages_and_attended(const MicroBatchHost& h, int64_t s,
                                               const KvGeometry& g) {
  const auto i = static_cast<size_t>(s);
  const int64_t n = g.pages_for(h.kv_len[i]);
  if (h.sel_indptr.empty()) return {n, n};
  return {n, (h.sel_indptr[i + 1] - h.sel_indptr[i]) / g.n_kv_head};
}

}  // namespace

std::vector<uint8_t> BlockState::sparse_members(int64_t k) const {
  const MicroState& m = mbs_[static_cast<size_t>(k)];
  std::vector<uint8_t> out;
  out.reserve(m.members.size());
  for (int64_t gi = 0; gi < m.n_groups; ++gi) {
    const MicroBatchHost& h = m.groups[static_cast<size_t>(gi)].host;
    for (int64_t s = 0; s < h.n_seq(); ++s) {
      const auto [n, kept] = pages_and_attended(h, s, kv_.geometry());
      out.push_back(kept < n);
    }
  }
  STRATA_ASSERT(out.size() == m.members.size());
  return out;
}

int64_t BlockState::n_rows() const {
  return all_rows_ ? static_cast<int64_t>(seqs_[0].prompt.size())
                   : static_cast<int64_t>(active_.size());
}

bool BlockState::begin_step(int32_t step) {
  if (n_live_ == 0) return false;
  step_ = step;
  active_.clear();
  int64_t row = 0;
  for (MicroState& m : mbs_) {
    m.row0 = row;
    active_.insert(active_.end(), m.members.begin(), m.members.end());
    row = static_cast<int64_t>(active_.size());
  }
  for (MicroState& m : mbs_) {
    if (!m.live()) continue;
    m.n_groups = 0;
    int64_t n_tokens = 0;
    for (size_t r = 0; r < m.members.size(); ++r) {
      const int32_t b = m.members[r];
      SeqState& s = st_[static_cast<size_t>(b)];
      std::span<const int32_t> toks =
          step == 0 ? std::span<const int32_t>(seqs_[static_cast<size_t>(b)].prompt)
                    : std::span<const int32_t>(&s.next, 1);
      const int64_t n_new = static_cast<int64_t>(toks.size());
      if (m.n_groups == 0 ||
          m.groups[static_cast<size_t>(m.n_groups - 1)].host.n_tokens() + n_new > kMaxGroupTokens) {
        if (static_cast<int64_t>(m.groups.size()) == m.n_groups) m.groups.emplace_back();
        Group& gr = m.groups[static_cast<size_t>(m.n_groups++)];
        gr.host.clear();
        gr.token0 = n_tokens;
        gr.row0 = m.row0 + (all_rows_ ? n_tokens : static_cast<int64_t>(r));
      }
      const int64_t start = kv_.extend(s.kv, n_new, step);
      m.groups[static_cast<size_t>(m.n_groups - 1)].host.add_sequence(
          toks, start, kv_.pages(s.kv), page_size_, all_rows_, pos_offset_);
      n_tokens += n_new;
    }
    if (sparse_pages_ > 0) {
      for (int64_t gi = 0; gi < m.n_groups; ++gi) {
        m.groups[static_cast<size_t>(gi)].host.plan_sparse(sparse_pages_, sparse_keep_first_,
                                                           kv_.geometry().n_kv_head, page_size_);
      }
    }
    if (step > 0) count_attended(m);
  }
  return true;
}

void BlockState::count_attended(const MicroState& m) {
  const KvGeometry& g = kv_.geometry();
  const uint64_t page = 2 * g.page_bytes();  // K and V of one layer
  const auto sparse_layers =
      static_cast<uint64_t>(std::max<int64_t>(0, g.n_layer - kSparseFirstLayer));
  for (int64_t gi = 0; gi < m.n_groups; ++gi) {
    const MicroBatchHost& h = m.groups[static_cast<size_t>(gi)].host;
    for (int64_t s = 0; s < h.n_seq(); ++s) {
      const auto [n, kept] = pages_and_attended(h, s, g);
      const auto skipped = static_cast<uint64_t>(n - kept) * page * sparse_layers;
      kv_attended_ += static_cast<uint64_t>(n) * page * static_cast<uint64_t>(g.n_layer) - skipped;
      kv_skipped_ += skipped;
    }
  }
}

bool BlockState::finishes_any(std::span<const SeqAction> actions) const {
  for (size_t r = 0; r < active_.size(); ++r) {
    const int32_t b = active_[r];
    if (actions[r].finished ||
        st_[static_cast<size_t>(b)].produced + 1 >= seqs_[static_cast<size_t>(b)].max_new_tokens) {
      return true;
    }
  }
  return false;
}

void BlockState::end_step(std::span<const SeqAction> actions, int64_t n_vocab) {
  STRATA_ASSERT(actions.size() == active_.size());
  for (size_t r = 0; r < active_.size(); ++r) {
    const int32_t b = active_[r];
    SeqState& s = st_[static_cast<size_t>(b)];
    ++s.produced;
    const bool done =
        actions[r].finished || s.produced >= seqs_[static_cast<size_t>(b)].max_new_tokens;
    if (!done) {
      const int32_t tok = actions[r].next_token;
      if (tok < 0 || tok >= n_vocab) {
        fail("step {}: the next token {} of sequence {} is outside the vocabulary of {} ids", step_,
             tok, b, n_vocab);
      }
      s.next = tok;
      continue;
    }
    kv_.remove_sequence(s.kv);
    s.kv = -1;
    --n_live_;
    auto& members = mbs_[static_cast<size_t>(b / gpu_batch_size_)].members;
    members.erase(std::find(members.begin(), members.end(), b));
  }
}

}  // namespace strata
