// The GEMM path of cpu::matmul (kernels/cpu/matmul_gemm.h).
#include "kernels/cpu/matmul_gemm.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <unordered_map>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"
#include "quant/convert.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"

namespace strata::cpu {

namespace {

using dt = dnnl::memory::data_type;
using md_t = dnnl::memory::desc;
using gemm::Buffer;
using gemm::Kind;
using gemm::Prim;
using gemm::PrimKey;

constexpr size_t kPanelBytes = size_t{256}
                               << 10;  // converted W rows per thread (L2: 1 MB on Zen 4)
constexpr int64_t kMaxTile = 64;       // tokens per GEMM on the swapped path
constexpr int64_t kStageFloats = 512;  // f32 staging of a W row chunk (L1)

int64_t round_up(int64_t v, int64_t q) {
  return (v + q - 1) / q * q;
}
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

dt dnnl_type(ComputeType c) {
  return c == ComputeType::kBF16 ? dt::bf16 : dt::f32;
}
int64_t elem_size(ComputeType c) {
  return c == ComputeType::kBF16 ? 2 : 4;
}

struct Plan {
  bool swapped = false;
  bool direct = false;  // W rows used in place, no conversion
  int64_t pn = 0;       // W rows per panel (the last panel has the rest)
  int64_t n_panels = 0;
  int64_t mt = 0;  // swapped: tokens per tile (the last tile has the rest)
  int64_t n_mtiles = 0;
  int64_t n_mchunks = 1;  // swapped: each panel's tiles split over this many units
  int64_t n_units = 0;
  int n_threads = 1;

  int64_t panel_rows(int64_t p, int64_t n) const { return p + 1 < n_panels ? pn : n - p * pn; }
  int64_t tile_rows(int64_t t, int64_t m) const { return t + 1 < n_mtiles ? mt : m - t * mt; }
};

Plan make_plan(int64_t m, int64_t n, int64_t k, DType w_dtype, size_t w_row_bytes,
               ComputeType compute, bool round_w = false) {
  Plan p;
  const int64_t esz = elem_size(compute);
  p.swapped = m >= swap_min_m(compute);
  // W rows are used in place when they already are the compute dtype and
  // dense (oneDNN's brgemm reads only dense [rows, k] operands).
  p.direct = ((compute == ComputeType::kF32 && w_dtype == DType::kF32) ||
              (compute == ComputeType::kBF16 && w_dtype == DType::kBF16)) &&
             w_row_bytes == static_cast<size_t>(k * esz) && !round_w;
  p.n_threads = matmul_threads(m, n, k);
  const int64_t t = p.n_threads;

  const int64_t cap =
      std::max<int64_t>(16, static_cast<int64_t>(kPanelBytes) / (k * esz) / 16 * 16);
  int64_t n_panels = ceil_div(n, cap);
  if (n_panels < 4 * t) n_panels = round_up(n_panels, t);  // even shares for every thread
  n_panels = std::max<int64_t>(1, std::min(n_panels, ceil_div(n, 8)));
  p.pn = ceil_div(n, n_panels);
  p.n_panels = ceil_div(n, p.pn);

  if (p.swapped) {
    // Tiles of at most kMaxTile tokens, as even as whole 16-lane vectors allow.
    p.n_mtiles = ceil_div(m, kMaxTile);
    p.mt = p.n_mtiles == 1 ? m : std::min(kMaxTile, round_up(ceil_div(m, p.n_mtiles), 16));
    p.n_mtiles = ceil_div(m, p.mt);
    if (p.n_panels < t) p.n_mchunks = std::min(p.n_mtiles, ceil_div(t, p.n_panels));
  }
  p.n_units = p.n_panels * p.n_mchunks;
  p.n_threads = static_cast<int>(std::min<int64_t>(t, p.n_units));
  return p;
}

}  // namespace

void MatmulCache::Impl::init() {
  if (!engine) engine.emplace(dnnl::engine::kind::cpu, 0);
}

void MatmulCache::Impl::note_impl(const dnnl::matmul::primitive_desc& pd, const PrimKey& key) {
  const char* impl = pd.impl_info_str();
  spdlog::debug("matmul: oneDNN primitive {} for rows={} cols={} k={} ({})",
                key.kind == Kind::kSwapped ? "swapped" : "small-m", key.rows, key.cols, key.k,
                impl);
  if (!warned_ref && std::strncmp(impl, "ref", 3) == 0) {
    warned_ref = true;
    spdlog::warn(
        "matmul: oneDNN has no optimised kernel for this CPU and shape (using {}); "
        "matrix products will be slow",
        impl);
  }
}

const md_t& MatmulCache::Impl::packed_x_md(ComputeType c, int64_t mt, int64_t k) {
  auto key = std::make_tuple(c, mt, k);
  auto it = packed_x_mds.find(key);
  if (it != packed_x_mds.end()) return it->second;
  ScopedOmpThreads one(1);
  const md_t a({256, k}, dnnl_type(c), {k, 1});
  const md_t b({k, mt}, dnnl_type(c), dnnl::memory::format_tag::any);
  const md_t d({256, mt}, dt::f32, {mt, 1});
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, d), *engine);
  return packed_x_mds.emplace(key, pd.weights_desc()).first->second;
}

const Prim& MatmulCache::Impl::prim(const PrimKey& key) {
  auto it = prims.find(key);
  if (it != prims.end()) return it->second;
  // Executed inside our parallel regions, so created single-threaded.
  ScopedOmpThreads one(1);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dt type = dnnl_type(key.compute);
  Prim p;
  if (key.kind == Kind::kSwapped) {
    const md_t a({key.rows, key.k}, type, {key.lda, 1});
    const md_t& b = packed_x_md(key.compute, key.cols, key.k);
    const md_t d({key.rows, key.cols}, dt::f32, {key.ldc, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, d), attr, *engine);
    note_impl(pd, key);
    p.prim = dnnl::matmul(pd);
    p.b_md = b;
    p.scratch_bytes = pd.scratchpad_desc().get_size();
  } else {
    const int64_t rt = DNNL_RUNTIME_DIM_VAL;
    const md_t a({rt, key.k}, type, {key.lda, 1});
    const md_t b({key.k, key.cols}, type, {1, key.ldb});
    const md_t d({rt, key.cols}, dt::f32, {key.ldc, 1});
    std::optional<dnnl::matmul::primitive_desc> pd;
    if (key.bias) {
      const md_t bias({1, key.cols}, dt::f32, {key.cols, 1});
      pd.emplace(dnnl::matmul::desc(a, b, bias, d), attr, *engine);
    } else {
      pd.emplace(dnnl::matmul::desc(a, b, d), attr, *engine);
    }
    note_impl(*pd, key);
    p.prim = dnnl::matmul(*pd);
    p.scratch_bytes = pd->scratchpad_desc().get_size();
  }
  return prims.emplace(key, std::move(p)).first->second;
}

dnnl::reorder& MatmulCache::Impl::x_reorder(ComputeType c, int64_t mt, int64_t k, int64_t ldx) {
  auto key = std::make_tuple(c, mt, k, ldx);
  auto it = x_reorders.find(key);
  if (it != x_reorders.end()) return it->second;
  // Executed inside our parallel regions, so created single-threaded.
  const md_t& dst = packed_x_md(c, mt, k);
  ScopedOmpThreads one(1);
  const md_t src({k, mt}, dt::f32, {1, ldx});
  dnnl::reorder::primitive_desc pd(*engine, src, *engine, dst);
  return x_reorders.emplace(key, dnnl::reorder(pd)).first->second;
}

void MatmulCache::Impl::ensure_threads(int n) {
  if (static_cast<int>(threads.size()) < n) threads.resize(static_cast<size_t>(n));
  for (auto& t : threads) {
    if (!t.stream) t.stream.emplace(*engine);
  }
}

namespace {

#if defined(__x86_64__)
// f32 -> bf16, round to nearest even, with vcvtne2ps2bf16: the same bits as
// core's f32_to_bf16 except that f32 subnormals become zero (no quantized or
// f16 value is an f32 subnormal, and the tests' tolerances allow k 2^-126).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void f32_to_bf16_native(
    const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(y + i, reinterpret_cast<const __m512i&>(v));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm256_mask_storeu_epi16(y + i, m, reinterpret_cast<const __m256i&>(v));
  }
}
#endif

// One W row as bf16 for the panel. With AVX512_BF16, widen to f32 in
// L1-sized chunks (quant's f32 dequantizers are about twice as fast as its
// bit-exact bf16 ones) and narrow with vcvtne2ps2bf16.
void row_to_bf16_panel(DType t, const void* x, uint16_t* y, int64_t k, float* stage) {
#if defined(__x86_64__)
  if (!cpu_features().avx512_bf16 || t == DType::kBF16) return row_to_bf16(t, x, y, k);
  if (t == DType::kF32) return f32_to_bf16_native(static_cast<const float*>(x), y, k);
  const int64_t g = dtype_info(t).block_elems;
  const int64_t chunk = kStageFloats / g * g;
  for (int64_t c0 = 0; c0 < k; c0 += chunk) {
    const int64_t cn = std::min(chunk, k - c0);
    const char* src = static_cast<const char*>(x) + row_bytes(t, c0);
    if (t == DType::kF16) {
      f16_to_f32_row(reinterpret_cast<const uint16_t*>(src), stage, cn);
    } else {
      dequantize_row(t, src, stage, cn);
    }
    f32_to_bf16_native(stage, y + c0, cn);
  }
#else
  (void)stage;
  row_to_bf16(t, x, y, k);
#endif
}

// y[i, r] = tmp[r, i] (+ bias[r]) for a [pn, mt] product tile.
STRATA_CLONES void transpose_out(float* y, int64_t y_stride, const float* tmp, int64_t ld_tmp,
                                 int64_t pn, int64_t mt, const float* bias) {
  constexpr int64_t kB = 16;
  for (int64_t r0 = 0; r0 < pn; r0 += kB) {
    const int64_t rn = std::min(kB, pn - r0);
    for (int64_t i = 0; i < mt; ++i) {
      float* yr = y + i * y_stride + r0;
      const float* t = tmp + r0 * ld_tmp + i;
      if (bias != nullptr) {
#pragma omp simd
        for (int64_t r = 0; r < rn; ++r) yr[r] = t[r * ld_tmp] + bias[r0 + r];
      } else {
#pragma omp simd
        for (int64_t r = 0; r < rn; ++r) yr[r] = t[r * ld_tmp];
      }
    }
  }
}

// Rounds f32 values to bf16 precision (nearest even), kept as f32.
void round_to_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

Status run_matmul(MatmulCache::Impl& c, float* y, int64_t y_stride, const float* x,
                  int64_t x_stride, const void* w, DType w_dtype, size_t w_row_bytes,
                  const float* bias, int64_t m, int64_t n, int64_t k, ComputeType compute,
                  bool round_w = false) {
  c.init();
  const Plan plan = make_plan(m, n, k, w_dtype, w_row_bytes, compute, round_w);
  const int64_t esz = elem_size(compute);
  const int64_t lda = k;  // row stride of a panel (W rows are dense when used in place)
  const char* w_bytes = static_cast<const char*>(w);

  // Primitives, workspaces and the shared operand, all before the parallel region.
  // prims[2 * last_panel + last_tile]: the primitives of the panel and tile
  // shapes this call uses (null for shapes it does not have).
  const Prim* prims[4] = {nullptr, nullptr, nullptr, nullptr};
  dnnl::reorder* x_reorders[2] = {nullptr, nullptr};  // swapped: [last_tile]
  const md_t* x_mds[2] = {nullptr, nullptr};          // swapped: packed layout, [last_tile]
  size_t scratch = 0;
  std::vector<size_t> tile_offset;
  if (plan.swapped) {
    for (int64_t p : {int64_t{0}, plan.n_panels - 1}) {
      for (int64_t t : {int64_t{0}, plan.n_mtiles - 1}) {
        const int64_t rows = plan.panel_rows(p, n);
        const int64_t cols = plan.tile_rows(t, m);
        const Prim*& pr = prims[2 * (p + 1 == plan.n_panels) + (t + 1 == plan.n_mtiles)];
        pr = &c.prim({Kind::kSwapped, compute, rows, cols, k, lda, 0, cols, false});
        scratch = std::max(scratch, pr->scratch_bytes);
      }
    }
    size_t offset = 0;
    for (int64_t t = 0; t < plan.n_mtiles; ++t) {
      tile_offset.push_back(offset);
      offset += c.packed_x_md(compute, plan.tile_rows(t, m), k).get_size();
    }
    if (!c.x_ws.ensure(offset)) return Status::kOutOfMemory;
    const int64_t last_mt = plan.tile_rows(plan.n_mtiles - 1, m);
    x_reorders[0] = &c.x_reorder(compute, plan.mt, k, x_stride);
    x_reorders[1] = &c.x_reorder(compute, last_mt, k, x_stride);
    x_mds[0] = &c.packed_x_md(compute, plan.mt, k);
    x_mds[1] = &c.packed_x_md(compute, last_mt, k);
  } else {
    const int64_t ld_x = compute == ComputeType::kBF16 ? k : x_stride;
    for (int64_t p : {int64_t{0}, plan.n_panels - 1}) {
      const int64_t cols = plan.panel_rows(p, n);
      const Prim*& pr = prims[2 * (p + 1 == plan.n_panels)];
      pr = &c.prim({Kind::kSmallM, compute, 0, cols, k, ld_x, lda, y_stride, bias != nullptr});
      scratch = std::max(scratch, pr->scratch_bytes);
    }
    if (compute == ComputeType::kBF16 && !c.x_ws.ensure(static_cast<size_t>(m * k * 2))) {
      return Status::kOutOfMemory;
    }
  }
  c.ensure_threads(plan.n_threads);
  for (int i = 0; i < plan.n_threads; ++i) {
    auto& ws = c.threads[static_cast<size_t>(i)];
    bool ok = ws.scratch.ensure(std::max<size_t>(scratch, 64));
    if (!plan.direct) ok = ok && ws.panel.ensure(static_cast<size_t>(plan.pn * k * esz));
    if (plan.swapped) ok = ok && ws.tmp.ensure(static_cast<size_t>(plan.pn * plan.mt * 4));
    if (!ok) return Status::kOutOfMemory;
  }

  std::atomic<int> failed{0};
#pragma omp parallel num_threads(plan.n_threads)
  {
    // oneDNN must run single-threaded in here, also when the team has one
    // member: a team of one is not an active region (omp_in_parallel() is
    // false), so oneDNN would open a nested team of the whole budget on
    // every call (measured: 3-10x slower m = 1 products in a decode step).
    ScopedOmpThreads single(1);
    const int tid = omp_get_thread_num();
    auto& ws = c.threads[static_cast<size_t>(tid)];
    int64_t u0 = 0, u1 = 0;
    split_range(plan.n_units, omp_get_num_threads(), tid, &u0, &u1);
    int64_t converted = -1;  // panel now in ws.panel
    alignas(64) float stage[kStageFloats];
    // The shared operand first: x packed into tiles (swapped) or rounded to
    // bf16 (small m), split over the threads; the loop's barrier publishes it.
    if (plan.swapped) {
#pragma omp for schedule(static)
      for (int64_t t = 0; t < plan.n_mtiles; ++t) {
        try {
          const int64_t cols = plan.tile_rows(t, m);
          dnnl::memory src(md_t({k, cols}, dt::f32, {1, x_stride}), *c.engine,
                           const_cast<float*>(x + t * plan.mt * x_stride));
          dnnl::memory dst(*x_mds[t + 1 == plan.n_mtiles], *c.engine,
                           c.x_ws.data() + tile_offset[static_cast<size_t>(t)]);
          x_reorders[t + 1 == plan.n_mtiles]->execute(*ws.stream, src, dst);
        } catch (const dnnl::error&) {
          failed.store(1);
        }
      }
    } else if (compute == ComputeType::kBF16) {
      auto* xb = reinterpret_cast<uint16_t*>(c.x_ws.data());
#pragma omp for schedule(static)
      for (int64_t i = 0; i < m; ++i) f32_to_bf16_row(x + i * x_stride, xb + i * k, k);
    }
    try {
      for (int64_t u = u0; u < u1 && failed.load(std::memory_order_relaxed) == 0; ++u) {
        const int64_t p = u / plan.n_mchunks;
        const int64_t j0 = p * plan.pn;
        const int64_t rows = plan.panel_rows(p, n);
        const char* a = nullptr;
        if (plan.direct) {
          a = w_bytes + static_cast<size_t>(j0) * w_row_bytes;
        } else {
          if (converted != p) {
            for (int64_t r = 0; r < rows; ++r) {
              const void* src = w_bytes + static_cast<size_t>(j0 + r) * w_row_bytes;
              if (compute == ComputeType::kBF16) {
                row_to_bf16_panel(w_dtype, src,
                                  reinterpret_cast<uint16_t*>(ws.panel.data()) + r * k, k, stage);
              } else {
                float* row = reinterpret_cast<float*>(ws.panel.data()) + r * k;
                row_to_f32(w_dtype, src, row, k);
                if (round_w) round_to_bf16(row, k);
              }
            }
            converted = p;
          }
          a = ws.panel.data();
        }
        const bool last_panel = p + 1 == plan.n_panels;
        dnnl::memory scratch_mem(md_t({static_cast<int64_t>(ws.scratch.size())}, dt::u8, {1}),
                                 *c.engine, ws.scratch.data());
        if (plan.swapped) {
          int64_t t0 = 0, t1 = 0;
          split_range(plan.n_mtiles, plan.n_mchunks, u % plan.n_mchunks, &t0, &t1);
          for (int64_t t = t0; t < t1; ++t) {
            const bool last_tile = t + 1 == plan.n_mtiles;
            const int64_t cols = plan.tile_rows(t, m);
            const Prim& pr = *prims[(last_panel ? 2 : 0) + (last_tile ? 1 : 0)];
            const dt type = dnnl_type(compute);
            dnnl::memory a_mem(md_t({rows, k}, type, {lda, 1}), *c.engine, const_cast<char*>(a));
            dnnl::memory b_mem(pr.b_md, *c.engine,
                               c.x_ws.data() + tile_offset[static_cast<size_t>(t)]);
            dnnl::memory d_mem(md_t({rows, cols}, dt::f32, {cols, 1}), *c.engine, ws.tmp.data());
            pr.prim.execute(*ws.stream, {{DNNL_ARG_SRC, a_mem},
                                         {DNNL_ARG_WEIGHTS, b_mem},
                                         {DNNL_ARG_DST, d_mem},
                                         {DNNL_ARG_SCRATCHPAD, scratch_mem}});
            transpose_out(y + t * plan.mt * y_stride + j0, y_stride,
                          reinterpret_cast<const float*>(ws.tmp.data()), cols, rows, cols,
                          bias != nullptr ? bias + j0 : nullptr);
          }
        } else {
          const Prim& pr = *prims[last_panel ? 2 : 0];
          const dt type = dnnl_type(compute);
          const bool bf16_x = compute == ComputeType::kBF16;
          const int64_t ld_x = bf16_x ? k : x_stride;
          void* x_ptr = bf16_x ? static_cast<void*>(c.x_ws.data()) : const_cast<float*>(x);
          dnnl::memory a_mem(md_t({m, k}, type, {ld_x, 1}), *c.engine, x_ptr);
          dnnl::memory b_mem(md_t({k, rows}, type, {1, lda}), *c.engine, const_cast<char*>(a));
          dnnl::memory d_mem(md_t({m, rows}, dt::f32, {y_stride, 1}), *c.engine, y + j0);
          std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, a_mem},
                                                        {DNNL_ARG_WEIGHTS, b_mem},
                                                        {DNNL_ARG_DST, d_mem},
                                                        {DNNL_ARG_SCRATCHPAD, scratch_mem}};
          if (bias != nullptr) {
            args.emplace(DNNL_ARG_BIAS, dnnl::memory(md_t({1, rows}, dt::f32, {rows, 1}), *c.engine,
                                                     const_cast<float*>(bias + j0)));
          }
          pr.prim.execute(*ws.stream, args);
        }
      }
    } catch (const dnnl::error& e) {
      failed.store(1);
    } catch (const std::bad_alloc&) {
      failed.store(2);
    }
  }
  if (failed.load() == 1) return Status::kBackendError;
  if (failed.load() == 2) return Status::kOutOfMemory;
  return Status::kOk;
}

}  // namespace

int matmul_threads(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMinThreadWork = int64_t{1} << 17;  // multiply-adds worth waking a thread for
  const int64_t budget = omp_get_max_threads();
  return static_cast<int>(std::clamp<int64_t>(m * n * k / kMinThreadWork, int64_t{1}, budget));
}

Status matmul_gemm(MatmulCache::Impl& c, float* y, int64_t y_stride, const float* x,
                   int64_t x_stride, const WeightPart& p, int64_t m, int64_t k,
                   ComputeType compute) {
  try {
    if (compute == ComputeType::kBF16 && !native_bf16_products()) {
      if (!c.rounded_x.ensure(static_cast<size_t>(m * k) * sizeof(float))) {
        return Status::kOutOfMemory;
      }
      auto* xr = reinterpret_cast<float*>(c.rounded_x.data());
      for (int64_t i = 0; i < m; ++i) {
        std::copy_n(x + i * x_stride, k, xr + i * k);
        round_to_bf16(xr + i * k, k);
      }
      return run_matmul(c, y, y_stride, xr, k, p.w, p.dtype, p.row_bytes, p.bias, m, p.n, k,
                        ComputeType::kF32, true);
    }
    return run_matmul(c, y, y_stride, x, x_stride, p.w, p.dtype, p.row_bytes, p.bias, m, p.n, k,
                      compute);
  } catch (const dnnl::error& e) {
    return Status::kBackendError;
  } catch (const std::bad_alloc&) {
    return Status::kOutOfMemory;
  }
}

Status reserve_gemm(MatmulCache::Impl& c, int64_t max_m, int64_t n, int64_t k,
                    ComputeType compute) {
  try {
    c.init();
    // The largest workspaces come from the largest m on each path.
    for (int64_t m : {std::min(max_m, swap_min_m(compute) - 1), max_m}) {
      const Plan plan = make_plan(m, n, k, DType::kF32, 1, compute);  // never direct
      const int64_t esz = elem_size(compute);
      size_t x_bytes = static_cast<size_t>(m * k * 2);
      if (plan.swapped) {
        x_bytes = 0;
        for (int64_t t = 0; t < plan.n_mtiles; ++t) {
          x_bytes += c.packed_x_md(compute, plan.tile_rows(t, m), k).get_size();
        }
      }
      if (!c.x_ws.ensure(x_bytes)) return Status::kOutOfMemory;
      c.ensure_threads(plan.n_threads);
      for (int i = 0; i < plan.n_threads; ++i) {
        auto& ws = c.threads[static_cast<size_t>(i)];
        if (!ws.panel.ensure(static_cast<size_t>(plan.pn * k * esz)) ||
            !ws.tmp.ensure(static_cast<size_t>(plan.pn * std::max<int64_t>(plan.mt, 1) * 4))) {
          return Status::kOutOfMemory;
        }
      }
    }
  } catch (const dnnl::error&) {
    return Status::kBackendError;
  } catch (const std::bad_alloc&) {
    return Status::kOutOfMemory;
  }
  return Status::kOk;
}

}  // namespace strata::cpu
