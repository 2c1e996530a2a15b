// Query-aware page selection (kernels/cpu/page_select.h) against the
// brute-force reference: random queries, pages and budgets, GQA groups,
// sequences of mixed lengths (partial last pages), with and without the
// first page kept; sequences within the budget keep their whole table; a
// hand-made case; bad arguments refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/page_select.h"

namespace strata::cpu {
namespace {

struct Case {
  int64_t n_head = 4, n_kv_head = 2, head_dim = 8, page_size = 4;
  std::vector<int32_t> q_indptr{0}, kv_len, page_indptr{0}, page_ids;
  std::vector<float> q, k_min, k_max;
  int64_t n_pages = 0;

  AttentionBatch batch() const {
    AttentionBatch b;
    b.n_seq = static_cast<int64_t>(kv_len.size());
    b.q_indptr = q_indptr.data();
    b.kv_len = kv_len.data();
    b.page_indptr = page_indptr.data();
    b.page_ids = page_ids.data();
    return b;
  }
  PageSelect select(int64_t budget, bool keep_first) const {
    PageSelect s;
    s.k_min = k_min.data();
    s.k_max = k_max.data();
    s.n_pages = n_pages;
    s.n_kv_head = n_kv_head;
    s.head_dim = head_dim;
    s.page_size = page_size;
    s.budget_pages = budget;
    s.keep_first = keep_first;
    return s;
  }
};

// Values on a grid of 1/8 in [-2, 2]: every product and every sum of a
// score is exact in f32, so the kernel and the reference score alike and
// ties (to the earlier page) are frequent.
Case random_case(std::mt19937& rng, int64_t group, int64_t head_dim, int64_t n_seq,
                 int max_len = 60) {
  Case c;
  c.n_kv_head = 2;
  c.n_head = c.n_kv_head * group;
  c.head_dim = head_dim;
  std::uniform_int_distribution<int> grid(-16, 16), len(1, max_len);
  auto v = [&] { return static_cast<float>(grid(rng)) / 8; };
  std::vector<int64_t> lens;
  for (int64_t s = 0; s < n_seq; ++s) lens.push_back(len(rng));
  for (int64_t l : lens) c.n_pages += (l + c.page_size - 1) / c.page_size;
  c.n_pages += 5;  // ids the batch does not use
  std::vector<int32_t> perm(static_cast<size_t>(c.n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  size_t next = 0;
  for (int64_t s = 0; s < n_seq; ++s) {
    const int64_t n = (lens[static_cast<size_t>(s)] + c.page_size - 1) / c.page_size;
    for (int64_t i = 0; i < n; ++i) c.page_ids.push_back(perm[next++]);
    c.page_indptr.push_back(static_cast<int32_t>(c.page_ids.size()));
    c.kv_len.push_back(static_cast<int32_t>(lens[static_cast<size_t>(s)]));
    c.q_indptr.push_back(static_cast<int32_t>(s + 1));
  }
  const int64_t row = c.n_kv_head * c.head_dim;
  c.k_min.resize(static_cast<size_t>(c.n_pages * row));
  c.k_max.resize(c.k_min.size());
  for (size_t i = 0; i < c.k_min.size(); ++i) {
    const float a = v(), b = v();
    c.k_min[i] = std::min(a, b);
    c.k_max[i] = std::max(a, b);
  }
  c.q.resize(static_cast<size_t>(n_seq * c.n_head * c.head_dim));
  for (float& x : c.q) x = v();
  return c;
}

// The kernel's and the reference's selections of case c at a budget.
struct Selections {
  std::vector<int32_t> indptr, kv_sel, got, want;
  Status got_status = Status::kOk, want_status = Status::kOk;
};

Selections select_both(const Case& c, int64_t budget, bool first) {
  Selections r;
  const AttentionBatch b = c.batch();
  sparse_layout(c.kv_len.data(), b.n_seq, c.page_size, c.n_kv_head, budget, &r.indptr, &r.kv_sel);
  r.got.assign(static_cast<size_t>(r.indptr.back()), -1);
  r.want = r.got;
  const PageSelect sel = c.select(budget, first);
  const int64_t stride = c.n_head * c.head_dim;
  r.got_status = select_pages(c.q.data(), stride, c.n_head, sel, b, r.indptr.data(), r.got.data());
  r.want_status =
      select_pages_ref(c.q.data(), stride, c.n_head, sel, b, r.indptr.data(), r.want.data());
  return r;
}

// Long sequences (up to 2048 pages), SmolLM2's group of 3 query heads and
// head_dim 64: the budgets a long context runs with pick the reference's
// pages.
TEST(PageSelect, LongSequencesMatchTheReference) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 4; ++trial) {
    const Case c = random_case(rng, 3, 64, 2, 8192);
    for (const int64_t budget : {32, 64, 256, 1024}) {
      const Selections r = select_both(c, budget, true);
      ASSERT_EQ(r.got_status, Status::kOk);
      ASSERT_EQ(r.want_status, Status::kOk);
      EXPECT_EQ(r.got, r.want) << "trial " << trial << " budget " << budget;
    }
  }
}

TEST(PageSelect, MatchesTheBruteForceReference) {
  std::mt19937 rng(11);
  int64_t compared = 0, sparse = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t group = std::array<int64_t, 3>{1, 2, 4}[trial % 3];
    const int64_t head_dim = trial % 2 == 0 ? 8 : 64;
    const Case c = random_case(rng, group, head_dim, 1 + trial % 5);
    const AttentionBatch b = c.batch();
    for (const int64_t budget : {2, 3, 5, 9, 16}) {
      for (const bool first : {false, true}) {
        const auto [indptr, kv_sel, got, want, got_status, want_status] =
            select_both(c, budget, first);
        ASSERT_EQ(got_status, Status::kOk);
        ASSERT_EQ(want_status, Status::kOk);
        ASSERT_EQ(got, want) << "trial " << trial << " budget " << budget << " first " << first;
        // The layout's invariants: the last page (and the first) kept, in
        // table order, the selected keys counted.
        for (int64_t s = 0; s < b.n_seq; ++s) {
          const int32_t* table = c.page_ids.data() + c.page_indptr[static_cast<size_t>(s)];
          const int64_t n = (c.kv_len[static_cast<size_t>(s)] + c.page_size - 1) / c.page_size;
          const int64_t m = std::min<int64_t>(n, budget);
          sparse += m < n ? 1 : 0;
          const int64_t last_keys = c.kv_len[static_cast<size_t>(s)] - (n - 1) * c.page_size;
          EXPECT_EQ(kv_sel[static_cast<size_t>(s)], (m - 1) * c.page_size + last_keys);
          for (int64_t g = 0; g < c.n_kv_head; ++g) {
            const int32_t* list = got.data() + indptr[static_cast<size_t>(s)] + g * m;
            std::vector<int64_t> pos;
            for (int64_t i = 0; i < m; ++i) {
              pos.push_back(std::find(table, table + n, list[i]) - table);
            }
            EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end()));
            EXPECT_EQ(std::adjacent_find(pos.begin(), pos.end()), pos.end());
            EXPECT_EQ(pos.back(), n - 1);
            if (first) {
              EXPECT_EQ(pos.front(), 0);
            }
          }
        }
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 600);
  EXPECT_GT(sparse, 500);  // most sequences are cut by the budgets above
}

TEST(PageSelect, ASequenceWithinTheBudgetKeepsItsTable) {
  std::mt19937 rng(3);
  const Case c = random_case(rng, 2, 8, 4);
  int64_t most = 0;
  for (int32_t l : c.kv_len) most = std::max<int64_t>(most, (l + c.page_size - 1) / c.page_size);
  std::vector<int32_t> indptr, kv_sel;
  sparse_layout(c.kv_len.data(), 4, c.page_size, c.n_kv_head, most, &indptr, &kv_sel);
  EXPECT_EQ(kv_sel, c.kv_len);
  std::vector<int32_t> got(static_cast<size_t>(indptr.back()));
  ASSERT_EQ(select_pages(c.q.data(), c.n_head * c.head_dim, c.n_head, c.select(most, true),
                         c.batch(), indptr.data(), got.data()),
            Status::kOk);
  for (int64_t s = 0; s < 4; ++s) {
    const int64_t n =
        c.page_indptr[static_cast<size_t>(s) + 1] - c.page_indptr[static_cast<size_t>(s)];
    for (int64_t g = 0; g < c.n_kv_head; ++g) {
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(got[static_cast<size_t>(indptr[static_cast<size_t>(s)] + g * n + i)],
                  c.page_ids[static_cast<size_t>(c.page_indptr[static_cast<size_t>(s)] + i)]);
      }
    }
  }
}

// One kv head of two query heads, head_dim 2, five full pages: the score of
// a page sums max(q.max, q.min) over both query heads.
TEST(PageSelect, ScoresByTheGroupsUpperBound) {
  Case c;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.head_dim = 2;
  c.page_size = 1;
  c.n_pages = 5;
  c.kv_len = {5};
  c.q_indptr = {0, 1};
  c.page_indptr = {0, 5};
  c.page_ids = {4, 3, 2, 1, 0};  // table position i holds page 4 - i
  // q of head 0: (1, 0); of head 1: (0, -1). Bound of a page:
  // max(k_max.x, k_min.x) over x of head 0 + max(-k_max.y, -k_min.y).
  c.q = {1, 0, 0, -1};
  // page:       0 (last)   1         2          3          4 (first)
  c.k_min = {0, 0, -1, -3, 2, 0, 0, -1, 5, 5};
  c.k_max = {0, 0, 1, -2, 3, 1, 1, 0, 6, 6};
  // bounds: page 1: 1 + 3 = 4; page 2: 3 + 0 = 3; page 3: 1 + 1 = 2; page 4: 6 - 5 = 1.
  std::vector<int32_t> indptr, kv_sel, got(3);
  sparse_layout(c.kv_len.data(), 1, 1, 1, 3, &indptr, &kv_sel);
  ASSERT_EQ(
      select_pages(c.q.data(), 4, 2, c.select(3, false), c.batch(), indptr.data(), got.data()),
      Status::kOk);
  EXPECT_EQ(got, (std::vector<int32_t>{2, 1, 0}));  // positions 2, 3 and the last
  ASSERT_EQ(select_pages(c.q.data(), 4, 2, c.select(3, true), c.batch(), indptr.data(), got.data()),
            Status::kOk);
  EXPECT_EQ(got, (std::vector<int32_t>{4, 1, 0}));  // the first, the best other, the last
}

TEST(PageSelect, RefusesWhatItCannotSelect) {
  std::mt19937 rng(5);
  Case c = random_case(rng, 2, 8, 2);
  std::vector<int32_t> indptr, kv_sel;
  sparse_layout(c.kv_len.data(), 2, c.page_size, c.n_kv_head, 2, &indptr, &kv_sel);
  std::vector<int32_t> got(static_cast<size_t>(indptr.back()));
  const int64_t stride = c.n_head * c.head_dim;
  EXPECT_EQ(select_pages(c.q.data(), stride, c.n_head, c.select(0, false), c.batch(), indptr.data(),
                         got.data()),
            Status::kInvalidArgument);
  EXPECT_EQ(select_pages(c.q.data(), stride, c.n_head, c.select(1, true), c.batch(), indptr.data(),
                         got.data()),
            Status::kInvalidArgument);
  // A layout for another budget.
  EXPECT_EQ(select_pages(c.q.data(), stride, c.n_head, c.select(3, false), c.batch(), indptr.data(),
                         got.data()),
            Status::kInvalidArgument);
  c.page_ids[0] = static_cast<int32_t>(c.n_pages);  // outside the pool
  EXPECT_EQ(select_pages(c.q.data(), stride, c.n_head, c.select(2, false), c.batch(), indptr.data(),
                         got.data()),
            Status::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cpu
