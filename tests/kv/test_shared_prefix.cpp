// Shared prompt prefixes (kv/shared_prefix.h): which prompts form
// groups, how many whole pages each shares, and the order that puts a
// group's prompts together for the blocks.
#include <gtest/gtest.h>

#include <numeric>
#include <span>
#include <vector>

#include "kv/shared_prefix.h"

namespace strata {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

std::vector<std::span<const int32_t>> spans(const Prompts& p) {
  return {p.begin(), p.end()};
}

std::vector<int32_t> seq(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(SharedPrefix, GroupsShareTheirCommonWholePages) {
  const std::vector<int32_t> pre = seq(100, 10);  // 2 whole pages of 4, and 2 tokens
  const Prompts p{cat(pre, {1, 2}), seq(0, 9), cat(pre, {3}), cat(pre, {1, 2, 5, 6, 7}),
                  seq(50, 3)};
  const auto groups = find_prefix_groups(spans(p), 4);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].members, (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(groups[0].tokens, 8) << "the third page differs within the group";
}

TEST(SharedPrefix, EachMemberKeepsItsLastTokenOutOfThePrefix) {
  // Identical prompts of exactly two pages share only the first: the
  // prefill computes the last page, whose last token gives the logits.
  const Prompts p{seq(0, 8), seq(0, 8), seq(0, 8)};
  const auto groups = find_prefix_groups(spans(p), 4);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].tokens, 4);
  // A prompt of one page shares nothing.
  const Prompts q{seq(0, 4), seq(0, 9)};
  EXPECT_TRUE(find_prefix_groups(spans(q), 4).empty());
}

TEST(SharedPrefix, ALongPreambleIsNotShrunkByOneShortMatch) {
  const std::vector<int32_t> pre = seq(100, 40);  // 10 pages
  Prompts p{cat(pre, {1}), cat(pre, {2}), cat(pre, {3})};
  // Shares only the first page with the preamble prompts, and sorts after them.
  p.push_back(cat(seq(100, 4), seq(900, 8)));
  p.push_back(cat(seq(100, 4), seq(900, 8)));
  const auto groups = find_prefix_groups(spans(p), 4);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].members, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(groups[0].tokens, 40);
  EXPECT_EQ(groups[1].members, (std::vector<size_t>{3, 4}));
  EXPECT_EQ(groups[1].tokens, 8);
}

TEST(SharedPrefix, NothingSharedKeepsLongestFirstInInputOrder) {
  const Prompts p{seq(0, 3), seq(10, 7), seq(20, 3), seq(30, 9), seq(40, 7)};
  EXPECT_TRUE(find_prefix_groups(spans(p), 4).empty());
  EXPECT_EQ(order_for_sharing(spans(p), 4), (std::vector<size_t>{3, 1, 4, 0, 2}));
}

TEST(SharedPrefix, AGroupsPromptsFollowOneAnother) {
  const std::vector<int32_t> pre = seq(100, 8);
  const Prompts p{cat(pre, {1}), seq(0, 20), cat(pre, {2, 3}), seq(10, 5), cat(pre, {4})};
  // The group {0, 2, 4} goes where its longest (2: 10 tokens) would.
  EXPECT_EQ(order_for_sharing(spans(p), 4), (std::vector<size_t>{1, 2, 0, 4, 3}));
}

// What a block takes from the prefix kept from the block before: the group
// whose prefix begins with the most whole pages of it; all of them when
// they are its whole prefix (the group computes nothing), else its leader
// computes the rest. A group sharing less than a page with it takes none.
TEST(SharedPrefix, AGroupTakesTheWholePagesItsPrefixBeginsWithFromTheKeptOne) {
  const std::vector<int32_t> sys = seq(100, 9);  // 2 whole pages of 4, and 1 token
  const std::vector<int32_t> doc = cat(sys, seq(300, 12));
  const Prompts p{
      cat(doc, {1}),       cat(doc, {2}),      cat(seq(100, 3), {7, 8}), cat(seq(100, 3), {7, 9}),
      cat(seq(0, 8), {1}), cat(seq(0, 8), {2})};
  const auto groups = find_prefix_groups(spans(p), 4);
  ASSERT_EQ(groups.size(), 3u);
  ASSERT_EQ(groups[2].members, (std::vector<size_t>{0, 1}));
  ASSERT_EQ(groups[2].tokens, 20);
  ASSERT_EQ(groups[1].members, (std::vector<size_t>{2, 3}));  // shares 3 tokens with sys
  auto first = [](const std::vector<int32_t>& v, size_t n) {
    return std::vector<int32_t>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  };
  // The system prompt before another document: its 2 whole pages.
  const std::vector<int32_t> other = first(cat(sys, seq(200, 12)), 20);
  KeptTake t = take_from_kept(groups, spans(p), other, 4);
  EXPECT_EQ(t.group, 2);
  EXPECT_EQ(t.pages, 2);
  EXPECT_TRUE(t.computes(groups[2], 2, 4)) << "it computes its last 12 prefix tokens";
  EXPECT_TRUE(t.computes(groups[1], 1, 4));
  // The group's own prefix, and a longer one that begins with it: all of it.
  for (const size_t n : {20, 24}) {
    t = take_from_kept(groups, spans(p), first(cat(p[0], {5, 6}), n), 4);
    EXPECT_EQ(t.group, 2) << n;
    EXPECT_EQ(t.pages, 5) << n;
    EXPECT_FALSE(t.computes(groups[2], 2, 4)) << n;
    EXPECT_TRUE(t.computes(groups[0], 0, 4)) << n;
  }
  // Less than a whole page in common with every group: nothing.
  t = take_from_kept(groups, spans(p), seq(100, 3), 4);
  EXPECT_EQ(t.group, -1);
  EXPECT_EQ(t.pages, 0);
  t = take_from_kept(groups, spans(p), seq(500, 8), 4);
  EXPECT_EQ(t.group, -1);
  EXPECT_TRUE(t.computes(groups[2], 2, 4));
}

}  // namespace
}  // namespace strata
