// The CPU as a compute device: Backend implemented with the kernels of
// kernels/cpu (one MatmulCache, OpenMP parallel loops). Device memory is host
// memory, so nothing is ever copied to itself: weights are read in place
// from the model's mapping and KV pages live in RAM. Ops run synchronously on
// the calling thread with `threads` OpenMP threads; synchronize() has nothing
// to wait for. One host thread drives a CpuBackend at a time (the
// MatmulCache is not shared).
//
// With STRATA_PROFILE_OPS=1 in the environment the backend sums the wall
// time of every op by kind and logs the table when it is destroyed (ops are
// synchronous, so this is where the time goes).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/matmul.h"

namespace strata {

namespace cpu {
// The CPU kernel's activation for a Backend activation function.
Activation activation_of(ActFn f);
}  // namespace cpu

class CpuBackend final : public Backend {
 public:
  // threads: OpenMP threads per op; 0 uses omp_get_max_threads().
  explicit CpuBackend(int threads = 0);
  ~CpuBackend() override;

  int threads() const { return threads_; }

  // Op kinds of the profile.
  enum class Op : uint8_t {
    kMatmul,
    kNorm,
    kRope,
    kElementwise,
    kEmbedding,
    kKvAppend,
    kKeyMinMax,
    kAttention,
    kCount
  };
  struct OpTime {
    double seconds = 0;
    int64_t calls = 0;
  };
  const std::array<OpTime, static_cast<size_t>(Op::kCount)>& op_times() const { return op_times_; }
  bool profiling() const { return profiling_; }

  std::string name() const override;
  bool supports(BackendFeature) const override { return true; }
  bool memory_is_host() const override { return true; }
  void copy_to_device(void* dst, const void* src_host, size_t bytes) override;
  void copy_to_host(void* dst_host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void synchronize() override {}

  void matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const MatrixView& w,
              const float* bias, int64_t m, DType compute) override;
  void matmul_parts(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                    const MatmulPart* parts, size_t n_parts, int64_t m, DType compute) override;
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
  class Timer;
  void fold_key_minmax(const KvLayer& kv, const int64_t* slots, int64_t n_tokens);

  int threads_ = 1;
  std::unique_ptr<cpu::MatmulCache> matmul_cache_;
  bool profiling_ = false;
  std::array<OpTime, static_cast<size_t>(Op::kCount)> op_times_{};
};

}  // namespace strata
