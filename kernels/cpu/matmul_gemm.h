// MatmulCache's insides (every path's workspaces) and the GEMM path of
// cpu::matmul: oneDNN over panels of converted W rows, in the two shapes
// kernels/cpu/matmul.h describes. Internal to kernels/cpu: matmul.cpp sends
// each call to a decode kernel or here.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace strata::cpu {

namespace gemm {

// 64-byte aligned memory that only grows.
class Buffer {
 public:
  bool ensure(size_t bytes) {
    if (bytes <= size_) return true;
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) return false;
    data_.reset(p);
    size_ = rounded;
    return true;
  }
  char* data() const { return static_cast<char*>(data_.get()); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
  size_t size_ = 0;
};

enum class Kind : int { kSmallM, kSwapped };

// A primitive is fixed by everything its descriptors hold.
struct PrimKey {
  Kind kind;
  ComputeType compute;
  int64_t rows;  // kSmallM: runtime (0); kSwapped: panel rows
  int64_t cols;  // kSmallM: panel rows;  kSwapped: tokens in the tile
  int64_t k;
  int64_t lda, ldb, ldc;
  bool bias;
  auto operator<=>(const PrimKey&) const = default;
};

struct Prim {
  dnnl::matmul prim;
  dnnl::memory::desc b_md;  // kSwapped: the packed layout of x
  size_t scratch_bytes = 0;
};

}  // namespace gemm

struct MatmulCache::Impl {
  struct ThreadWs {
    gemm::Buffer panel;       // [pn, k] converted W rows
    gemm::Buffer tmp;         // swapped: [pn, mt] f32 product before the transpose into y
    gemm::Buffer scratch;     // oneDNN scratchpad
    gemm::Buffer int8_panel;  // int8 compute: the thread's panel of unpacked weight rows
    std::optional<dnnl::stream> stream;
  };

  std::optional<dnnl::engine> engine;
  std::map<gemm::PrimKey, gemm::Prim> prims;
  // (compute, mt, k) -> the packed layout of x
  std::map<std::tuple<ComputeType, int64_t, int64_t>, dnnl::memory::desc> packed_x_mds;
  std::map<std::tuple<ComputeType, int64_t, int64_t, int64_t>, dnnl::reorder> x_reorders;
  gemm::Buffer x_ws;       // swapped: packed x tiles; small-m bf16: x rounded to bf16
  gemm::Buffer int8_x;     // int8 compute: x quantized per group
  gemm::Buffer dot_x;      // small m: x rounded to bf16 (or padded, f32) for the fused dot kernels
  gemm::Buffer rounded_x;  // bf16 without native products: x rounded to bf16, as f32
  std::vector<ThreadWs> threads;
  bool warned_ref = false;

  void init();
  // The blocked layout x is packed into for tiles of mt tokens: whatever
  // oneDNN prefers for a representative panel height. Every swapped primitive
  // of this (compute, mt, k) is then created for this one layout.
  const dnnl::memory::desc& packed_x_md(ComputeType c, int64_t mt, int64_t k);
  const gemm::Prim& prim(const gemm::PrimKey& key);
  dnnl::reorder& x_reorder(ComputeType c, int64_t mt, int64_t k, int64_t ldx);
  void ensure_threads(int n);

 private:
  void note_impl(const dnnl::matmul::primitive_desc& pd, const gemm::PrimKey& key);
};

// Threads for an [m, k] x [k, n] product: one per kMinThreadWork
// multiply-adds, within the OpenMP budget.
int matmul_threads(int64_t m, int64_t n, int64_t k);

// y = x . W^T (+ bias) for one weight through oneDNN; bf16 without native
// products rounds x and W to bf16 and multiplies in f32.
Status matmul_gemm(MatmulCache::Impl& c, float* y, int64_t y_stride, const float* x,
                   int64_t x_stride, const WeightPart& p, int64_t m, int64_t k,
                   ComputeType compute);

// The GEMM path's workspaces for products up to [max_m, k] x [n, k]^T
// (compute kF32 or native kBF16).
Status reserve_gemm(MatmulCache::Impl& c, int64_t max_m, int64_t n, int64_t k, ComputeType compute);

}  // namespace strata::cpu
