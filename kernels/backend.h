// The compute device behind one abstract interface: the ops the forward pass
// needs, on device pointers, plus the device's memory (allocation, copies,
// synchronisation). The forward (src/model/forward.*), the KV cache (src/kv)
// and the engine (offload/engine.*) are written once against it; CpuBackend
// (kernels/cpu/cpu_backend.h) implements it with the CPU kernels, a CUDA
// backend implements the same with one stream.
//
// Rules every implementation keeps:
//   - Pointers passed to ops are device pointers (memory from alloc(), or
//     host memory when memory_is_host()); sizes, strides and dtypes are host
//     values. An op never reads device memory on the host to decide what to
//     do, so a device can queue it and return.
//   - Ops are ordered: each sees the results of the ones called before it on
//     the same backend (one stream). synchronize() waits for all of them.
//   - An op whose arguments its kernel rejects throws Error naming the op,
//     the status and the sizes; a broken invariant asserts.
//   - memory_is_host(): device memory is host memory (CPU device). Then the
//     gpu and cpu tiers are the same RAM: data already in RAM (a model's
//     mapping, a KV page) is used in place and never copied to itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/dtype.h"

namespace strata {

class Backend;

// Device memory owned by one backend; freed when it goes out of scope.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, void* data, size_t bytes)
      : owner_(owner), data_(data), bytes_(bytes) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : owner_(std::exchange(o.owner_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      owner_ = std::exchange(o.owner_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }
  inline void reset();

 private:
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A weight matrix [rows, cols] (a linear layer's [out, in], an embedding
// table's [n_vocab, n_embd]) wherever it lives, in its stored dtype; rows are
// row_bytes apart (>= row_bytes(dtype, cols)).
struct MatrixView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
};

// One weight of Backend::matmul_parts, with its bias ([w.rows] or null).
inline constexpr size_t kMaxMatmulParts = 3;  // q, k and v
struct MatmulPart {
  MatrixView w;
  const float* bias = nullptr;
};

enum class ActFn : uint8_t { kRelu, kGelu, kGeluTanh, kSilu };
// Which dims of a head RoPE rotates together: (i, i + rot_dim/2) or (2i, 2i+1).
enum class RopePairs : uint8_t { kHalf, kInterleaved };

// One layer's view of the paged KV cache. Page p of the layer: K at
// k_pages[p], V at v_pages[p], each [page_size, n_kv_head, head_dim] in dtype;
// its key min/max at k_min/k_max + p * n_kv_head * head_dim (f32). The page
// pointer arrays and the min/max arrays are device memory.
struct KvLayer {
  void* const* k_pages = nullptr;  // [n_pages]
  void* const* v_pages = nullptr;  // [n_pages]
  float* k_min = nullptr;          // [n_pages, n_kv_head, head_dim]
  float* k_max = nullptr;          // [n_pages, n_kv_head, head_dim]
  int64_t n_pages = 0;
  DType dtype = DType::kF32;  // f32, f16 or bf16
  int64_t page_size = 16;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
};

// The sequences of a micro-batch as the attention op sees them (device
// arrays, flashinfer's layout): sequence s owns query rows [q_indptr[s],
// q_indptr[s+1]) and pages page_ids[page_indptr[s] .. page_indptr[s+1]);
// kv_len[s] counts its keys including the new ones (already appended).
struct AttentionSeqs {
  int64_t n_seq = 0;
  const int32_t* q_indptr = nullptr;     // [n_seq + 1]
  const int32_t* kv_len = nullptr;       // [n_seq]
  const int32_t* page_indptr = nullptr;  // [n_seq + 1]
  const int32_t* page_ids = nullptr;     // [page_indptr[n_seq]]
  // 1, or n_kv_head: one page list per kv head (sparse attention), as in
  // kernels/cpu/attention.h's AttentionBatch.
  int64_t lists = 1;
};

// What a backend runs beyond the ops every backend has (asked once, as
// ggml's supports_op; offload/device_support.h turns it into the engine's
// rules, and the policy search asks the same).
enum class BackendFeature : uint8_t {
  kInt8Matmul,       // compute dtype int8: integer products with quantized weights
  kQuantizedKv,      // a KV cache stored in a q4/q8 format (attention dequantizes)
  kSparseAttention,  // select_pages: query-aware page selection for decode
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu (2 threads, avx512_bf16)", for logs and reports.
  virtual std::string name() const = 0;

  virtual bool supports(BackendFeature f) const = 0;

  // ---- memory ----
  virtual bool memory_is_host() const = 0;
  // Device memory, 64-byte aligned, uninitialised. Throws Error when the
  // device cannot provide it.
  DeviceBuffer alloc(size_t bytes) { return DeviceBuffer(this, allocate(bytes), bytes); }
  virtual void copy_to_device(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void copy_to_host(void* dst_host, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // Waits until every op and copy called so far has finished.
  virtual void synchronize() = 0;

  // ---- ops (all pointers device pointers; strides in elements) ----

  // y[m, w.rows] = x[m, w.cols] . W^T (+ bias[w.rows]); x and W rounded to
  // `compute` (f32 or bf16), f32 accumulation.
  virtual void matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                      const MatrixView& w, const float* bias, int64_t m, DType compute) = 0;

  // Several weights against the same x (a layer's q, k and v; its gate and
  // up), all with x's columns: part p's y[m, w_p.rows] in the columns after
  // the earlier parts'. The results of one matmul per part, which is what
  // this default does; a backend may run them as one op (the CPU does at
  // decode sizes, one team of threads over the rows of all parts). At most
  // kMaxMatmulParts parts.
  virtual void matmul_parts(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                            const MatmulPart* parts, size_t n_parts, int64_t m, DType compute) {
    int64_t col = 0;
    for (size_t i = 0; i < n_parts; ++i) {
      matmul(y + col, y_stride, x, x_stride, parts[i].w, parts[i].bias, m, compute);
      col += parts[i].w.rows;
    }
  }

  // y, x: [n_rows, d]; y may be x. w, b: [d] f32, may be null.
  virtual void rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                        const float* w, float eps, int64_t n_rows, int64_t d) = 0;
  virtual void layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                          const float* w, const float* b, float eps, int64_t n_rows, int64_t d) = 0;

  // In place on q [n_tokens, n_head, head_dim] and k [n_tokens, n_kv_head,
  // head_dim] (token row strides q_stride, k_stride): rotates the first
  // rot_dim dims of every head by pos[t] * inv_freq[i].
  // pos: [n_tokens]; inv_freq: [rot_dim / 2] (device).
  virtual void rope(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
                    int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
                    const float* inv_freq, int64_t rot_dim, RopePairs pairs) = 0;

  // y = f(x), y = silu(gate) * up, y = a + b; [n_rows, d] each; y may alias an input.
  virtual void activation(ActFn f, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                          int64_t n_rows, int64_t d) = 0;
  virtual void swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride,
                      const float* up, int64_t up_stride, int64_t n_rows, int64_t d) = 0;
  virtual void add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
                   int64_t b_stride, int64_t n_rows, int64_t d) = 0;

  // y[i, :] = table[ids[i], :] as f32; y: [n_ids, table.cols]; ids: [n_ids],
  // each checked against table.rows.
  virtual void embedding(float* y, int64_t y_stride, const MatrixView& table, const int32_t* ids,
                         int64_t n_ids) = 0;
  // y[i, :] = x[rows[i], :]; y: [n_rows, d]; rows: [n_rows] (device).
  virtual void gather_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                           const int32_t* rows, int64_t n_rows, int64_t d) = 0;

  // Writes the k/v rows of n_tokens new tokens at slots[t] (page_id *
  // page_size + offset) in the layer's kv dtype, then brings the key
  // min/max of the n_touched listed pages up to date: the element-wise
  // min/max of their first n_filled[i] keys as stored. Keys are appended in
  // order and the min/max of the earlier keys are current, so an
  // implementation may recompute the listed pages or fold the new keys in.
  // k, v: [n_tokens, n_kv_head, head_dim]; slots: [n_tokens];
  // touched, n_filled: [n_touched] (device).
  virtual void kv_append(const KvLayer& kv, const float* k, int64_t k_stride, const float* v,
                         int64_t v_stride, const int64_t* slots, int64_t n_tokens,
                         const int32_t* touched, const int32_t* n_filled, int64_t n_touched) = 0;

  // Recomputes the key min/max of the n listed pages over their first
  // n_filled[i] keys as stored: a truncation (speculation's rejected draft
  // tokens) left them folded from keys that are gone, and kv_append folds
  // into them only once they are current. pages, n_filled: [n] (device).
  virtual void key_minmax(const KvLayer& kv, const int32_t* pages, const int32_t* n_filled,
                          int64_t n) = 0;

  // Causal attention of the new tokens of every sequence over its cached and
  // new keys (prefill and decode alike), GQA by n_head / kv.n_kv_head.
  // out, q: [q_indptr[n_seq], n_head, head_dim].
  virtual void attention(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                         int64_t n_head, const KvLayer& kv, const AttentionSeqs& seqs,
                         float scale) = 0;

  // Sparse decode attention's page selection (kernels/cpu/page_select.h:
  // QUEST's bound from the pages' key min/max, one list per kv head) for
  // sequences of one new token each: writes sel_ids [sel_indptr[n_seq]],
  // whose layout (sel_indptr) cpu::sparse_layout gives; then attention with
  // lists = n_kv_head over them. Backends without kSparseAttention throw.
  virtual void select_pages(const float* q, int64_t q_stride, int64_t n_head, const KvLayer& kv,
                            const AttentionSeqs& seqs, int64_t budget_pages, bool keep_first,
                            const int32_t* sel_indptr, int32_t* sel_ids) = 0;

 protected:
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
  friend class DeviceBuffer;
};

inline void DeviceBuffer::reset() {
  if (data_ != nullptr) owner_->deallocate(data_, bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace strata
