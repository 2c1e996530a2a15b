// Shared prompt prefixes (shared_prefix.h).
#include "kv/shared_prefix.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace strata {

namespace {

int64_t common_tokens(std::span<const int32_t> a, std::span<const int32_t> b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return ia - a.begin();
}

}  // namespace

std::vector<PrefixGroup> find_prefix_groups(std::span<const std::span<const int32_t>> prompts,
                                            int64_t page_size) {
  STRATA_ASSERT(page_size >= 1);
  std::vector<size_t> order(prompts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::lexicographical_compare(prompts[a].begin(), prompts[a].end(), prompts[b].begin(),
                                        prompts[b].end());
  });
  // Pages of prompt i that may be shared: all but its last token's.
  auto cap = [&](size_t i) {
    STRATA_ASSERT(!prompts[i].empty());
    return (static_cast<int64_t>(prompts[i].size()) - 1) / page_size;
  };
  std::vector<PrefixGroup> out;
  PrefixGroup cur;
  int64_t pages = 0;
  auto close = [&] {
    if (cur.members.size() >= 2) {
      std::sort(cur.members.begin(), cur.members.end());
      cur.tokens = pages * page_size;
      out.push_back(std::move(cur));
    }
    cur = PrefixGroup{};
  };
  for (size_t n = 0; n < order.size(); ++n) {
    const size_t i = order[n];
    if (!cur.members.empty()) {
      const size_t prev = cur.members.back();
      const int64_t shared =
          std::min({pages, common_tokens(prompts[prev], prompts[i]) / page_size, cap(i)});
      const bool joins = shared >= 1 && (cur.members.size() == 1 || 2 * shared >= pages);
      if (joins) {
        cur.members.push_back(i);
        pages = shared;
        continue;
      }
      close();
    }
    cur.members.push_back(i);
    pages = cap(i);
  }
  close();
  return out;
}

std::vector<int64_t> referenced_pages(std::span<const PrefixGroup> groups, size_t n_prompts,
                                      int64_t page_size) {
  STRATA_ASSERT(page_size >= 1);
  std::vector<int64_t> out(n_prompts, 0);
  for (const PrefixGroup& g : groups) {
    for (size_t m = 1; m < g.members.size(); ++m) {
      STRATA_ASSERT(g.members[m] < n_prompts);
      out[g.members[m]] = g.tokens / page_size;
    }
  }
  return out;
}

int64_t group_to_keep(std::span<const PrefixGroup> groups, std::span<const uint8_t> computed) {
  STRATA_ASSERT(groups.size() == computed.size());
  int64_t best = -1, best_tokens = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const int64_t t = groups[i].tokens * static_cast<int64_t>(groups[i].members.size());
    if (computed[i] != 0 && t > best_tokens) {
      best = static_cast<int64_t>(i);
      best_tokens = t;
    }
  }
  return best;
}

KeptTake take_from_kept(std::span<const PrefixGroup> groups,
                        std::span<const std::span<const int32_t>> prompts,
                        std::span<const int32_t> held, int64_t page_size) {
  STRATA_ASSERT(page_size >= 1);
  KeptTake t;
  if (held.empty()) return t;
  for (size_t i = 0; i < groups.size(); ++i) {
    const PrefixGroup& g = groups[i];
    const std::span<const int32_t> prefix =
        prompts[g.members.front()].first(static_cast<size_t>(g.tokens));
    t.pages.push_back(common_tokens(prefix, held) / page_size);
    if (t.pages.back() > t.most) {
      t.most = t.pages.back();
      t.extends = static_cast<int64_t>(i);
    }
  }
  return t;
}

std::vector<size_t> order_for_sharing(std::span<const std::span<const int32_t>> prompts,
                                      int64_t page_size) {
  const size_t n = prompts.size();
  auto longer = [&](size_t a, size_t b) {
    return prompts[a].size() != prompts[b].size() ? prompts[a].size() > prompts[b].size() : a < b;
  };
  // Units: each group, and each prompt in none; a unit sorts by its longest member.
  std::vector<std::vector<size_t>> units;
  std::vector<uint8_t> grouped(n, 0);
  for (PrefixGroup& g : find_prefix_groups(prompts, page_size)) {
    for (size_t i : g.members) grouped[i] = 1;
    std::sort(g.members.begin(), g.members.end(), longer);
    units.push_back(std::move(g.members));
  }
  for (size_t i = 0; i < n; ++i) {
    if (grouped[i] == 0) units.push_back({i});
  }
  std::sort(units.begin(), units.end(),
            [&](const auto& a, const auto& b) { return longer(a.front(), b.front()); });
  std::vector<size_t> order;
  order.reserve(n);
  for (const auto& u : units) order.insert(order.end(), u.begin(), u.end());
  return order;
}

}  // namespace strata
