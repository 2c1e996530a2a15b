// The CPU kernels behind a device whose memory is *not* host memory: a
// Backend with memory_is_host() == false that computes with CpuBackend but
// keeps its "device memory" in an address range of its own that the host
// cannot touch outside the backend's calls. It exists so that the code paths
// of a discrete device (a GPU) — weights uploaded or streamed into device
// buffers, KV pages and activations in device memory, page tables and
// micro-batch arrays copied over, logits copied back — run and are checked
// on a machine without one, with the CPU's arithmetic (so results equal the
// CPU device's bit for bit).
//
// What it checks:
//   - device memory is mapped PROT_NONE except while a call of this backend
//     runs: a host read or write of device memory anywhere else (a view left
//     pointing at a device page table, a disk read into device memory)
//     faults at once (SIGSEGV);
//   - every pointer an op or copy receives as device memory lies, with the
//     bytes the op touches, inside one live allocation of this backend (and
//     host pointers of copies lie outside the device range); a host pointer
//     handed to an op as device memory (a weight view still pointing into
//     the model's mapping) is an Error naming the op and the argument.
// The address range is reserved (not committed) up front; freed allocations
// give their pages back. Any number of threads may call it (a call opens
// the range, the last one to leave closes it), as the transfer queues do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace strata {

class SeparateMemoryBackend final : public Backend {
 public:
  // threads: as CpuBackend; reserve_bytes: the address range reserved for
  // device memory (virtual only).
  explicit SeparateMemoryBackend(int threads = 0, uint64_t reserve_bytes = uint64_t{64} << 30);
  ~SeparateMemoryBackend() override;
  SeparateMemoryBackend(const SeparateMemoryBackend&) = delete;
  SeparateMemoryBackend& operator=(const SeparateMemoryBackend&) = delete;

  // True when p lies inside the device range (allocated or not).
  bool in_device_range(const void* p) const;
  uint64_t live_bytes() const;
  uint64_t peak_bytes() const;

  std::string name() const override;
  // Stands in for a GPU: what the CUDA backend runs, nothing more.
  bool supports(BackendFeature) const override { return false; }
  bool memory_is_host() const override { return false; }
  void copy_to_device(void* dst, const void* src_host, size_t bytes) override;
  void copy_to_host(void* dst_host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void synchronize() override {}

  void matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const MatrixView& w,
              const float* bias, int64_t m, DType compute) override;
  void rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                float eps, int64_t n_rows, int64_t d) override;
  void layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* w,
                  const float* b, float eps, int64_t n_rows, int64_t d) override;
  void rope(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
            int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
            const float* inv_freq, int64_t rot_dim, RopePairs pairs) override;
  void activation(ActFn f, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                  int64_t n_rows, int64_t d) override;
  void swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride, const float* up,
              int64_t up_stride, int64_t n_rows, int64_t d) override;
  void add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
           int64_t b_stride, int64_t n_rows, int64_t d) override;
  void embedding(float* y, int64_t y_stride, const MatrixView& table, const int32_t* ids,
                 int64_t n_ids) override;
  void gather_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                   const int32_t* rows, int64_t n_rows, int64_t d) override;
  void kv_append(const KvLayer& kv, const float* k, int64_t k_stride, const float* v,
                 int64_t v_stride, const int64_t* slots, int64_t n_tokens, const int32_t* touched,
                 const int32_t* n_filled, int64_t n_touched) override;
  void key_minmax(const KvLayer& kv, const int32_t* pages, const int32_t* n_filled,
                  int64_t n) override;
  void attention(float* out, int64_t out_stride, const float* q, int64_t q_stride, int64_t n_head,
                 const KvLayer& kv, const AttentionSeqs& seqs, float scale) override;
  void select_pages(const float* q, int64_t q_stride, int64_t n_head, const KvLayer& kv,
                    const AttentionSeqs& seqs, int64_t budget_pages, bool keep_first,
                    const int32_t* sel_indptr, int32_t* sel_ids) override;

 protected:
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;

 private:
  class Open;  // RAII: the device range is readable while one exists
  void open();
  void close();
  // Error unless [p, p + bytes) lies inside one live allocation.
  void need(const void* p, size_t bytes, const char* op, const char* arg) const;
  // Error when [p, p + bytes) touches the device range (a host buffer).
  void need_host(const void* p, size_t bytes, const char* op, const char* arg) const;
  // Rows of a row-major matrix: (n_rows - 1) * stride + d elements.
  void need_rows(const float* p, int64_t stride, int64_t n_rows, int64_t d, const char* op,
                 const char* arg) const;
  void need_kv(const KvLayer& kv, const int32_t* ids, int64_t n_ids, const char* op) const;
  // K and V of page p of kv (read from its page arrays) are device memory.
  void need_page(const KvLayer& kv, int64_t p, const char* op) const;

  CpuBackend cpu_;
  std::byte* base_ = nullptr;
  uint64_t reserved_ = 0;
  mutable std::mutex mu_;
  int open_count_ = 0;
  uint64_t high_ = 0;                  // bytes of the range ever handed out (page multiple)
  std::map<uint64_t, uint64_t> live_;  // offset -> bytes
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes, below high_, coalesced
  uint64_t live_bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace strata
