#include "kv/page_pool.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/kv_layout.h"
#include "core/log.h"
#include "core/units.h"

namespace strata {

namespace {

constexpr int64_t kMinGrowPages = 64;

}  // namespace

uint64_t KvGeometry::page_bytes() const {
  return kv_page_bytes(dtype, page_size, n_kv_head, head_dim);  // core/kv_layout.h
}

uint64_t KvGeometry::bytes_per_page() const {
  const uint64_t minmax = 2 * static_cast<uint64_t>(row()) * sizeof(float);
  return static_cast<uint64_t>(n_layer) * (2 * page_bytes() + minmax);
}

PagePool::PagePool(Backend& backend, const KvGeometry& geometry, uint64_t budget_bytes)
    : backend_(backend), g_(geometry), budget_(budget_bytes) {
  if (g_.dtype != DType::kF32 && g_.dtype != DType::kF16 && g_.dtype != DType::kBF16 &&
      !is_quantized(g_.dtype)) {
    fail("KV cache dtype {} is not supported; use f32, f16, bf16 or a q4/q8 format",
         dtype_name(g_.dtype));
  }
  if (g_.n_layer < 1 || g_.n_kv_head < 1 || g_.head_dim < 1) {
    fail("KV cache geometry {} layers x {} kv heads x {} dims is not valid", g_.n_layer,
         g_.n_kv_head, g_.head_dim);
  }
  if (is_quantized(g_.dtype) && !row_elems_ok(g_.dtype, g_.head_dim)) {
    std::string groups;
    for (int group : {32, 64, 128}) {
      if (g_.head_dim % group == 0) groups += fmt::format("{}{}", groups.empty() ? "" : ", ", group);
    }
    fail(
        "KV cache dtype {} quantizes groups of {} values along head_dim, but the model's head_dim "
        "is {}; {}",
        dtype_name(g_.dtype), dtype_info(g_.dtype).block_elems, g_.head_dim,
        groups.empty() ? "no KV group fits it: store the KV cache uncompressed"
                       : "use --kv-group " + groups + " or no KV compression");
  }
  if (g_.page_size < 1 || g_.page_size > 4096) {
    fail("KV page size {} is not allowed; use 1 to 4096 tokens (16 is the default)", g_.page_size);
  }
  const uint64_t per_page = g_.bytes_per_page();
  max_pages_ = static_cast<int64_t>(
      std::min<uint64_t>(budget_ / per_page, static_cast<uint64_t>(INT32_MAX)));
  if (max_pages_ < 1) {
    fail(
        "KV cache budget {} holds no page (one page of {} tokens takes {} over {} layers); raise "
        "the KV budget",
        format_bytes(static_cast<double>(budget_)), g_.page_size,
        format_bytes(static_cast<double>(per_page)), g_.n_layer);
  }
  layers_.resize(static_cast<size_t>(g_.n_layer));
}

PagePool::~PagePool() = default;

void PagePool::set_budget(uint64_t budget_bytes) {
  const uint64_t per_page = g_.bytes_per_page();
  const int64_t max_pages = static_cast<int64_t>(
      std::min<uint64_t>(budget_bytes / per_page, static_cast<uint64_t>(INT32_MAX)));
  if (max_pages < 1 || max_pages < n_used_) {
    fail("KV cache budget {} holds {} pages of {} tokens; {} are in use; raise the KV budget",
         format_bytes(static_cast<double>(budget_bytes)), max_pages, g_.page_size,
         std::max<int64_t>(n_used_, 1));
  }
  budget_ = budget_bytes;
  max_pages_ = max_pages;
}

void PagePool::check_id(int32_t page) const {
  STRATA_ASSERT_MSG(page >= 0 && page < capacity_, "page id {} outside [0, {})", page, capacity_);
}

int64_t PagePool::grow_ids(int64_t min_capacity) {
  const int64_t old_cap = capacity_;
  const int64_t new_cap = std::min<int64_t>(
      INT32_MAX, std::max({min_capacity, 2 * old_cap, old_cap + kMinGrowPages}));
  STRATA_ASSERT_MSG(new_cap > old_cap, "KV page ids exhausted at {}", old_cap);
  const int64_t row = g_.row();
  const bool host = backend_.memory_is_host();
  for (int64_t l = 0; l < g_.n_layer; ++l) {
    LayerArrays& a = layers_[static_cast<size_t>(l)];
    a.k_host.resize(static_cast<size_t>(new_cap), nullptr);
    a.v_host.resize(static_cast<size_t>(new_cap), nullptr);
    if (!host) {
      DeviceBuffer k_ptrs = backend_.alloc(static_cast<size_t>(new_cap) * sizeof(void*));
      DeviceBuffer v_ptrs = backend_.alloc(static_cast<size_t>(new_cap) * sizeof(void*));
      backend_.copy_to_device(k_ptrs.data(), a.k_host.data(), k_ptrs.size());
      backend_.copy_to_device(v_ptrs.data(), a.v_host.data(), v_ptrs.size());
      a.k_ptrs = std::move(k_ptrs);
      a.v_ptrs = std::move(v_ptrs);
    }
    const size_t mm_bytes = static_cast<size_t>(new_cap * row) * sizeof(float);
    DeviceBuffer k_min = backend_.alloc(mm_bytes);
    DeviceBuffer k_max = backend_.alloc(mm_bytes);
    backend_.fill_zero(k_min.data(), mm_bytes);
    backend_.fill_zero(k_max.data(), mm_bytes);
    if (old_cap > 0) {
      const size_t old_bytes = static_cast<size_t>(old_cap * row) * sizeof(float);
      backend_.copy(k_min.data(), a.k_min.data(), old_bytes);
      backend_.copy(k_max.data(), a.k_max.data(), old_bytes);
    }
    a.k_min = std::move(k_min);
    a.k_max = std::move(k_max);
  }
  in_use_.resize(static_cast<size_t>(new_cap), 0);
  slot_.resize(static_cast<size_t>(new_cap), -1);
  // Called with no free id left; the new ids go out lowest first.
  for (int64_t p = new_cap - 1; p >= old_cap; --p) free_.push_back(static_cast<int32_t>(p));
  capacity_ = new_cap;
  return new_cap - old_cap;
}

void PagePool::add_slots(int64_t n) {
  STRATA_ASSERT(n >= 1 && n_slots_ + n <= max_pages_);
  const uint64_t pb = g_.page_bytes();
  DeviceBuffer slab = backend_.alloc(static_cast<size_t>(g_.n_layer) * 2 * n * pb);
  char* base = slab.as<char>();
  for (int64_t l = 0; l < g_.n_layer; ++l) {
    LayerArrays& a = layers_[static_cast<size_t>(l)];
    char* k_base = base + (static_cast<uint64_t>(l) * 2 * n) * pb;
    char* v_base = k_base + n * pb;
    for (int64_t s = 0; s < n; ++s) {
      a.k_slot.push_back(k_base + s * pb);
      a.v_slot.push_back(v_base + s * pb);
    }
  }
  slabs_.push_back(std::move(slab));
  for (int64_t s = n_slots_ + n - 1; s >= n_slots_; --s) spare_.push_back(static_cast<int32_t>(s));
  n_slots_ += n;
  spdlog::debug("kv: pool storage grown to {} pages ({} of the {} budget)", n_slots_,
                format_bytes(static_cast<double>(storage_bytes())),
                format_bytes(static_cast<double>(budget_)));
}

void PagePool::set_entry(int64_t l, int32_t page, void* k, void* v) {
  LayerArrays& a = layers_[static_cast<size_t>(l)];
  a.k_host[static_cast<size_t>(page)] = k;
  a.v_host[static_cast<size_t>(page)] = v;
  if (!backend_.memory_is_host()) {
    backend_.copy_to_device(a.k_ptrs.as<void*>() + page, &a.k_host[static_cast<size_t>(page)],
                            sizeof(void*));
    backend_.copy_to_device(a.v_ptrs.as<void*>() + page, &a.v_host[static_cast<size_t>(page)],
                            sizeof(void*));
  }
}

void PagePool::attach(int32_t page, int32_t slot) {
  STRATA_ASSERT(slot_[static_cast<size_t>(page)] < 0);
  slot_[static_cast<size_t>(page)] = slot;
  for (int64_t l = 0; l < g_.n_layer; ++l) {
    const LayerArrays& a = layers_[static_cast<size_t>(l)];
    set_entry(l, page, a.k_slot[static_cast<size_t>(slot)], a.v_slot[static_cast<size_t>(slot)]);
  }
}

int32_t PagePool::detach(int32_t page) {
  const int32_t slot = slot_[static_cast<size_t>(page)];
  STRATA_ASSERT(slot >= 0);
  slot_[static_cast<size_t>(page)] = -1;
  for (int64_t l = 0; l < g_.n_layer; ++l) set_entry(l, page, nullptr, nullptr);
  return slot;
}

// A storage slot for a page about to be backed: a spare one, a new one while
// the budget allows, else one held by a free id.
int32_t PagePool::take_slot() {
  if (spare_.empty() && n_slots_ < max_pages_) {
    add_slots(std::min(max_pages_ - n_slots_, std::max<int64_t>(n_slots_, kMinGrowPages)));
  }
  if (spare_.empty()) {
    for (int32_t id : free_) {
      if (slot_[static_cast<size_t>(id)] >= 0) {
        spare_.push_back(detach(id));
        break;
      }
    }
  }
  STRATA_ASSERT_MSG(!spare_.empty(), "no KV storage slot left with {} of {} pages in use", n_used_,
                    max_pages_);
  const int32_t slot = spare_.back();
  spare_.pop_back();
  return slot;
}

int32_t PagePool::allocate() {
  if (n_used_ >= max_pages_) {
    fail(
        "KV cache budget {} holds {} pages of {} tokens and all are in use; lower the batch size "
        "or raise the KV budget",
        format_bytes(static_cast<double>(budget_)), max_pages_, g_.page_size);
  }
  if (free_.empty()) {
    // New ids come with storage of their own while the budget allows, so a
    // pool of backed pages keeps one slot per id.
    const int64_t old_cap = capacity_;
    const int64_t n = grow_ids(capacity_ + 1);
    const int64_t n_with = std::min(n, max_pages_ - n_slots_);
    if (n_with > 0) {
      add_slots(n_with);
      for (int64_t i = 0; i < n_with; ++i) {
        attach(static_cast<int32_t>(old_cap + i), spare_.back());
        spare_.pop_back();
      }
    }
  }
  const int32_t page = free_.back();
  free_.pop_back();
  if (slot_[static_cast<size_t>(page)] < 0) attach(page, take_slot());
  in_use_[static_cast<size_t>(page)] = 1;
  ++n_used_;
  peak_used_ = std::max(peak_used_, n_used_);
  return page;
}

int32_t PagePool::allocate_unbacked() {
  if (free_.empty()) grow_ids(capacity_ + 1);
  const int32_t page = free_.back();
  free_.pop_back();
  if (slot_[static_cast<size_t>(page)] >= 0) spare_.push_back(detach(page));
  in_use_[static_cast<size_t>(page)] = 1;
  ++n_unbacked_;
  return page;
}

void PagePool::drop_storage(int32_t page) {
  check_id(page);
  STRATA_ASSERT_MSG(in_use_[static_cast<size_t>(page)], "drop_storage of free page {}", page);
  spare_.push_back(detach(page));
  --n_used_;
  ++n_unbacked_;
}

bool PagePool::backed(int32_t page) const {
  check_id(page);
  return slot_[static_cast<size_t>(page)] >= 0;
}

void PagePool::stage(int64_t l, int32_t page, void* k, void* v) {
  check_id(page);
  STRATA_ASSERT(l >= 0 && l < g_.n_layer);
  STRATA_ASSERT_MSG(slot_[static_cast<size_t>(page)] < 0, "stage() of page {} that has storage",
                    page);
  set_entry(l, page, k, v);
}

void PagePool::free(int32_t page) {
  check_id(page);
  uint8_t& used = in_use_[static_cast<size_t>(page)];
  STRATA_ASSERT_MSG(used, "free of free page {}", page);
  used = 0;
  free_.push_back(page);
  if (slot_[static_cast<size_t>(page)] >= 0) {
    --n_used_;
  } else {
    --n_unbacked_;
  }
}

std::pair<void*, void*> PagePool::entry(int64_t l, int32_t page) const {
  STRATA_ASSERT(l >= 0 && l < g_.n_layer);
  check_id(page);
  const LayerArrays& a = layers_[static_cast<size_t>(l)];
  return {a.k_host[static_cast<size_t>(page)], a.v_host[static_cast<size_t>(page)]};
}

KvLayer PagePool::layer(int64_t l) const {
  STRATA_ASSERT(l >= 0 && l < g_.n_layer);
  const LayerArrays& a = layers_[static_cast<size_t>(l)];
  KvLayer v;
  // On host memory the host mirror is the array the ops read.
  const bool host = backend_.memory_is_host();
  v.k_pages = host ? a.k_host.data() : a.k_ptrs.as<void* const>();
  v.v_pages = host ? a.v_host.data() : a.v_ptrs.as<void* const>();
  v.k_min = a.k_min.as<float>();
  v.k_max = a.k_max.as<float>();
  v.n_pages = capacity_;
  v.dtype = g_.dtype;
  v.page_size = g_.page_size;
  v.n_kv_head = g_.n_kv_head;
  v.head_dim = g_.head_dim;
  return v;
}

}  // namespace strata
