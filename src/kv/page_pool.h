// The KV cache's page pool: a byte budget cut into pages of page_size tokens.
// A page id names the same page in every layer: page p of layer l is K at
// k_pages_l[p] and V at v_pages_l[p], each [page_size, n_kv_head, head_dim]
// in the kv dtype (the layout of kernels/cpu/attention.h), with the key
// min/max of the page at k_min_l/k_max_l + p * n_kv_head * head_dim (f32).
// A quantized kv dtype stores each token's row of each kv head as head_dim /
// G blocks (kernels/cpu/attention_quant.h; G must divide head_dim), and page
// sizes, the budget and peak bytes count those compressed bytes; the key
// min/max stay f32, taken from the keys before quantization.
//
// Storage is device memory from the Backend, allocated on demand in slabs
// (capacity doubles, never beyond the budget); pages are handed out from a
// free list and return to it when freed. A page belongs to one sequence
// (the KV cache's page tables, kv/kv_cache.h); nothing here is shared.
//
// A page may also exist without storage in the pool (allocate_unbacked,
// drop_storage): its home is then the disk and its bytes live in a file of
// the offload engine (offload/kv_file.h), which points the page's entry of
// one layer at staging memory (stage()) before an op reads or writes it.
// Such a page keeps its id, table entries and key min/max (f32, in the pool:
// 1/page_size of its bytes) but costs no budget; the budget counts the
// storage of backed pages only.
//
// Invariants: a page id in use is in [0, capacity()); n_used() (backed
// pages in use) <= max_pages(); storage bytes never exceed the budget.
// Growing the pool reallocates the page pointer and min/max arrays, so
// KvLayer views taken before an allocate() are stale after it: take views
// after the step's allocations.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"

namespace strata {

struct KvGeometry {
  int64_t n_layer = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kF32;  // f32, f16, bf16 or quantized (group dividing head_dim)
  int64_t page_size = 16;

  int64_t row() const { return n_kv_head * head_dim; }  // elements of one token's K (or V)
  // Bytes of one K (or V) page of one layer, in the stored (compressed) form.
  uint64_t page_bytes() const;
  // Bytes one page id costs over all layers: K + V pages and the key min/max.
  uint64_t bytes_per_page() const;
  // Pages that hold n_tokens tokens.
  int64_t pages_for(int64_t n_tokens) const { return (n_tokens + page_size - 1) / page_size; }
};

class PagePool {
 public:
  // Throws Error when the geometry is invalid or the budget holds no page.
  PagePool(Backend& backend, const KvGeometry& geometry, uint64_t budget_bytes);
  ~PagePool();
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  const KvGeometry& geometry() const { return g_; }
  uint64_t budget_bytes() const { return budget_; }
  int64_t max_pages() const { return max_pages_; }  // pages the budget holds
  int64_t capacity() const { return capacity_; }    // page ids with arrays now
  int64_t n_used() const { return n_used_; }        // backed pages in use
  int64_t n_unbacked() const { return n_unbacked_; }  // pages in use without storage
  int64_t n_free() const { return max_pages_ - n_used_; }
  int64_t peak_used() const { return peak_used_; }
  // Bytes of the pages in use at the peak, and of the storage allocated now.
  uint64_t peak_bytes() const { return static_cast<uint64_t>(peak_used_) * g_.bytes_per_page(); }
  uint64_t storage_bytes() const { return static_cast<uint64_t>(n_slots_) * g_.bytes_per_page(); }
  void reset_peak() { peak_used_ = n_used_; }
  // A new budget for backed pages (storage already allocated is kept);
  // Error when the pages in use need more or it holds no page.
  void set_budget(uint64_t budget_bytes);

  // A page now in use, with storage; its min/max not yet meaningful.
  // Throws Error naming the budget when every page the budget holds is in use.
  int32_t allocate();
  // Returns a page in use (backed or not) to the free list.
  void free(int32_t page);

  // A page in use without storage in the pool: its bytes live elsewhere (a
  // file of the offload engine), entries null until stage(). Costs no budget.
  int32_t allocate_unbacked();
  // Gives the storage of a backed page in use back to the pool (its bytes
  // now live elsewhere): it becomes unbacked, entries null.
  void drop_storage(int32_t page);
  bool backed(int32_t page) const;
  // Points layer l's entry of an unbacked page at K and V memory of the
  // backend (page_bytes() each), e.g. a staging buffer a page was read into.
  void stage(int64_t l, int32_t page, void* k, void* v);

  // Layer l's view (device pointers), valid until the next allocate().
  KvLayer layer(int64_t l) const;
  // Where layer l's K and V of `page` are (device pointers, null when
  // unbacked and not staged), read from the host mirror: for host code that
  // moves pages (a view's page arrays are device memory, not for the host).
  std::pair<void*, void*> entry(int64_t l, int32_t page) const;

 private:
  // More page ids (arrays only), the new ones free; returns how many.
  int64_t grow_ids(int64_t min_capacity);
  // n more storage slots (one page of every layer each), spare.
  void add_slots(int64_t n);
  void attach(int32_t page, int32_t slot);
  int32_t detach(int32_t page);  // returns the slot
  void set_entry(int64_t l, int32_t page, void* k, void* v);
  int32_t take_slot();
  void check_id(int32_t page) const;

  Backend& backend_;
  KvGeometry g_;
  uint64_t budget_ = 0;
  int64_t max_pages_ = 0;
  int64_t capacity_ = 0;
  int64_t n_used_ = 0;
  int64_t n_unbacked_ = 0;
  int64_t peak_used_ = 0;
  int64_t n_slots_ = 0;

  std::vector<DeviceBuffer> slabs_;  // slot storage: [layer][K, V][slots of the slab][page_bytes]
  struct LayerArrays {
    std::vector<void*> k_host, v_host;  // [capacity] page pointers (host mirror)
    DeviceBuffer k_ptrs, v_ptrs;        // [capacity] the same, on the device (not host memory)
    DeviceBuffer k_min, k_max;          // [capacity, row] f32
    std::vector<void*> k_slot, v_slot;  // [n_slots] where each storage slot's pages are
  };
  std::vector<LayerArrays> layers_;
  std::vector<uint8_t> in_use_;  // [capacity] 1 while the page is handed out
  std::vector<int32_t> slot_;   // [capacity] storage slot of each id, -1 for none
  std::vector<int32_t> free_;   // free page ids; the last one goes out next
  std::vector<int32_t> spare_;  // storage slots held by no id
};

}  // namespace strata
