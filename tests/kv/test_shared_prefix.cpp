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

// What a block takes from the prefix kept from the block before: each
// group the whole pages of it its prefix begins with; a group whose whole
// prefix that is computes nothing, the others the rest of theirs; the
// first group taking the most continues the kept pages' extent. A group
// sharing less than a page with it takes none.
TEST(SharedPrefix, GroupsTakeTheWholePagesTheirPrefixesBeginWithFromTheKeptOne) {
  const std::vector<int32_t> sys = seq(100, 9);  // 2 whole pages of 4, and 1 token
  const std::vector<int32_t> doc = cat(sys, seq(300, 12));
  const std::vector<int32_t> note = cat(seq(100, 4), seq(700, 9));  // sys's first page only
  const Prompts p{cat(doc, {1}),  cat(doc, {2}),       cat(note, {8}),
                  cat(note, {9}), cat(seq(0, 8), {1}), cat(seq(0, 8), {2})};
  const auto groups = find_prefix_groups(spans(p), 4);
  ASSERT_EQ(groups.size(), 3u);
  ASSERT_EQ(groups[1].members, (std::vector<size_t>{0, 1}));
  ASSERT_EQ(groups[1].tokens, 20);
  ASSERT_EQ(groups[2].members, (std::vector<size_t>{2, 3}));
  ASSERT_EQ(groups[2].tokens, 12);
  auto first = [](const std::vector<int32_t>& v, size_t n) {
    return std::vector<int32_t>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  };
  // The system prompt before another document: the first group its 2
  // whole pages, the second its first page; both compute the rest.
  KeptTake t = take_from_kept(groups, spans(p), first(cat(sys, seq(200, 12)), 20), 4);
  EXPECT_EQ(t.pages, (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(t.most, 2);
  EXPECT_EQ(t.extends, 1);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(t.computes(groups[i], i, 4)) << i;
  // A group's own prefix, and a longer one that begins with it: all of it.
  for (const size_t n : {20, 24}) {
    t = take_from_kept(groups, spans(p), first(cat(p[0], {5, 6}), n), 4);
    EXPECT_EQ(t.pages, (std::vector<int64_t>{0, 5, 1})) << n;
    EXPECT_EQ(t.extends, 1) << n;
    EXPECT_FALSE(t.computes(groups[1], 1, 4)) << n;
    EXPECT_TRUE(t.computes(groups[2], 2, 4)) << n;
  }
  t = take_from_kept(groups, spans(p), first(p[2], 12), 4);
  EXPECT_EQ(t.pages, (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(t.extends, 2);
  EXPECT_FALSE(t.computes(groups[2], 2, 4));
  // Less than a whole page in common with every group, or nothing kept.
  t = take_from_kept(groups, spans(p), seq(100, 3), 4);
  EXPECT_EQ(t.most, 0);
  EXPECT_EQ(t.extends, -1);
  t = take_from_kept(groups, spans(p), {}, 4);
  EXPECT_EQ(t.most, 0);
  EXPECT_TRUE(t.computes(groups[1], 1, 4));
}

}  // namespace
}  // namespace strata
