// The CPU kernels on separate, guarded device memory (separate_memory_backend.h).
#include "kernels/cpu/separate_memory_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/kv_layout.h"

namespace strata {

namespace {

constexpr uint64_t kAlign = 256;  // as cudaMalloc

uint64_t page_size_bytes() {
  static const uint64_t p = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return p;
}

uint64_t round_up(uint64_t n, uint64_t a) {
  return (n + a - 1) / a * a;
}

}  // namespace

class SeparateMemoryBackend::Open {
 public:
  explicit Open(SeparateMemoryBackend& b) : b_(b) { b_.open(); }
  ~Open() { b_.close(); }
  Open(const Open&) = delete;
  Open& operator=(const Open&) = delete;

 private:
  SeparateMemoryBackend& b_;
};

SeparateMemoryBackend::SeparateMemoryBackend(int threads, uint64_t reserve_bytes)
    : cpu_(threads), reserved_(round_up(reserve_bytes, page_size_bytes())) {
  void* p = mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    fail("separate-memory device: cannot reserve {} bytes of address space: {}", reserved_,
         std::strerror(errno));
  }
  base_ = static_cast<std::byte*>(p);
}

SeparateMemoryBackend::~SeparateMemoryBackend() {
  munmap(base_, reserved_);
}

std::string SeparateMemoryBackend::name() const {
  return "separate-memory device on " + cpu_.name();
}

bool SeparateMemoryBackend::in_device_range(const void* p) const {
  const auto* b = static_cast<const std::byte*>(p);
  return b >= base_ && b < base_ + reserved_;
}

uint64_t SeparateMemoryBackend::live_bytes() const {
  std::lock_guard lock(mu_);
  return live_bytes_;
}

uint64_t SeparateMemoryBackend::peak_bytes() const {
  std::lock_guard lock(mu_);
  return peak_bytes_;
}

void SeparateMemoryBackend::open() {
  std::lock_guard lock(mu_);
  if (open_count_++ == 0 && high_ > 0) {
    STRATA_ASSERT_MSG(mprotect(base_, high_, PROT_READ | PROT_WRITE) == 0, "mprotect: {}",
                      std::strerror(errno));
  }
}

void SeparateMemoryBackend::close() {
  std::lock_guard lock(mu_);
  if (--open_count_ == 0 && high_ > 0) {
    STRATA_ASSERT_MSG(mprotect(base_, high_, PROT_NONE) == 0, "mprotect: {}", std::strerror(errno));
  }
}

void* SeparateMemoryBackend::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const uint64_t n = round_up(bytes, kAlign);
  std::lock_guard lock(mu_);
  uint64_t off = UINT64_MAX;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= n) {
      off = it->first;
      const uint64_t rest = it->second - n;
      free_.erase(it);
      if (rest > 0) free_[off + n] = rest;
      break;
    }
  }
  if (off == UINT64_MAX) {
    const uint64_t new_high = round_up(high_ + n, page_size_bytes());
    if (new_high > reserved_) {
      fail(
          "separate-memory device: could not allocate {} bytes of device memory ({} of the {} "
          "reserved in use); lower the batch size or --gpu-mem",
          bytes, live_bytes_, reserved_);
    }
    off = high_;
    if (new_high > high_ + n) free_[high_ + n] = new_high - high_ - n;
    if (open_count_ > 0) {
      STRATA_ASSERT_MSG(mprotect(base_ + high_, new_high - high_, PROT_READ | PROT_WRITE) == 0,
                        "mprotect: {}", std::strerror(errno));
    }
    high_ = new_high;
  }
  live_[off] = n;
  live_bytes_ += n;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return base_ + off;
}

void SeparateMemoryBackend::deallocate(void* p, size_t) {
  if (p == nullptr) return;
  std::lock_guard lock(mu_);
  const uint64_t off = static_cast<uint64_t>(static_cast<std::byte*>(p) - base_);
  auto it = live_.find(off);
  STRATA_ASSERT_MSG(it != live_.end(), "separate-memory device: free of {} which is not allocated",
                    p);
  uint64_t start = off, len = it->second;
  live_bytes_ -= len;
  live_.erase(it);
  // Whole pages inside the freed range go back to the system.
  const uint64_t ps = page_size_bytes();
  const uint64_t a = round_up(start, ps), e = (start + len) / ps * ps;
  if (e > a) madvise(base_ + a, e - a, MADV_DONTNEED);
  // Coalesce with the neighbours.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = len;
}

void SeparateMemoryBackend::need(const void* p, size_t bytes, const char* op,
                                 const char* arg) const {
  if (p == nullptr && bytes == 0) return;
  const auto* b = static_cast<const std::byte*>(p);
  if (p == nullptr || !in_device_range(p)) {
    fail("separate-memory device: {}: {} ({}, {} bytes) is not device memory", op, arg, p, bytes);
  }
  const uint64_t off = static_cast<uint64_t>(b - base_);
  std::lock_guard lock(mu_);
  auto it = live_.upper_bound(off);
  if (it == live_.begin() || (--it, off + bytes > it->first + it->second)) {
    fail("separate-memory device: {}: {} ({}, {} bytes) is not inside one live allocation", op, arg,
         p, bytes);
  }
}

void SeparateMemoryBackend::need_host(const void* p, size_t bytes, const char* op,
                                      const char* arg) const {
  const auto* b = static_cast<const std::byte*>(p);
  if (bytes > 0 && b < base_ + reserved_ && b + bytes > base_) {
    fail("separate-memory device: {}: {} ({}, {} bytes) is device memory, not a host buffer", op,
         arg, p, bytes);
  }
}

void SeparateMemoryBackend::need_rows(const float* p, int64_t stride, int64_t n_rows, int64_t d,
                                      const char* op, const char* arg) const {
  if (n_rows <= 0 || d <= 0) return;
  need(p, static_cast<size_t>((n_rows - 1) * stride + d) * sizeof(float), op, arg);
}

// Called with the range open: reads the page pointer arrays, and checks
// the pages in `ids` (those the op reads or writes; other entries may be
// stale, as they may on any device).
void SeparateMemoryBackend::need_kv(const KvLayer& kv, const int32_t* ids, int64_t n_ids,
                                    const char* op) const {
  const size_t n = static_cast<size_t>(kv.n_pages);
  need(kv.k_pages, n * sizeof(void*), op, "kv.k_pages");
  need(kv.v_pages, n * sizeof(void*), op, "kv.v_pages");
  const size_t mm = n * static_cast<size_t>(kv.n_kv_head * kv.head_dim) * sizeof(float);
  need(kv.k_min, mm, op, "kv.k_min");
  need(kv.k_max, mm, op, "kv.k_max");
  for (int64_t i = 0; i < n_ids; ++i) need_page(kv, ids[i], op);
}

void SeparateMemoryBackend::need_page(const KvLayer& kv, int64_t p, const char* op) const {
  if (p < 0 || p >= kv.n_pages) return;  // the kernel reports it
  need(kv.k_pages[p], kv_key_page_bytes(kv.dtype, kv.page_size, kv.n_kv_head, kv.head_dim), op,
       "a K page");
  need(kv.v_pages[p], kv_value_page_bytes(kv.dtype, kv.page_size, kv.n_kv_head, kv.head_dim), op,
       "a V page");
}

// ---- copies ----

void SeparateMemoryBackend::copy_to_device(void* dst, const void* src_host, size_t bytes) {
  if (bytes == 0) return;
  need(dst, bytes, "copy_to_device", "dst");
  need_host(src_host, bytes, "copy_to_device", "src");
  Open o(*this);
  std::memcpy(dst, src_host, bytes);
}

void SeparateMemoryBackend::copy_to_host(void* dst_host, const void* src, size_t bytes) {
  if (bytes == 0) return;
  need(src, bytes, "copy_to_host", "src");
  need_host(dst_host, bytes, "copy_to_host", "dst");
  Open o(*this);
  std::memcpy(dst_host, src, bytes);
}

void SeparateMemoryBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  need(dst, bytes, "copy", "dst");
  need(src, bytes, "copy", "src");
  Open o(*this);
  std::memmove(dst, src, bytes);
}

void SeparateMemoryBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  need(dst, bytes, "fill_zero", "dst");
  Open o(*this);
  std::memset(dst, 0, bytes);
}

// ---- ops ----

void SeparateMemoryBackend::matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                   const MatrixView& w, const float* bias, int64_t m,
                                   DType compute) {
  need_rows(y, y_stride, m, w.rows, "matmul", "y");
  need_rows(x, x_stride, m, w.cols, "matmul", "x");
  need(w.data, w.row_bytes * static_cast<size_t>(w.rows), "matmul", "w");
  if (bias != nullptr) need(bias, static_cast<size_t>(w.rows) * sizeof(float), "matmul", "bias");
  Open o(*this);
  cpu_.matmul(y, y_stride, x, x_stride, w, bias, m, compute);
}

void SeparateMemoryBackend::rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                     const float* w, float eps, int64_t n_rows, int64_t d) {
  need_rows(y, y_stride, n_rows, d, "rms_norm", "y");
  need_rows(x, x_stride, n_rows, d, "rms_norm", "x");
  if (w != nullptr) need(w, static_cast<size_t>(d) * sizeof(float), "rms_norm", "w");
  Open o(*this);
  cpu_.rms_norm(y, y_stride, x, x_stride, w, eps, n_rows, d);
}

void SeparateMemoryBackend::layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                                       const float* w, const float* b, float eps, int64_t n_rows,
                                       int64_t d) {
  need_rows(y, y_stride, n_rows, d, "layer_norm", "y");
  need_rows(x, x_stride, n_rows, d, "layer_norm", "x");
  if (w != nullptr) need(w, static_cast<size_t>(d) * sizeof(float), "layer_norm", "w");
  if (b != nullptr) need(b, static_cast<size_t>(d) * sizeof(float), "layer_norm", "b");
  Open o(*this);
  cpu_.layer_norm(y, y_stride, x, x_stride, w, b, eps, n_rows, d);
}

void SeparateMemoryBackend::rope(float* q, int64_t q_stride, int64_t n_head, float* k,
                                 int64_t k_stride, int64_t n_kv_head, int64_t head_dim,
                                 const int32_t* pos, int64_t n_tokens, const float* inv_freq,
                                 int64_t rot_dim, RopePairs pairs) {
  need_rows(q, q_stride, n_tokens, n_head * head_dim, "rope", "q");
  need_rows(k, k_stride, n_tokens, n_kv_head * head_dim, "rope", "k");
  need(pos, static_cast<size_t>(n_tokens) * sizeof(int32_t), "rope", "pos");
  need(inv_freq, static_cast<size_t>(rot_dim / 2) * sizeof(float), "rope", "inv_freq");
  Open o(*this);
  cpu_.rope(q, q_stride, n_head, k, k_stride, n_kv_head, head_dim, pos, n_tokens, inv_freq, rot_dim,
            pairs);
}

void SeparateMemoryBackend::activation(ActFn f, float* y, int64_t y_stride, const float* x,
                                       int64_t x_stride, int64_t n_rows, int64_t d) {
  need_rows(y, y_stride, n_rows, d, "activation", "y");
  need_rows(x, x_stride, n_rows, d, "activation", "x");
  Open o(*this);
  cpu_.activation(f, y, y_stride, x, x_stride, n_rows, d);
}

void SeparateMemoryBackend::swiglu(float* y, int64_t y_stride, const float* gate,
                                   int64_t gate_stride, const float* up, int64_t up_stride,
                                   int64_t n_rows, int64_t d) {
  need_rows(y, y_stride, n_rows, d, "swiglu", "y");
  need_rows(gate, gate_stride, n_rows, d, "swiglu", "gate");
  need_rows(up, up_stride, n_rows, d, "swiglu", "up");
  Open o(*this);
  cpu_.swiglu(y, y_stride, gate, gate_stride, up, up_stride, n_rows, d);
}

void SeparateMemoryBackend::add(float* y, int64_t y_stride, const float* a, int64_t a_stride,
                                const float* b, int64_t b_stride, int64_t n_rows, int64_t d) {
  need_rows(y, y_stride, n_rows, d, "add", "y");
  need_rows(a, a_stride, n_rows, d, "add", "a");
  need_rows(b, b_stride, n_rows, d, "add", "b");
  Open o(*this);
  cpu_.add(y, y_stride, a, a_stride, b, b_stride, n_rows, d);
}

void SeparateMemoryBackend::embedding(float* y, int64_t y_stride, const MatrixView& table,
                                      const int32_t* ids, int64_t n_ids) {
  need_rows(y, y_stride, n_ids, table.cols, "embedding", "y");
  need(table.data, table.row_bytes * static_cast<size_t>(table.rows), "embedding", "table");
  need(ids, static_cast<size_t>(n_ids) * sizeof(int32_t), "embedding", "ids");
  Open o(*this);
  cpu_.embedding(y, y_stride, table, ids, n_ids);
}

void SeparateMemoryBackend::gather_rows(float* y, int64_t y_stride, const float* x,
                                        int64_t x_stride, const int32_t* rows, int64_t n_rows,
                                        int64_t d) {
  need_rows(y, y_stride, n_rows, d, "gather_rows", "y");
  need(x, static_cast<size_t>(d) * sizeof(float), "gather_rows", "x");
  need(rows, static_cast<size_t>(n_rows) * sizeof(int32_t), "gather_rows", "rows");
  Open o(*this);
  cpu_.gather_rows(y, y_stride, x, x_stride, rows, n_rows, d);
}

void SeparateMemoryBackend::kv_append(const KvLayer& kv, const float* k, int64_t k_stride,
                                      const float* v, int64_t v_stride, const int64_t* slots,
                                      int64_t n_tokens, const int32_t* touched,
                                      const int32_t* n_filled, int64_t n_touched) {
  const int64_t row = kv.n_kv_head * kv.head_dim;
  need_rows(k, k_stride, n_tokens, row, "kv_append", "k");
  need_rows(v, v_stride, n_tokens, row, "kv_append", "v");
  need(slots, static_cast<size_t>(n_tokens) * sizeof(int64_t), "kv_append", "slots");
  need(touched, static_cast<size_t>(n_touched) * sizeof(int32_t), "kv_append", "touched");
  need(n_filled, static_cast<size_t>(n_touched) * sizeof(int32_t), "kv_append", "n_filled");
  Open o(*this);
  for (int64_t t = 0; t < n_tokens; ++t) need_page(kv, slots[t] / kv.page_size, "kv_append");
  need_kv(kv, touched, n_touched, "kv_append");
  cpu_.kv_append(kv, k, k_stride, v, v_stride, slots, n_tokens, touched, n_filled, n_touched);
}

void SeparateMemoryBackend::key_minmax(const KvLayer& kv, const int32_t* pages,
                                       const int32_t* n_filled, int64_t n) {
  need(pages, static_cast<size_t>(n) * sizeof(int32_t), "key_minmax", "pages");
  need(n_filled, static_cast<size_t>(n) * sizeof(int32_t), "key_minmax", "n_filled");
  Open o(*this);
  need_kv(kv, pages, n, "key_minmax");
  cpu_.key_minmax(kv, pages, n_filled, n);
}

void SeparateMemoryBackend::attention(float* out, int64_t out_stride, const float* q,
                                      int64_t q_stride, int64_t n_head, const KvLayer& kv,
                                      const AttentionSeqs& seqs, float scale) {
  const size_t ns = static_cast<size_t>(seqs.n_seq);
  need(seqs.q_indptr, (ns + 1) * sizeof(int32_t), "attention", "seqs.q_indptr");
  need(seqs.kv_len, ns * sizeof(int32_t), "attention", "seqs.kv_len");
  need(seqs.page_indptr, (ns + 1) * sizeof(int32_t), "attention", "seqs.page_indptr");
  Open o(*this);
  const int64_t n_q = seqs.q_indptr[ns];
  need(seqs.page_ids, static_cast<size_t>(seqs.page_indptr[ns]) * sizeof(int32_t), "attention",
       "seqs.page_ids");
  need_rows(out, out_stride, n_q, n_head * kv.head_dim, "attention", "out");
  need_rows(q, q_stride, n_q, n_head * kv.head_dim, "attention", "q");
  need_kv(kv, seqs.page_ids, seqs.page_indptr[ns], "attention");
  cpu_.attention(out, out_stride, q, q_stride, n_head, kv, seqs, scale);
}

void SeparateMemoryBackend::select_pages(const float*, int64_t, int64_t, const KvLayer&,
                                         const AttentionSeqs&, int64_t, bool, const int32_t*,
                                         int32_t*) {
  fail("{}: sparse attention (select_pages) is not built for this device", name());
}

}  // namespace strata
