// The live state of a block (block_state.h).
#include "offload/block_state.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/shared_prefix.h"
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
  forget_kept_prefix();
}

void BlockState::set_prefix_sharing(bool on) {
  share_ = on;
  keep_ = on;
  if (!keep_) forget_kept_prefix();
}

void BlockState::forget_kept_prefix() {
  if (kept_ >= 0) kv_.remove_sequence(kept_);
  kept_ = -1;
  kept_tokens_.clear();
}

void BlockState::group(std::span<const SeqInput> seqs, bool all_rows) {
  groups_.clear();
  computed_.clear();
  from_kept_ = {};
  grouped_ = seqs.data();
  if (share_ && !all_rows) {
    std::vector<std::span<const int32_t>> prompts;
    for (const SeqInput& s : seqs) prompts.emplace_back(s.prompt);
    groups_ = find_prefix_groups(prompts, page_size_);
    if (kept_ >= 0) from_kept_ = take_from_kept(groups_, prompts, kept_tokens_, page_size_);
    for (size_t i = 0; i < groups_.size(); ++i) {
      computed_.push_back(from_kept_.computes(groups_[i], i, page_size_) ? 1 : 0);
    }
  }
  if (from_kept_.most == 0) {
    forget_kept_prefix();
  } else if (from_kept_.most * page_size_ < static_cast<int64_t>(kept_tokens_.size())) {
    // Only its first pages are taken: the rest go now, so that the block's
    // memory counts the kept pages as the taking groups' leaders'.
    const int32_t shorter = kv_.add_sequence();
    kv_.share_prefix(shorter, kept_, from_kept_.most);
    kv_.remove_sequence(kept_);
    kept_ = shorter;
    kept_tokens_.resize(static_cast<size_t>(from_kept_.most * page_size_));
  }
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
  prefix_step_ = false;
  taken_ = {};
  STRATA_ASSERT_MSG(grouped_ == seqs.data(), "a block started without group()");
  grouped_ = nullptr;
  std::vector<int64_t> take(seqs.size(), 0);  // pages taken from the kept prefix
  std::vector<uint8_t> continues(seqs.size(), 0);  // fills on the kept pages' last extent
  if (kept_ >= 0) kv_.settle(kept_);
  for (size_t i = 0; i < groups_.size(); ++i) {
    const PrefixGroup& g = groups_[i];
    const int64_t pages = from_kept_.taken(i);
    for (const size_t b : g.members) {
      // A group's leader takes what it takes of the kept prefix (and the
      // first taking the most fills on the kept pages' last extent, as
      // that group's leader in the block's memory, referenced_pages); the
      // members take them too when they are the group's whole prefix, else
      // the leader computes the rest of it.
      const bool leader = b == g.members.front();
      if (pages > 0 && (leader || computed_[i] == 0)) {
        take[b] = pages;
        continues[b] = leader && static_cast<int64_t>(i) == from_kept_.extends;
      }
      if (computed_[i] == 0) continue;
      st_[b].shared = g.tokens;
      if (!leader) st_[b].leader = static_cast<int32_t>(g.members.front());
    }
    if (computed_[i] != 0) prefix_step_ = true;
  }
  for (size_t b = 0; b < seqs.size(); ++b) {
    st_[b].kv = kv_.add_sequence();
    if (take[b] > 0) {
      kv_.share_prefix(st_[b].kv, kept_, take[b]);
      if (continues[b] != 0) kv_.continue_extent(st_[b].kv, kept_);
      st_[b].taken = take[b] * page_size_;
      taken_.tokens += take[b] * page_size_;
      taken_.pages += take[b];
    }
    // At a prefix step only the leaders compute.
    if (!prefix_step_ || (st_[b].shared > 0 && st_[b].leader < 0)) {
      mbs_[b / static_cast<size_t>(gpu_batch_size_)].members.push_back(static_cast<int32_t>(b));
    }
  }
  n_live_ = static_cast<int64_t>(seqs.size());
}

BlockState::Reused BlockState::end_prefix_step() {
  STRATA_ASSERT(prefix_step_ && step_ == 0);
  Reused reused;
  for (MicroState& m : mbs_) m.members.clear();
  for (size_t b = 0; b < st_.size(); ++b) {
    SeqState& s = st_[b];
    if (s.leader >= 0) {
      const int64_t pages = s.shared / page_size_;
      kv_.share_prefix(s.kv, st_[static_cast<size_t>(s.leader)].kv, pages);
      reused.tokens += s.shared;
      reused.pages += pages;
    } else if (s.shared > 0) {
      // A leader's prefix, less what it took from the kept prefix.
      reused.computed += s.shared - s.taken;
    }
    mbs_[b / static_cast<size_t>(gpu_batch_size_)].members.push_back(static_cast<int32_t>(b));
  }
  if (keep_) {
    const int64_t i = group_to_keep(groups_, computed_);
    if (i >= 0) {
      const PrefixGroup& g = groups_[static_cast<size_t>(i)];
      forget_kept_prefix();
      kept_ = kv_.add_sequence();
      kv_.share_prefix(kept_, st_[g.members.front()].kv, g.tokens / page_size_);
      const std::span<const int32_t> prompt(seqs_[g.members.front()].prompt);
      kept_tokens_.assign(prompt.begin(), prompt.begin() + g.tokens);
    }
  }
  return reused;
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
// selection per kv head; all of them when the group stays dense). A
// sequence fed draft tokens selects per row: counted as its last row's
// selection (a lower bound: the pages its other rows select are read too).
std::pair<int64_t, int64_t> pages_and_attended(const MicroBatchHost& h, int64_t s,
                                               const KvGeometry& g) {
  const auto i = static_cast<size_t>(s);
  const int64_t n = g.pages_for(h.kv_len[i]);
  if (h.sel_indptr.empty()) return {n, n};
  const auto r = h.row_kv_len.empty() ? i : static_cast<size_t>(h.q_indptr[i + 1] - 1);
  return {n, (h.sel_indptr[r + 1] - h.sel_indptr[r]) / g.n_kv_head};
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
  const int32_t prefill = prefill_step();
  for (MicroState& m : mbs_) {
    m.row0 = static_cast<int64_t>(active_.size());
    if (!m.live()) continue;
    m.n_groups = 0;
    int64_t n_tokens = 0;
    for (const int32_t b : m.members) {
      SeqState& s = st_[static_cast<size_t>(b)];
      const std::span<const int32_t> prompt(seqs_[static_cast<size_t>(b)].prompt);
      // A prefix step computes the shared prefix, the prefill the rest of
      // the prompt: each what the KV sequence does not hold yet (a leader
      // may hold the first pages of its prefix, taken from the kept one).
      const auto held = static_cast<size_t>(kv_.length(s.kv));
      const std::span<const int32_t> toks =
          step < prefill    ? prompt.first(static_cast<size_t>(s.shared)).subspan(held)
          : step == prefill ? prompt.subspan(held)
                            : std::span<const int32_t>(s.fed);
      const int64_t n_new = static_cast<int64_t>(toks.size());
      // A row per token when scoring, and per fed token of a decode step.
      const bool rows_each = all_rows_ || step > prefill;
      const int64_t rows = rows_each ? n_new : 1;
      if (m.n_groups == 0 ||
          m.groups[static_cast<size_t>(m.n_groups - 1)].host.n_tokens() + n_new > kMaxGroupTokens) {
        if (static_cast<int64_t>(m.groups.size()) == m.n_groups) m.groups.emplace_back();
        Group& gr = m.groups[static_cast<size_t>(m.n_groups++)];
        gr.host.clear();
        gr.host.track_touched = sparse_pages_ > 0;
        gr.token0 = n_tokens;
        gr.row0 = static_cast<int64_t>(active_.size());
      }
      const int64_t start = kv_.extend(s.kv, n_new, step);
      m.groups[static_cast<size_t>(m.n_groups - 1)].host.add_sequence(
          toks, start, kv_.pages(s.kv), page_size_, rows_each, pos_offset_, s.stale_minmax);
      s.stale_minmax = false;
      n_tokens += n_new;
      active_.insert(active_.end(), static_cast<size_t>(all_rows_ ? 1 : rows), b);
    }
    if (sparse_pages_ > 0 && step > prefill) {
      for (int64_t gi = 0; gi < m.n_groups; ++gi) {
        m.groups[static_cast<size_t>(gi)].host.plan_sparse(sparse_pages_, sparse_keep_first_,
                                                           kv_.geometry().n_kv_head, page_size_);
      }
    }
    if (step > prefill) count_attended(m);
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

namespace {

// Calls f(b, r0, n) for each sequence of the step: block index b, its first
// row r0 and its n rows (consecutive in `active`).
template <class F>
void for_each_sequence(const std::vector<int32_t>& active, F&& f) {
  for (size_t r = 0; r < active.size();) {
    size_t n = 1;
    while (r + n < active.size() && active[r + n] == active[r]) ++n;
    f(active[r], r, n);
    r += n;
  }
}

}  // namespace

bool BlockState::finishes_any(std::span<const SeqAction> actions) const {
  bool any = false;
  for_each_sequence(active_, [&](int32_t b, size_t r0, size_t) {
    const SeqAction& a = actions[r0];
    any = any || a.finished ||
          st_[static_cast<size_t>(b)].produced + 1 + a.accepted >=
              seqs_[static_cast<size_t>(b)].max_new_tokens;
  });
  return any;
}

int64_t BlockState::draft_room(const SeqState& s, size_t b, int64_t wanted) const {
  int64_t room = std::min<int64_t>({wanted, max_draft_, seqs_[b].max_new_tokens - s.produced - 1});
  // The fed token goes to position len, draft i to len + i: the first page
  // end a draft reaches on disk caps them before it.
  const int64_t len = kv_.length(s.kv);
  for (int64_t end = (len / page_size_ + 1) * page_size_ - 1; end <= len + room;
       end += page_size_) {
    if (end > len && kv_page_home(kv_.placement(), end / page_size_) == Tier::kDisk) {
      room = end - len - 1;
      break;
    }
  }
  return std::max<int64_t>(room, 0);
}

BlockState::Kept BlockState::end_step(std::span<const SeqAction> actions, int64_t n_vocab) {
  STRATA_ASSERT(actions.size() == active_.size());
  auto check_id = [&](int32_t tok, const char* what, int32_t b) {
    if (tok < 0 || tok >= n_vocab) {
      fail("step {}: the {} {} of sequence {} is outside the vocabulary of {} ids", step_, what,
           tok, b, n_vocab);
    }
  };
  Kept kept;
  for_each_sequence(active_, [&](int32_t b, size_t r0, size_t n) {
    SeqState& s = st_[static_cast<size_t>(b)];
    const SeqAction& a = actions[r0];
    const int64_t drafted = all_rows_ ? 0 : static_cast<int64_t>(n) - 1;
    if (a.accepted < 0 || a.accepted > drafted) {
      fail("step {}: sequence {} accepts {} draft tokens of the {} it was fed", step_, b,
           a.accepted, drafted);
    }
    kv_.truncate(s.kv, drafted - a.accepted);
    s.stale_minmax = drafted > a.accepted;
    s.produced += 1 + a.accepted;
    kept.tokens += 1 + a.accepted;
    kept.drafted += drafted;
    kept.accepted += a.accepted;
    const bool done = a.finished || s.produced >= seqs_[static_cast<size_t>(b)].max_new_tokens;
    if (!done) {
      check_id(a.next_token, "next token", b);
      const int64_t d = draft_room(s, static_cast<size_t>(b), static_cast<int64_t>(a.draft.size()));
      s.fed.assign(1, a.next_token);
      for (int64_t i = 0; i < d; ++i) {
        check_id(a.draft[static_cast<size_t>(i)], "draft token", b);
        s.fed.push_back(a.draft[static_cast<size_t>(i)]);
      }
      return;
    }
    kv_.remove_sequence(s.kv);
    s.kv = -1;
    --n_live_;
    auto& members = mbs_[static_cast<size_t>(b / gpu_batch_size_)].members;
    members.erase(std::find(members.begin(), members.end(), b));
  });
  return kept;
}

}  // namespace strata
