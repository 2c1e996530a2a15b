// The paged KV cache: sequences, each with one page table shared by every
// layer (key j of a sequence is at offset j % page_size of its
// (j / page_size)-th page, in every layer), over a PagePool. Pages are taken
// from the pool as a sequence grows and released when it is removed.
//
// A sequence's length counts the tokens whose slots are assigned: extend()
// makes room for new tokens and advances the length at once; the layers then
// write those slots (Backend::kv_append) before attention reads them. Each
// page of a table holds one reference; a page shared with another table
// (ref_count > 1) is never written: extend() asserts that the partly filled
// last page it appends into is the table's own.
//
// Invariants: pages(seq).size() == page_size-ceil of length(seq); every page
// of a table has ref_count >= 1.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/page_pool.h"

namespace strata {

class KvCache {
 public:
  KvCache(Backend& backend, const KvGeometry& geometry, uint64_t budget_bytes);
  ~KvCache();

  PagePool& pool() { return pool_; }
  const PagePool& pool() const { return pool_; }
  const KvGeometry& geometry() const { return pool_.geometry(); }

  // A new, empty sequence; ids of removed sequences are reused.
  int32_t add_sequence();
  // Releases the sequence's pages; its id becomes free.
  void remove_sequence(int32_t seq);
  int64_t n_sequences() const { return n_live_; }

  int64_t length(int32_t seq) const;
  std::span<const int32_t> pages(int32_t seq) const;  // the page table, in key order

  // Assigns slots to n_new more tokens of seq, allocating pages as needed;
  // returns the previous length (the position of the first new token).
  // Throws Error (from the pool) when the budget is exhausted; the sequence
  // is then unchanged.
  int64_t extend(int32_t seq, int64_t n_new);

  // Pages the pool must still hand out for the listed growth: for each i,
  // sequence seqs[i] (or a new one when seqs is shorter) growing to
  // total_tokens[i] tokens.
  int64_t pages_needed(std::span<const int32_t> seqs, std::span<const int64_t> total_tokens) const;

 private:
  struct Seq {
    bool live = false;
    int64_t length = 0;
    std::vector<int32_t> pages;
  };
  const Seq& get(int32_t seq) const;

  PagePool pool_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_ids_;
  int64_t n_live_ = 0;
};

}  // namespace strata
