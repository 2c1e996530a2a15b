// The KV cache of the offload engine: one page table per sequence over the
// PagePool (kv/page_pool.h), a home tier for each page from the placement
// (offload/placement.h: by page index), and the file that holds the pages
// living on disk. It decides which bytes are where; the engine moves them.
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
// File layout: one record per (layer, disk slot), [n_layer][slot_capacity]
// records of record_bytes() = 2 page_bytes rounded up to kDiskAlign, K
// first then V, so a page's layer is one O_DIRECT read and the pages of one
// layer with consecutive slots are one read. A sequence's disk pages created
// together get consecutive slots. The file is created in the offload
// directory and unlinked at once: it never outlives the process.
//
// Invariants: a page is in at most one table (no prefix sharing here); an
// unbacked page that is not fresh has every layer's record on disk (its
// stores were issued in the step that completed it, and loads are ordered
// after stores by the engine); disk slots in use <= slot_capacity.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/page_pool.h"
#include "offload/disk_engine.h"
#include "offload/placement.h"

namespace strata {

class KvStore {
 public:
  // `budget_bytes`: the pool's budget (backed pages); `placement` as folded
  // for the device. Throws Error as the pool does.
  KvStore(Backend& backend, const KvGeometry& geometry, uint64_t budget_bytes,
          const Placement& placement);
  ~KvStore();
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  PagePool& pool() { return pool_; }
  const PagePool& pool() const { return pool_; }
  const KvGeometry& geometry() const { return pool_.geometry(); }
  // True when the placement puts some pages on disk.
  bool any_disk() const { return f_.disk(DataKind::kKv) > 1e-12; }
  Tier home_of_index(int64_t page_index) const { return kv_page_home(f_, page_index); }

  // ---- sequences ----
  int32_t add_sequence();
  void remove_sequence(int32_t seq);  // releases its pages and disk slots
  int64_t n_sequences() const { return n_live_; }
  int64_t length(int32_t seq) const;
  std::span<const int32_t> pages(int32_t seq) const;
  // Assigns slots to n_new more tokens in generation step `step` (pages as
  // described above; disk slots for pages that become full on disk); returns
  // the previous length. Error (from the pool) when the budget is exhausted;
  // the sequence is then unchanged.
  int64_t extend(int32_t seq, int64_t n_new, int32_t step);
  // Disk-homed pages the last extend() of `seq` completed (fresh unbacked
  // ones and backed ones), in table order: their records are stored in
  // this step.
  std::span<const int32_t> completed(int32_t seq) const;

  // ---- what a block needs ----
  struct Needs {
    int64_t backed_pages = 0;   // pool pages at the peak
    int64_t disk_pages = 0;     // disk slots
    int64_t stage_records = 0;  // staging records of the largest micro-batch at one layer
  };
  // For micro-batches of sequences growing to `lengths[k][s]` tokens.
  Needs needs(const std::vector<std::vector<int64_t>>& lengths) const;

  // ---- the disk file ----
  // Creates (or grows) the file in `dir` for `disk_pages` slots; a no-op when
  // nothing lives on disk. Throws Error naming the directory when it cannot
  // be created or sized (a full disk shows here, before any work).
  void prepare_file(const std::string& dir, int64_t disk_pages);
  const DiskFile& file() const { return file_; }
  uint64_t file_bytes() const;
  uint64_t record_bytes() const { return record_bytes_; }
  uint64_t record_offset(int64_t layer, int32_t slot) const;
  int32_t disk_slot(int32_t page) const;
  // Fresh: unbacked and created in generation step `step` (no record on
  // disk yet).
  bool fresh(int32_t page, int32_t step) const;

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
  };
  Seq& get(int32_t seq);
  const Seq& get(int32_t seq) const;
  int32_t take_disk_slot();
  void release_page(int32_t page);

  PagePool pool_;
  Placement f_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_ids_;
  int64_t n_live_ = 0;
  // Per page id (grown with the pool's capacity).
  std::vector<int32_t> slot_of_;   // disk slot, -1 for none
  std::vector<int32_t> created_;   // generation step an unbacked page was created in, -1 otherwise
  struct Retiring {
    int32_t page;
    uint64_t last_store;
  };
  std::vector<Retiring> retiring_;
  // Disk.
  DiskFile file_;
  uint64_t record_bytes_ = 0;
  int64_t slot_capacity_ = 0;
  std::vector<int32_t> free_slots_;
};

}  // namespace strata
