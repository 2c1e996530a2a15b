// The paged KV cache: sequences, each with one page table shared by every
// layer (key j of a sequence is at offset j % page_size of its
// (j / page_size)-th page, in every layer), over a PagePool
// (kv/page_pool.h), and a home tier for each page from the placement
// (core/placement.h, by page index: kv_page_home). It decides which bytes
// are where; the offload engine moves them (offload/kv_staging.h) and keeps
// the pages living on disk in its file (offload/kv_file.h). The one
// bookkeeper of sequences and pages: the engine and the tests use it.
//
// A sequence's length counts the tokens whose slots are assigned: extend()
// makes room for new tokens and advances the length at once; the layers then
// write those slots (Backend::kv_append) before attention reads them.
//
// Life of a page whose home is disk:
//   - created by extend() for tokens that fill it completely (a prefill):
//     unbacked (no RAM in the pool) and *fresh*: in that step the engine
//     points each layer's entry at a staging record, the layer's kv_append
//     writes it there, attention reads it there, and the record is stored;
//   - created for tokens that fill it partly: backed (RAM in the pool) like
//     any RAM page, until an extend() completes it; then, in that step, each
//     layer's K and V are stored from RAM, and once every layer's store is
//     done the engine drops its storage (retire());
//   - in later steps it is unbacked and its layer-j record is loaded into a
//     staging record before layer j computes on its micro-batch.
// So the RAM a disk page costs is the staging of one micro-batch's disk
// pages of one layer (double-buffered), plus at most the one partial page of
// each sequence and the pages completed in the last step.
//
// Disk pages have a slot each (a record per layer in the engine's KV file).
// Slots are handed out in extents of disk_extent() consecutive slots, each
// extent owned by one sequence: a sequence's disk pages, in table order, take
// the next slots of its extent (a new extent when it is full), so the records
// of one layer of a sequence are a few large reads, whether the pages were
// completed by a prefill or one by one in decode. A sequence's extents return
// to the free list when it is removed.
//
// Prefix sharing: share_prefix() points a new sequence's first pages at
// another's full pages (a shared prompt prefix, computed once); a page
// counts the tables that hold it and is freed when the last one lets it go.
// Only full pages are shared, so nothing writes a shared page: each
// sequence writes only the pages after its shared prefix. A shared disk
// page keeps its slot, in the extent of the sequence that completed it:
// an extent goes back to the free list once its owner is removed and no
// page in use holds a slot in it.
//
// Invariants: a page is in the page tables of refs(page) >= 1 sequences,
// as the same index of each (a shared prefix); pages(seq) has
// page_size-ceil(length(seq)) entries; an unbacked page that is not fresh
// has every layer's record on disk (its stores were issued in the step that
// completed it, and the engine orders loads after stores); disk slots in use
// <= disk_slots().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/placement.h"
#include "kv/page_pool.h"

namespace strata {

// The home of page `page_index` of a sequence: page p lives in RAM (gpu or
// cpu) when floor((p+1) r) > floor(p r) for the RAM share r = gpu + cpu,
// else on disk; among RAM pages, on gpu when floor((p+1) g) > floor(p g) too.
// So of any sequence's first n pages exactly floor(n r) live in RAM (the disk
// pages are spread evenly, and every micro-batch holds the shares, whatever
// its lengths), at most floor(n g) of them on gpu. `placement` as folded for
// the device (Placement::folded).
Tier kv_page_home(const Placement& placement, int64_t page_index);

// What a block of sequences needs of the KV cache; its disk extent is
// kv_disk_extent_pages (core/kv_layout.h) for the most disk pages one of its
// sequences completes (so short sequences do not reserve long extents).
struct KvNeeds {
  int64_t backed_pages = 0;   // pool pages at the peak
  int64_t disk_pages = 0;     // disk slots, whole extents of disk_extent
  int64_t disk_extent = 1;    // slots per extent
  int64_t stage_records = 0;  // staging records of the largest micro-batch at one layer
};
// For micro-batches of sequences growing to `lengths[k][s]` tokens, fed
// up to `decode_tokens` tokens per decode step (1 + draft tokens: a step
// whose first token completes a disk page may open the next with drafts).
// `shared[k][s]` (empty: none): the first pages of the sequence that are
// another's (share_prefix), which it neither backs nor stores; its
// micro-batch still counts their staging records (an upper bound: a
// micro-batch stages a page its sequences share once). A sequence that
// takes another's disk pages holds extents for its own pages only; the
// pages it takes count in the extents of the sequence that holds them
// (their group's leader, or after a prefix kept across blocks the member
// that continues its extent, KvCache::continue_extent). `disk_extent`: the
// slots per extent, 0: kv_disk_extent_pages for the block's longest.
KvNeeds kv_block_needs(const KvGeometry& geometry, const Placement& placement,
                       const std::vector<std::vector<int64_t>>& lengths, int64_t decode_tokens = 1,
                       const std::vector<std::vector<int64_t>>& shared = {},
                       int64_t disk_extent = 0);

class KvCache {
 public:
  // `budget_bytes`: the pool's budget (backed pages); `placement` as folded
  // for the device (its KV shares give the pages' homes; the default keeps
  // every page in the pool). Throws Error as the pool does.
  KvCache(Backend& backend, const KvGeometry& geometry, uint64_t budget_bytes,
          const Placement& placement = Placement{});
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  PagePool& pool() { return pool_; }
  const PagePool& pool() const { return pool_; }
  const KvGeometry& geometry() const { return pool_.geometry(); }
  const Placement& placement() const { return placement_; }
  // True when the placement puts some pages on disk.
  bool any_disk() const { return placement_.disk(DataKind::kKv) > 1e-12; }

  // ---- sequences ----
  // A new, empty sequence; ids of removed sequences are reused.
  int32_t add_sequence();
  // Frees the sequence's pages and disk slots; its id becomes free.
  void remove_sequence(int32_t seq);
  int64_t n_sequences() const { return n_live_; }
  int64_t length(int32_t seq) const;
  std::span<const int32_t> pages(int32_t seq) const;  // the page table, in key order
  // Assigns slots to n_new more tokens in generation step `step` (pages as
  // described above; disk slots for pages that become full on disk); returns
  // the previous length (the position of the first new token). Error (from
  // the pool) when the budget is exhausted; the sequence is then unchanged.
  int64_t extend(int32_t seq, int64_t n_new, int32_t step = 0);
  // Takes back the last n_drop tokens' slots (speculative decoding's
  // rejected draft tokens): pages left empty return to the pool. The tokens
  // must not have completed a disk-homed page (its record is stored in the
  // step that completes it).
  void truncate(int32_t seq, int64_t n_drop);
  // Prefix sharing: `dst` (empty) takes `src`'s first `n_pages` pages, full
  // and (when on disk) completed in an earlier step, as its own first
  // pages: its length becomes n_pages * page_size, and it writes only what
  // it extends after them.
  void share_prefix(int32_t dst, int32_t src, int64_t n_pages);
  // Page tables that hold `page` (0 when it is free).
  int32_t refs(int32_t page) const;
  // Disk-homed pages the last extend() of `seq` completed (fresh unbacked
  // ones and backed ones), in table order: their records are stored in
  // this step.
  std::span<const int32_t> completed(int32_t seq) const;
  // Fresh: unbacked and created in generation step `step` (no record on
  // disk yet).
  bool fresh(int32_t page, int32_t step) const;
  // Sequence `seq`'s pages were created in an earlier block (a prefix kept
  // across blocks): none is fresh, whatever the step numbers of this block.
  void settle(int32_t seq);
  // `dst`, which just took `src`'s pages (share_prefix) and holds no disk
  // extent, takes over the extent of src's last disk page, if the sequence
  // that owned it is gone and it has room: dst's disk pages fill it on, so
  // the prefix and dst's own pages take the extents they would if dst had
  // completed them all (what kv_block_needs counts for a group's leader).
  void continue_extent(int32_t dst, int32_t src);
  // Whether a block of `needs` fits the disk slots as they are laid out
  // (set_disk_slots would change nothing): what a sequence kept across
  // blocks needs, its records staying where they are.
  bool disk_layout_holds(const KvNeeds& needs) const {
    return needs.disk_pages == 0 ||
           (needs.disk_extent == extent_ && needs.disk_pages <= slot_capacity_);
  }

  // What a block needs (kv_block_needs with this cache's geometry and placement).
  KvNeeds needs(const std::vector<std::vector<int64_t>>& lengths) const;

  // ---- disk slots ----
  // Makes `n` slots available in extents of `extent` slots (n a multiple
  // of it; no live sequence may hold a slot). Only grows the capacity; the
  // extent may change whenever no sequence is live.
  void set_disk_slots(int64_t n, int64_t extent = 1);
  int64_t disk_slots() const { return slot_capacity_; }
  int64_t disk_extent() const { return extent_; }
  // The slot of a disk page, -1 for none.
  int32_t disk_slot(int32_t page) const;

  // Pages whose storage may go once their stores are done: the caller marks
  // them with the number of their last store, and retire() drops the
  // storage of those whose number `done` has reached.
  void mark_retiring(int32_t page, uint64_t last_store);
  void retire(uint64_t done);
  int64_t n_retiring() const { return static_cast<int64_t>(retiring_.size()); }
  uint64_t retiring_until() const;  // the largest last-store number marked, 0 for none

 private:
  struct Seq {
    bool live = false;
    int64_t length = 0;
    std::vector<int32_t> pages;
    std::vector<int32_t> completed;
    std::vector<int32_t> extents;  // first slot of each disk extent it owns
    int32_t extent_used = 0;       // slots taken of the last extent
  };
  Seq& get(int32_t seq);
  const Seq& get(int32_t seq) const;
  int32_t take_disk_slot(Seq& s);
  // Lets one page table's hold on `page` go; frees it with the last.
  void free_page(int32_t page);
  // The extent of `slot` loses a page; it goes back to the free list when
  // that was its last and its owner is gone.
  void release_slot(int32_t slot);

  PagePool pool_;
  Placement placement_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_ids_;
  int64_t n_live_ = 0;
  // Per page id (grown with the pool's capacity).
  std::vector<int32_t> slot_of_;  // disk slot, -1 for none
  std::vector<int32_t> created_;  // generation step an unbacked page was created in, -1 otherwise
  std::vector<int32_t> refs_;     // page tables holding the page
  struct Retiring {
    int32_t page;
    uint64_t last_store;
  };
  std::vector<Retiring> retiring_;
  int64_t slot_capacity_ = 0;
  int64_t extent_ = 1;
  std::vector<int32_t> free_extents_;  // first slots
  // Per extent (first slot / extent): pages in use holding a slot in it,
  // and 1 once its owner is removed while some still do.
  std::vector<int32_t> extent_pages_;
  std::vector<uint8_t> extent_orphan_;
};

}  // namespace strata
