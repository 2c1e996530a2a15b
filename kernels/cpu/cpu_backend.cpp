#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_int8_avx2.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/page_select.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/rope.h"
#include "quant/convert.h"

namespace strata {

namespace {

// Turns a kernel status into an Error that names the op and its sizes.
template <typename... Args>
void check(Status s, const char* op, fmt::format_string<Args...> sizes, Args&&... args) {
  if (s == Status::kOk) return;
  fail("cpu backend: {} failed: {} ({})", op, status_name(s),
       fmt::format(sizes, std::forward<Args>(args)...));
}

// Once per process, for a compute dtype this CPU only emulates.
void warn_if_emulated(cpu::ComputeType c) {
  static std::atomic<bool> bf16_said{false}, int8_said{false};
  if (c == cpu::ComputeType::kBF16 && !cpu::native_bf16_products() && !bf16_said.exchange(true)) {
    spdlog::warn(
        "cpu: no bf16 products on this CPU (no AVX-512): bf16 compute rounds to bf16 and "
        "multiplies in f32, slower than --compute-dtype f32");
  }
  if (c == cpu::ComputeType::kInt8 && !cpu::matmul_int8_native() && !cpu::matmul_int8_avx2_ok() &&
      !int8_said.exchange(true)) {
    spdlog::warn(
        "cpu: neither AVX512-VNNI nor AVX2 on this CPU: int8 compute runs portable integer loops, "
        "many times slower than --compute-dtype f32");
  }
}

cpu::ComputeType cpu_compute(DType t) {
  std::optional<cpu::ComputeType> c;
  if (t == DType::kF32) c = cpu::ComputeType::kF32;
  if (t == DType::kBF16) c = cpu::ComputeType::kBF16;
  if (t == DType::kI8) c = cpu::ComputeType::kInt8;  // kernels/cpu/matmul_int8.h
  if (!c) {
    fail("cpu backend: compute dtype {} is not supported; use f32, bf16 or int8", dtype_name(t));
  }
  warn_if_emulated(*c);
  return *c;
}

constexpr const char* kOpNames[] = {"matmul",    "norm",      "rope",        "elementwise",
                                    "embedding", "kv_append", "key min/max", "attention"};

}  // namespace

// Adds the wall time of one op to its kind when profiling.
class CpuBackend::Timer {
 public:
  Timer(CpuBackend& be, Op op) : be_(be), op_(op) {
    if (be_.profiling_) t0_ = std::chrono::steady_clock::now();
  }
  ~Timer() {
    if (!be_.profiling_) return;
    OpTime& t = be_.op_times_[static_cast<size_t>(op_)];
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    ++t.calls;
  }

 private:
  CpuBackend& be_;
  Op op_;
  std::chrono::steady_clock::time_point t0_;
};

CpuBackend::CpuBackend(int threads)
    : threads_(threads > 0 ? threads : omp_get_max_threads()),
      matmul_cache_(std::make_unique<cpu::MatmulCache>()) {
  const char* env = std::getenv("STRATA_PROFILE_OPS");
  profiling_ = env != nullptr && env[0] != '\0' && env[0] != '0';
}

CpuBackend::~CpuBackend() {
  if (!profiling_) return;
  double total = 0;
  for (const OpTime& t : op_times_) total += t.seconds;
  spdlog::info("cpu backend: {:.3f} s in ops", total);
  for (size_t i = 0; i < op_times_.size(); ++i) {
    const OpTime& t = op_times_[i];
    if (t.calls == 0) continue;
    spdlog::info("  {:<12} {:8.3f} s {:5.1f}% {:8} calls {:8.1f} us/call", kOpNames[i], t.seconds,
                 100.0 * t.seconds / std::max(total, 1e-12), t.calls, 1e6 * t.seconds / t.calls);
  }
}

std::string CpuBackend::name() const {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  const char* isa = f.avx512_bf16 ? "avx512_bf16"
                    : f.avx512    ? "avx512"
                    : f.avx2_fma  ? "avx2"
                                  : "portable";
  return fmt::format("cpu ({} threads, {})", threads_, isa);
}

void* CpuBackend::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    fail("cpu backend: could not allocate {} bytes of RAM; lower the batch size or free memory",
         bytes);
  }
  return p;
}

void CpuBackend::deallocate(void* p, size_t) {
  std::free(p);
}

void CpuBackend::copy_to_device(void* dst, const void* src_host, size_t bytes) {
  if (dst != src_host && bytes > 0) std::memcpy(dst, src_host, bytes);
}
void CpuBackend::copy_to_host(void* dst_host, const void* src, size_t bytes) {
  if (dst_host != src && bytes > 0) std::memcpy(dst_host, src, bytes);
}
void CpuBackend::copy(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}
void CpuBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

void CpuBackend::matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                        const MatrixView& w, const float* bias, int64_t m, DType compute) {
  Timer timer(*this, Op::kMatmul);
  cpu::ScopedOmpThreads t(threads_);
  check(cpu::matmul(*matmul_cache_, y, y_stride, x, x_stride, w.data, w.dtype, w.row_bytes, bias, m,
                    w.rows, w.cols, cpu_compute(compute)),
        "matmul", "m={} n={} k={} w={} compute={}", m, w.rows, w.cols, dtype_name(w.dtype),
        dtype_name(compute));
}

void CpuBackend::matmul_parts(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                              const MatmulPart* parts, size_t n_parts, int64_t m, DType compute) {
  Timer timer(*this, Op::kMatmul);
  cpu::ScopedOmpThreads t(threads_);
  static_assert(kMaxMatmulParts <= cpu::kMaxWeightParts);
  if (n_parts == 0 || n_parts > kMaxMatmulParts) {
    fail("cpu backend: matmul_parts: {} parts (1 to {})", n_parts, kMaxMatmulParts);
  }
  const int64_t k = parts[0].w.cols;
  std::array<cpu::WeightPart, kMaxMatmulParts> ws;
  int64_t rows = 0;
  for (size_t i = 0; i < n_parts; ++i) {
    const MatmulPart& p = parts[i];
    if (p.w.cols != k) {
      fail("cpu backend: matmul_parts: part {} has {} columns, part 0 {}", i, p.w.cols, k);
    }
    ws[i] = {p.w.data, p.w.dtype, p.w.row_bytes, p.bias, p.w.rows};
    rows += p.w.rows;
  }
  check(cpu::matmul_parts(*matmul_cache_, y, y_stride, x, x_stride,
                          cpu::WeightParts(ws.data(), n_parts), m, k, cpu_compute(compute)),
        "matmul", "m={} parts={} rows={} k={} w={} compute={}", m, n_parts, rows, k,
        dtype_name(parts[0].w.dtype), dtype_name(compute));
}

void CpuBackend::rms_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                          const float* w, float eps, int64_t n_rows, int64_t d) {
  Timer timer(*this, Op::kNorm);
  cpu::ScopedOmpThreads t(threads_);
  check(cpu::rms_norm(y, y_stride, x, x_stride, w, eps, n_rows, d), "rms_norm", "rows={} d={}",
        n_rows, d);
}

void CpuBackend::layer_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                            const float* w, const float* b, float eps, int64_t n_rows, int64_t d) {
  Timer timer(*this, Op::kNorm);
  cpu::ScopedOmpThreads t(threads_);
  check(cpu::layer_norm(y, y_stride, x, x_stride, w, b, eps, n_rows, d), "layer_norm",
        "rows={} d={}", n_rows, d);
}

void CpuBackend::rope(float* q, int64_t q_stride, int64_t n_head, float* k, int64_t k_stride,
                      int64_t n_kv_head, int64_t head_dim, const int32_t* pos, int64_t n_tokens,
                      const float* inv_freq, int64_t rot_dim, RopePairs pairs) {
  Timer timer(*this, Op::kRope);
  cpu::ScopedOmpThreads t(threads_);
  const cpu::RopeLayout layout =
      pairs == RopePairs::kHalf ? cpu::RopeLayout::kHalf : cpu::RopeLayout::kInterleaved;
  check(cpu::rope(q, q_stride, n_head, k, k_stride, n_kv_head, head_dim, pos, n_tokens, inv_freq,
                  rot_dim, layout),
        "rope", "tokens={} heads={}/{} head_dim={} rot_dim={}", n_tokens, n_head, n_kv_head,
        head_dim, rot_dim);
}

void CpuBackend::activation(ActFn f, float* y, int64_t y_stride, const float* x, int64_t x_stride,
                            int64_t n_rows, int64_t d) {
  Timer timer(*this, Op::kElementwise);
  cpu::ScopedOmpThreads t(threads_);
  check(cpu::activation(cpu::activation_of(f), y, y_stride, x, x_stride, n_rows, d), "activation",
        "rows={} d={}", n_rows, d);
}

void CpuBackend::swiglu(float* y, int64_t y_stride, const float* gate, int64_t gate_stride,
                        const float* up, int64_t up_stride, int64_t n_rows, int64_t d) {
  Timer timer(*this, Op::kElementwise);
  cpu::ScopedOmpThreads t(threads_);
  check(cpu::swiglu(y, y_stride, gate, gate_stride, up, up_stride, n_rows, d), "swiglu",
        "rows={} d={}", n_rows, d);
}

void CpuBackend::add(float* y, int64_t y_stride, const float* a, int64_t a_stride, const float* b,
                     int64_t b_stride, int64_t n_rows, int64_t d) {
  Timer timer(*this, Op::kElementwise);
  cpu::ScopedOmpThreads t(threads_);
  check(cpu::add(y, y_stride, a, a_stride, b, b_stride, n_rows, d), "add", "rows={} d={}", n_rows,
        d);
}

void CpuBackend::embedding(float* y, int64_t y_stride, const MatrixView& table, const int32_t* ids,
                           int64_t n_ids) {
  Timer timer(*this, Op::kEmbedding);
  cpu::ScopedOmpThreads t(threads_);
  check(cpu::embedding(y, y_stride, table.data, table.dtype, table.row_bytes, table.rows,
                       table.cols, ids, n_ids),
        "embedding", "ids={} table=[{}, {}] {}", n_ids, table.rows, table.cols,
        dtype_name(table.dtype));
}

void CpuBackend::gather_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                             const int32_t* rows, int64_t n_rows, int64_t d) {
  Timer timer(*this, Op::kEmbedding);
  if (n_rows == 0) return;
  if (y == nullptr || x == nullptr || rows == nullptr || y_stride < d || x_stride < d || d < 0) {
    fail("cpu backend: gather_rows failed: invalid argument (rows={} d={})", n_rows, d);
  }
  for (int64_t i = 0; i < n_rows; ++i) {
    STRATA_ASSERT(rows[i] >= 0);
    std::memcpy(y + i * y_stride, x + static_cast<int64_t>(rows[i]) * x_stride,
                static_cast<size_t>(d) * sizeof(float));
  }
}

void CpuBackend::kv_append(const KvLayer& kv, const float* k, int64_t k_stride, const float* v,
                           int64_t v_stride, const int64_t* slots, int64_t n_tokens,
                           const int32_t* touched, const int32_t* n_filled, int64_t n_touched) {
  cpu::ScopedOmpThreads t(threads_);
  std::optional<Timer> timer(std::in_place, *this, Op::kKvAppend);
  if (is_quantized(kv.dtype)) {
    // Quantized pages: the key min/max are folded from the f32 keys as they
    // are quantized (kernels/cpu/attention_quant.h).
    if (n_touched > 0 && n_tokens > 0 && (kv.k_min == nullptr || kv.k_max == nullptr)) {
      fail("cpu backend: kv_append failed: invalid argument (no key min/max arrays)");
    }
    check(cpu::kv_append_quant(kv.k_pages, kv.v_pages, kv.n_pages, kv.dtype, kv.page_size,
                               kv.n_kv_head, kv.head_dim, k, k_stride, v, v_stride, slots, n_tokens,
                               n_touched > 0 ? kv.k_min : nullptr,
                               n_touched > 0 ? kv.k_max : nullptr),
          "kv_append", "tokens={} pages={} kv_heads={} head_dim={} {}", n_tokens, kv.n_pages,
          kv.n_kv_head, kv.head_dim, dtype_name(kv.dtype));
    return;
  }
  check(cpu::kv_append(kv.k_pages, kv.v_pages, kv.n_pages, kv.dtype, kv.page_size, kv.n_kv_head,
                       kv.head_dim, k, k_stride, v, v_stride, slots, n_tokens),
        "kv_append", "tokens={} pages={} kv_heads={} head_dim={} {}", n_tokens, kv.n_pages,
        kv.n_kv_head, kv.head_dim, dtype_name(kv.dtype));
  if (n_touched == 0 || n_tokens == 0) return;
  timer.emplace(*this, Op::kKeyMinMax);
  // The new keys are folded into their pages' min/max in token order (a key
  // at offset 0 starts its page afresh): the same result as recomputing the
  // touched pages over their n_filled keys (cpu::page_key_minmax), since
  // keys are appended in order and the min/max of the earlier ones are
  // current, but it reads each new key once instead of every key of every
  // touched page again (a decode step touches one page per sequence).
  if (kv.k_min == nullptr || kv.k_max == nullptr) {
    fail("cpu backend: kv_append failed: invalid argument (no key min/max arrays)");
  }
  fold_key_minmax(kv, slots, n_tokens);
}

void CpuBackend::key_minmax(const KvLayer& kv, const int32_t* pages, const int32_t* n_filled,
                            int64_t n) {
  if (n == 0) return;
  cpu::ScopedOmpThreads t(threads_);
  Timer timer(*this, Op::kKeyMinMax);
  if (is_quantized(kv.dtype)) {
    fail("cpu backend: key_minmax: the min/max of {} pages are folded as they are quantized",
         dtype_name(kv.dtype));
  }
  check(cpu::page_key_minmax(kv.k_min, kv.k_max, kv.k_pages, kv.n_pages, kv.dtype, kv.page_size,
                             kv.n_kv_head, kv.head_dim, pages, n_filled, n),
        "key_minmax", "pages={} of {}", n, kv.n_pages);
}

void CpuBackend::fold_key_minmax(const KvLayer& kv, const int64_t* slots, int64_t n_tokens) {
  const int64_t row = kv.n_kv_head * kv.head_dim;
  const int64_t eb = kv.dtype == DType::kF32 ? 4 : 2;
  constexpr int64_t kChunk = 64;  // elements of a row per work item
  const int64_t n_chunks = (row + kChunk - 1) / kChunk;
  const int n_threads = static_cast<int>(
      std::min<int64_t>(n_chunks, cpu::threads_for(n_tokens * row, int64_t{1} << 15)));
#pragma omp parallel for schedule(static) num_threads(n_threads)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t e0 = c * kChunk;
    const int64_t en = std::min(kChunk, row - e0);
    alignas(64) float buf[kChunk];
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int64_t page = slots[t] / kv.page_size;
      const int64_t off = slots[t] % kv.page_size;
      const char* src = static_cast<const char*>(kv.k_pages[page]) + (off * row + e0) * eb;
      switch (kv.dtype) {
        case DType::kF32:
          std::memcpy(buf, src, static_cast<size_t>(en) * 4);
          break;
        case DType::kF16:
          f16_to_f32_row(reinterpret_cast<const uint16_t*>(src), buf, en);
          break;
        default:
          bf16_to_f32_row(reinterpret_cast<const uint16_t*>(src), buf, en);
          break;
      }
      float* mn = kv.k_min + page * row + e0;
      float* mx = kv.k_max + page * row + e0;
      if (off == 0) {
        std::memcpy(mn, buf, static_cast<size_t>(en) * 4);
        std::memcpy(mx, buf, static_cast<size_t>(en) * 4);
        continue;
      }
      // A NaN key element makes that min and max element NaN.
      for (int64_t e = 0; e < en; ++e) {
        const float x = buf[e];
        mn[e] = (x < mn[e] || x != x) ? x : mn[e];
        mx[e] = (x > mx[e] || x != x) ? x : mx[e];
      }
    }
  }
}

void CpuBackend::attention(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                           int64_t n_head, const KvLayer& kv, const AttentionSeqs& seqs,
                           float scale) {
  Timer timer(*this, Op::kAttention);
  cpu::ScopedOmpThreads t(threads_);
  const cpu::KvPages pages{const_cast<const void* const*>(kv.k_pages),
                           const_cast<const void* const*>(kv.v_pages),
                           kv.n_pages,
                           kv.dtype,
                           kv.page_size,
                           kv.n_kv_head,
                           kv.head_dim};
  const cpu::AttentionBatch batch{seqs.n_seq,       seqs.q_indptr, seqs.kv_len,
                                  seqs.page_indptr, seqs.page_ids, seqs.lists};
  check(cpu::paged_attention(out, out_stride, q, q_stride, n_head, pages, batch, scale),
        "attention", "seqs={} heads={}/{} head_dim={} pages={} {}", seqs.n_seq, n_head,
        kv.n_kv_head, kv.head_dim, kv.n_pages, dtype_name(kv.dtype));
}

void CpuBackend::select_pages(const float* q, int64_t q_stride, int64_t n_head, const KvLayer& kv,
                              const AttentionSeqs& seqs, int64_t budget_pages, bool keep_first,
                              const int32_t* sel_indptr, int32_t* sel_ids) {
  cpu::ScopedOmpThreads t(threads_);
  cpu::PageSelect sel;
  sel.k_min = kv.k_min;
  sel.k_max = kv.k_max;
  sel.n_pages = kv.n_pages;
  sel.n_kv_head = kv.n_kv_head;
  sel.head_dim = kv.head_dim;
  sel.page_size = kv.page_size;
  sel.budget_pages = budget_pages;
  sel.keep_first = keep_first;
  const cpu::AttentionBatch batch{seqs.n_seq,       seqs.q_indptr, seqs.kv_len,
                                  seqs.page_indptr, seqs.page_ids, seqs.lists};
  check(cpu::select_pages(q, q_stride, n_head, sel, batch, sel_indptr, sel_ids), "select_pages",
        "seqs={} heads={}/{} head_dim={} pages={} budget={} pages", seqs.n_seq, n_head,
        kv.n_kv_head, kv.head_dim, kv.n_pages, budget_pages);
}

cpu::Activation cpu::activation_of(ActFn f) {
  switch (f) {
    case ActFn::kRelu:
      return cpu::Activation::kRelu;
    case ActFn::kGelu:
      return cpu::Activation::kGelu;
    case ActFn::kGeluTanh:
      return cpu::Activation::kGeluTanh;
    case ActFn::kSilu:
      return cpu::Activation::kSilu;
  }
  STRATA_ASSERT(false);
}

}  // namespace strata
