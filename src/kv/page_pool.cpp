#include "kv/page_pool.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace strata {

namespace {

constexpr int64_t kMinGrowPages = 64;

uint64_t elem_bytes(DType t) {
  return t == DType::kF32 ? 4 : 2;
}

}  // namespace

std::string_view page_tier_name(PageTier t) {
  switch (t) {
    case PageTier::kGpu:
      return "gpu";
    case PageTier::kCpu:
      return "cpu";
    case PageTier::kDisk:
      return "disk";
  }
  return "unknown";
}

uint64_t KvGeometry::page_bytes() const {
  return static_cast<uint64_t>(page_size) * static_cast<uint64_t>(row()) * elem_bytes(dtype);
}

uint64_t KvGeometry::bytes_per_page() const {
  const uint64_t minmax = 2 * static_cast<uint64_t>(row()) * sizeof(float);
  return static_cast<uint64_t>(n_layer) * (2 * page_bytes() + minmax);
}

PagePool::PagePool(Backend& backend, const KvGeometry& geometry, uint64_t budget_bytes)
    : backend_(backend), g_(geometry), budget_(budget_bytes) {
  if (g_.dtype != DType::kF32 && g_.dtype != DType::kF16 && g_.dtype != DType::kBF16) {
    fail("KV cache dtype {} is not supported; use f32, f16 or bf16", dtype_name(g_.dtype));
  }
  if (g_.n_layer < 1 || g_.n_kv_head < 1 || g_.head_dim < 1) {
    fail("KV cache geometry {} layers x {} kv heads x {} dims is not valid", g_.n_layer,
         g_.n_kv_head, g_.head_dim);
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
  default_home_ = backend_.memory_is_host() ? PageTier::kCpu : PageTier::kGpu;
  layers_.resize(static_cast<size_t>(g_.n_layer));
}

PagePool::~PagePool() = default;

void PagePool::check_id(int32_t page) const {
  STRATA_ASSERT_MSG(page >= 0 && page < capacity_, "page id {} outside [0, {})", page, capacity_);
}

void PagePool::grow(int64_t min_capacity) {
  STRATA_ASSERT(min_capacity <= max_pages_);
  const int64_t old_cap = capacity_;
  const int64_t new_cap =
      std::min(max_pages_, std::max({min_capacity, 2 * old_cap, old_cap + kMinGrowPages}));
  const int64_t n_new = new_cap - old_cap;
  const uint64_t pb = g_.page_bytes();
  const int64_t row = g_.row();

  DeviceBuffer slab = backend_.alloc(static_cast<size_t>(g_.n_layer) * 2 * n_new * pb);
  char* base = slab.as<char>();
  for (int64_t l = 0; l < g_.n_layer; ++l) {
    LayerArrays& a = layers_[static_cast<size_t>(l)];
    char* k_base = base + (static_cast<uint64_t>(l) * 2 * n_new) * pb;
    char* v_base = k_base + n_new * pb;
    a.k_host.resize(static_cast<size_t>(new_cap));
    a.v_host.resize(static_cast<size_t>(new_cap));
    for (int64_t p = 0; p < n_new; ++p) {
      a.k_host[static_cast<size_t>(old_cap + p)] = k_base + p * pb;
      a.v_host[static_cast<size_t>(old_cap + p)] = v_base + p * pb;
    }
    DeviceBuffer k_ptrs = backend_.alloc(static_cast<size_t>(new_cap) * sizeof(void*));
    DeviceBuffer v_ptrs = backend_.alloc(static_cast<size_t>(new_cap) * sizeof(void*));
    backend_.copy_to_device(k_ptrs.data(), a.k_host.data(), k_ptrs.size());
    backend_.copy_to_device(v_ptrs.data(), a.v_host.data(), v_ptrs.size());
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
    a.k_ptrs = std::move(k_ptrs);
    a.v_ptrs = std::move(v_ptrs);
    a.k_min = std::move(k_min);
    a.k_max = std::move(k_max);
  }
  slabs_.push_back(std::move(slab));
  refs_.resize(static_cast<size_t>(new_cap), 0);
  home_.resize(static_cast<size_t>(new_cap), default_home_);
  // Called with no free page left; the new ids go out lowest first.
  for (int64_t p = new_cap - 1; p >= old_cap; --p) free_.push_back(static_cast<int32_t>(p));
  capacity_ = new_cap;
  spdlog::debug("kv: pool grown to {} pages ({} of the {} budget)", capacity_,
                format_bytes(static_cast<double>(storage_bytes())),
                format_bytes(static_cast<double>(budget_)));
}

int32_t PagePool::allocate() {
  if (n_used_ >= max_pages_) {
    fail(
        "KV cache budget {} holds {} pages of {} tokens and all are in use; lower the batch size "
        "or raise the KV budget",
        format_bytes(static_cast<double>(budget_)), max_pages_, g_.page_size);
  }
  if (free_.empty()) grow(capacity_ + 1);
  const int32_t page = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(page)] = 1;
  home_[static_cast<size_t>(page)] = default_home_;
  ++n_used_;
  peak_used_ = std::max(peak_used_, n_used_);
  return page;
}

void PagePool::retain(int32_t page) {
  check_id(page);
  STRATA_ASSERT_MSG(refs_[static_cast<size_t>(page)] > 0, "retain of free page {}", page);
  ++refs_[static_cast<size_t>(page)];
}

void PagePool::release(int32_t page) {
  check_id(page);
  int32_t& r = refs_[static_cast<size_t>(page)];
  STRATA_ASSERT_MSG(r > 0, "release of free page {}", page);
  if (--r == 0) {
    free_.push_back(page);
    --n_used_;
  }
}

int32_t PagePool::ref_count(int32_t page) const {
  check_id(page);
  return refs_[static_cast<size_t>(page)];
}

PageTier PagePool::home(int32_t page) const {
  check_id(page);
  return home_[static_cast<size_t>(page)];
}

void PagePool::set_home(int32_t page, PageTier tier) {
  check_id(page);
  home_[static_cast<size_t>(page)] = tier;
}

KvLayer PagePool::layer(int64_t l) const {
  STRATA_ASSERT(l >= 0 && l < g_.n_layer);
  const LayerArrays& a = layers_[static_cast<size_t>(l)];
  KvLayer v;
  v.k_pages = a.k_ptrs.as<void* const>();
  v.v_pages = a.v_ptrs.as<void* const>();
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
