// KV staging: the KV pages homed on disk (kv/kv_cache.h) brought to where
// attention reads them, and written back, around each layer compute of each
// micro-batch. For a generation step, a micro-batch's plan lists its
// sequences' unbacked pages, each with a record in a staging buffer (those
// not fresh are loaded from the KV file, offload/kv_file.h, before the
// layer; fresh ones are written by the layer's KV append and stored after
// it), and its backed disk pages completed in this step (stored from the
// pool after each layer, then retired: their storage goes once the last
// layer's stores are out).
//
// Two staging buffers serve consecutive layer computes that stage KV (in
// schedule order, across steps, skipping micro-batches with nothing live):
// a new compute takes over the older one's buffer, only once the stores
// from it are out and the CPU attention that read it is done. Records whose
// disk slots are consecutive move in one request. Records live in host RAM
// when the KV cache does (MemoryMode kHostMemory, kCpuAttention), else in
// device memory with a host mirror of each buffer that relays the disk reads
// and writes at the same offsets (pinned on a GPU).
//
// Sparse decode attention (model/forward.h): from kSparseFirstLayer on, a
// sequence that attends only to the pages it selects has only those read.
// The selection needs the layer's query, so the load ahead of the layer
// prefetches the pages the sequence selected at this layer in the last step;
// when the selection is made (the listener of its micro-batch), the selected
// pages not prefetched are read at once and the compute waits for them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/backend.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "offload/kv_file.h"
#include "offload/memory_mode.h"
#include "offload/tier_pool.h"
#include "offload/transfer.h"

namespace strata {

class CpuAttention;
class Executor;
class KvCache;

class KvStaging {
 public:
  // `device`: the backend whose memory holds the records when the KV cache
  // is in device memory. `attention` (null without CPU attention): waited
  // for before a buffer it reads is reused or stored from.
  KvStaging(KvCache& kv, MemoryMode mode, Backend& device, TierPool& ram, int64_t n_micro_batches,
            CpuAttention* attention);
  ~KvStaging();

  const KvFile& file() const { return file_; }
  // Frees the staging buffers (before a block's memory is counted again).
  void release();
  // For a block that needs `needs`: staging buffers of its stage_records
  // records each, and the KV file grown to its disk_pages slots per layer in
  // `dir` (the slots handed to the cache in its extents). Returns the file's
  // bytes.
  uint64_t prepare(const KvNeeds& needs, const std::string& dir);

  // Micro-batch k's plan for generation step `step`, from its live KV
  // sequences (after their extend for the step); `sparse` [n sequences]: 1
  // where the sequence's attention is sparse (BlockState::sparse_members).
  void plan(int64_t k, std::span<const int32_t> kv_sequences, std::span<const uint8_t> sparse,
            int32_t step);

  // The listener micro-batch k's groups carry (MicroBatch::on_selected).
  SelectionListener* listener(int64_t k) { return &listeners_[static_cast<size_t>(k)]; }

  // Sparse attention's disk pages so far: selected pages found prefetched
  // (hits) and read after the selection (misses), pages prefetched that no
  // selection took, and the time compute waited for the misses.
  struct SparseReads {
    uint64_t hits = 0, misses = 0, unused = 0;
    double stall_s = 0;
  };
  const SparseReads& sparse_reads() const { return sparse_reads_; }

  // Transfers of layer `layer` for micro-batch k in generation step `step`:
  // loads the records not fresh; points the pool's entries of the planned
  // pages at their records (waiting for the load); stores fresh records and
  // completed backed pages.
  void load(int64_t layer, int64_t k, int32_t step, Executor& exec);
  void stage(int64_t layer, int64_t k, int32_t step, Executor& exec);
  void store(int64_t layer, int64_t k, int32_t step, Executor& exec);

  // At the start of a step: disk pages completed in the last step leave
  // RAM once their stores are out.
  void retire(Executor& exec);
  // Before pages are freed: their stores may still read their RAM.
  void wait_retiring(Executor& exec);

 private:
  // A staging buffer: which layer compute it serves, the load that fills
  // it, and the last store reading from it.
  struct Slot {
    int64_t order = -1;  // the compute's place in schedule order; -1: none yet
    int64_t layer = -1, micro_batch = -1;
    uint64_t load = 0, last_store = 0;
    PoolBlock host;               // the records (host KV), or their relay
    DeviceBuffer dev;             // the records in device memory (device KV)
    std::vector<uint8_t> loaded;  // [n_records] read or fresh (sparse layers read some)
  };
  struct Plan {
    std::vector<int32_t> pages;      // [n_records] in record order
    std::vector<uint8_t> fresh;      // [n_records]
    std::vector<uint8_t> selective;  // [n_records] of a sequence whose attention is sparse
    std::unordered_map<int32_t, int32_t> record_of;  // page -> record, selective ones
    std::vector<int32_t> completed_backed;
  };
  class Listener final : public SelectionListener {
   public:
    Listener(KvStaging* staging, int64_t k) : staging_(staging), k_(k) {}
    void selected(int64_t layer, const MicroBatch& mb) override {
      staging_->fetch_selected(layer, k_, mb);
    }

   private:
    KvStaging* staging_;
    int64_t k_;
  };

  // Reads the pages of micro-batch k's selections at `layer` not yet in
  // its staging buffer, waits for them, and remembers the selections for
  // the next step's prefetch.
  void fetch_selected(int64_t layer, int64_t k, const MicroBatch& mb);
  // Whether the load ahead of `layer` reads record r of plan p.
  bool prefetch(const Plan& p, size_t r, int64_t layer) const;
  // The end of the run of records to read from record r (wanted): the
  // records after it with consecutive disk slots up to the last wanted one,
  // bridging gaps of up to kReadGapRecords records not wanted (read for
  // nothing, to save requests; not over a fresh record, which its layer
  // writes). Sparse attention's selections leave such gaps: at context
  // 4096, batch 8, budget 512 (README, "Sparse attention"), bridging 4
  // reads a third more bytes in fewer, larger requests, and the pages read
  // so raise the share of selected pages prefetched from 82 % to 86.5 %.
  static constexpr size_t kReadGapRecords = 4;
  template <typename Want>
  size_t run_end(const Plan& p, size_t r, Want want) const;
  // Reads the records [r, e) of plan p (consecutive disk slots) into `slot`
  // on `queue`.
  uint64_t read_records(Slot& slot, const Plan& p, size_t r, size_t e, int64_t layer, int64_t k,
                        int32_t step, Executor& exec, TransferQueue& queue);

  Slot& slot_for(int64_t layer, int64_t k, int32_t step, Executor& exec);
  std::byte* record(const Slot& s, size_t r) const;
  std::byte* relay(const Slot& s, size_t r) const;  // null when records are host memory
  Place place(void* p) const;
  void wait_attention(int64_t layer, int64_t k) const;

  KvCache& kv_;
  MemoryMode mode_;
  Backend& device_;
  TierPool& ram_;
  int64_t n_mb_;
  CpuAttention* attention_;
  KvFile file_;
  std::array<Slot, 2> slots_;
  std::vector<Plan> plans_;  // [n_mb]
  // [n_layer * n_mb] the last store of each layer's KV of each micro-batch:
  // a load of those records waits for it (the queues are separate).
  std::vector<uint64_t> last_store_;
  std::vector<Listener> listeners_;  // [n_mb]
  // [n_layer][page id] selected at that layer in its last sparse step.
  std::vector<std::vector<uint8_t>> selected_;
  SparseReads sparse_reads_;
  // Where the layer being computed stands (set by stage()).
  Executor* exec_ = nullptr;
  int32_t step_ = -1;
};

}  // namespace strata
