#include "kernels/cpu/matmul_f32_dot.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/step_prefetch.h"
#include "quant/blocks.h"
#include "quant/convert.h"

namespace strata::cpu {

namespace {

constexpr int64_t kLanes = 8;
// Elements of a row per pass of the tiles (multiples of every block size,
// 256 at most): the strip's part and the rows of x it meets stay in L1.
constexpr int64_t kChunk = 512;         // widened into the stage (4 rows x 2 KiB)
constexpr int64_t kChunkInPlace = 256;  // read in place
constexpr int64_t kMr = 3;              // rows of x per micro-tile (12 accumulators)
constexpr int64_t kR = kF32DotRows;
constexpr int64_t kPrefetchStrips = 1;  // weight strips read ahead
constexpr size_t kPrefetchMinBytes = 2048;  // of them per chunk, at least

int64_t round_up(int64_t v, int64_t q) {
  return (v + q - 1) / q * q;
}

// Round to bf16 in place (nearest even, as core's f32_to_bf16), through
// quant's row converters.
void round_bf16(float* v, int64_t n) {
  uint16_t h[kChunk];
  for (int64_t e = 0; e < n; e += kChunk) {
    const int64_t len = std::min(kChunk, n - e);
    f32_to_bf16_row(v + e, h, len);
    bf16_to_f32_row(h, v + e, len);
  }
}

#if defined(__x86_64__)
#define STRATA_AVX2 __attribute__((target("avx2,fma,f16c")))

// How the micro-kernel reads W: f32 (the stage, or f32 rows in place), or
// f16 / bf16 rows in place, widened in registers (exactly: every f16 and
// bf16 value is an f32 value; F16C quiets a signalling NaN, which a product
// would quiet anyway).
enum class WLoad { kF32, kF16, kBF16 };

template <WLoad L>
STRATA_AVX2 inline __m256 load_w(const uint8_t* w, int64_t e) {
  if constexpr (L == WLoad::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + e);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * e));
    if constexpr (L == WLoad::kF16) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

// part[(i * kR + r) * 8 ..] += x[i, 0..len) * w[r, 0..len) lane by lane, for
// MR rows of x (ldx apart) and kR weight rows (w_ld bytes apart); len a
// multiple of 8.
template <int MR, WLoad L>
STRATA_AVX2 void micro(const float* x, int64_t ldx, const uint8_t* w, size_t w_ld, int64_t len,
                       float* part) {
  __m256 a[MR][kR];
#pragma GCC unroll 3
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) a[i][r] = _mm256_load_ps(part + (i * kR + r) * kLanes);
  }
  for (int64_t e = 0; e < len; e += kLanes) {
    __m256 xv[MR];
#pragma GCC unroll 3
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * ldx + e);
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const __m256 wv = load_w<L>(w + r * w_ld, e);
#pragma GCC unroll 3
      for (int i = 0; i < MR; ++i) a[i][r] = _mm256_fmadd_ps(xv[i], wv, a[i][r]);
    }
  }
#pragma GCC unroll 3
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) _mm256_store_ps(part + (i * kR + r) * kLanes, a[i][r]);
  }
}

using MicroFn = void (*)(const float*, int64_t, const uint8_t*, size_t, int64_t, float*);
template <WLoad L>
constexpr MicroFn kMicro[kMr + 1] = {nullptr, micro<1, L>, micro<2, L>, micro<3, L>};

// Quantized rows in place: elements [o, o + 8) of a block (o a multiple of
// 8) as quant's reference dequantizer makes them: d * q (Q8S), d * (q - 8)
// (Q4S), d * q then + m (asymmetric), a multiply then an add.
STRATA_AVX2 inline __m256 scale_of(uint16_t h) {
  return _mm256_set1_ps(_cvtsh_ss(h));
}

template <int G>
STRATA_AVX2 inline __m256 dequant8(const BlockQ8S<G>& b, int o, __m256 d, __m256) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + o));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d);
}

template <int G>
STRATA_AVX2 inline __m256 dequant8(const BlockQ8A<G>& b, int o, __m256 d, __m256 m) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + o));
  return _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), d), m);
}

// Element e of a 4-bit block of G: the low nibble of byte e (e < G/2), else
// the high nibble of byte e - G/2.
template <int G>
STRATA_AVX2 inline __m256i nibbles8(const uint8_t* qs, int o) {
  const bool high = o >= G / 2;
  const __m256i v = _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + (high ? o - G / 2 : o))));
  return _mm256_and_si256(high ? _mm256_srli_epi32(v, 4) : v, _mm256_set1_epi32(0x0f));
}

STRATA_AVX2 inline __m256 dequant8(const BlockQ4S32& b, int o, __m256 d, __m256) {
  const __m256i q = _mm256_sub_epi32(nibbles8<32>(b.qs, o), _mm256_set1_epi32(8));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(q), d);
}

template <int G>
STRATA_AVX2 inline __m256 dequant8(const BlockQ4A<G>& b, int o, __m256 d, __m256 m) {
  return _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(nibbles8<G>(b.qs, o)), d), m);
}

template <typename B>
STRATA_AVX2 inline __m256 min_of(const B& b) {
  if constexpr (requires { b.m; }) {
    return scale_of(b.m);
  } else {
    return _mm256_setzero_ps();
  }
}

// micro() for rows of quantized blocks B read in place (len a multiple of
// the group): each block of each row is widened in registers once per tile.
// At most 2 rows of x (8 accumulators beside the block's scale, minimum and
// vector).
template <int MR, typename B>
STRATA_AVX2 void micro_q(const float* x, int64_t ldx, const uint8_t* w, size_t w_ld, int64_t len,
                         float* part) {
  constexpr int G = B::kGroup;
  __m256 a[MR][kR];
#pragma GCC unroll 2
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) a[i][r] = _mm256_load_ps(part + (i * kR + r) * kLanes);
  }
  for (int64_t blk = 0; blk < len / G; ++blk) {
    const float* xb = x + blk * G;
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const B& b = reinterpret_cast<const B*>(w + r * w_ld)[blk];
      const __m256 d = scale_of(b.d);
      const __m256 m = min_of(b);
#pragma GCC unroll 16
      for (int o = 0; o < G; o += kLanes) {
        const __m256 wv = dequant8(b, o, d, m);
#pragma GCC unroll 2
        for (int i = 0; i < MR; ++i) {
          a[i][r] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + i * ldx + o), wv, a[i][r]);
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) _mm256_store_ps(part + (i * kR + r) * kLanes, a[i][r]);
  }
}

// Rows of x per tile of the in-place quantized kernels, and the most rows of
// x for which widening each block once per tile beats widening it once into
// the stage.
constexpr int64_t kQuantMr = 2;
constexpr int64_t kQuantInPlaceMaxM = 2;

template <typename B>
constexpr MicroFn kMicroQ[kMr + 1] = {nullptr, micro_q<1, B>, micro_q<2, B>, nullptr};

// The micro-kernels that read rows of type t in place, or null when rows of
// t (or with rounding to bf16) go through the stage.
const MicroFn* in_place_micro(DType t, bool round, int64_t m) {
  if (t == DType::kBF16) return kMicro<WLoad::kBF16>;  // already bf16: rounding keeps it
  if (round) return nullptr;
  if (t == DType::kF32) return kMicro<WLoad::kF32>;
  if (t == DType::kF16) return kMicro<WLoad::kF16>;
  const DTypeInfo& info = dtype_info(t);
  if (!info.quantized || info.dequant_only || m > kQuantInPlaceMaxM) return nullptr;
  const MicroFn* fns = nullptr;
  visit_block_type(t, [&](auto* tag) {
    using B = std::remove_pointer_t<decltype(tag)>;
    fns = kMicroQ<B>;
  });
  return fns;
}

// The 8 partial sums of a lane vector, added as ((0+4)+(2+6)) + ((1+5)+(3+7)).
STRATA_AVX2 float lane_sum(const float* p) {
  const __m256 v = _mm256_load_ps(p);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Strips [s0, s1) of kR weight rows against the m rows of xw (ldx apart,
// zero past k).
STRATA_AVX2 void strips(float* y, int64_t y_stride, const float* xw, int64_t ldx, const uint8_t* w,
                        DType t, size_t w_row_bytes, const float* bias, int64_t m, int64_t n,
                        int64_t k, bool round, int64_t s0, int64_t s1) {
  const DTypeInfo& info = dtype_info(t);
  // Rows read in place need whole vectors (no padding past k) and aligned rows.
  const MicroFn* direct =
      k % kLanes == 0 && w_row_bytes % static_cast<size_t>(info.block_bytes) == 0
          ? in_place_micro(t, round, m)
          : nullptr;
  const int64_t max_mr = direct != nullptr && info.quantized ? kQuantMr : kMr;
  alignas(32) float stage[kR * kChunk];
  alignas(32) float part[kF32DotMaxM * kR * kLanes];
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t j0 = s * kR;
    const int64_t rows = std::min(kR, n - j0);
    // A short last strip would read past W in place: it takes the stage.
    const bool in_place = direct != nullptr && rows == kR;
    // The strip kPrefetchStrips ahead, into L2 while this one is multiplied,
    // a share of it per chunk (step_prefetch.h).
    const int64_t chunk = in_place ? kChunkInPlace : kChunk;
    StepPrefetch ahead;
    if (s + kPrefetchStrips < s1) {
      ahead = StepPrefetch(w + static_cast<size_t>(j0 + kPrefetchStrips * kR) * w_row_bytes,
                           kR * w_row_bytes, static_cast<size_t>((k + chunk - 1) / chunk),
                           PrefetchInto::kL2, kPrefetchMinBytes);
    }
    std::fill_n(part, m * kR * kLanes, 0.0f);
    for (int64_t e0 = 0; e0 < k; e0 += chunk) {
      ahead.step();
      const int64_t len = std::min(chunk, k - e0);
      const int64_t padded = round_up(len, kLanes);
      const size_t off = static_cast<size_t>(e0 / info.block_elems) * info.block_bytes;
      const uint8_t* wr = w + static_cast<size_t>(j0) * w_row_bytes + off;
      size_t w_ld = w_row_bytes;
      const MicroFn* fns = direct;
      int64_t tile = max_mr;
      if (!in_place) {
        for (int64_t r = 0; r < kR; ++r) {
          float* row = stage + r * kChunk;
          if (r < rows) {
            row_to_f32(t, wr + static_cast<size_t>(r) * w_row_bytes, row, len);
            std::fill(row + len, row + padded, 0.0f);
            if (round) round_bf16(row, padded);
          } else {
            std::fill_n(row, padded, 0.0f);
          }
        }
        wr = reinterpret_cast<const uint8_t*>(stage);
        w_ld = kChunk * sizeof(float);
        fns = kMicro<WLoad::kF32>;
        tile = kMr;
      }
      for (int64_t i0 = 0; i0 < m; i0 += tile) {
        const int64_t mr = std::min(tile, m - i0);
        fns[mr](xw + i0 * ldx + e0, ldx, wr, w_ld, padded, part + i0 * kR * kLanes);
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        const float b = bias != nullptr ? bias[j0 + r] : 0.0f;
        y[i * y_stride + j0 + r] = lane_sum(part + (i * kR + r) * kLanes) + b;
      }
    }
  }
}
#endif  // __x86_64__

}  // namespace

bool matmul_f32_dot_ok(int64_t m) {
#if defined(__x86_64__)
  return cpu_features().avx2_fma && m >= 1 && m <= kF32DotMaxM;
#else
  (void)m;
  return false;
#endif
}

size_t matmul_f32_dot_ws_bytes(int64_t m, int64_t k) {
  return static_cast<size_t>(m * round_up(k, kLanes)) * sizeof(float);
}

Status matmul_f32_dot(float* y, int64_t y_stride, const float* x, int64_t x_stride,
                      WeightParts parts, int64_t m, int64_t k, bool round_bf16_, void* ws,
                      int n_threads) {
#if defined(__x86_64__)
  if (!matmul_f32_dot_ok(m)) return Status::kUnsupported;
  const int64_t ldx = round_up(k, kLanes);
  auto* xw = static_cast<float*>(ws);
  for (int64_t i = 0; i < m; ++i) {
    std::copy_n(x + i * x_stride, k, xw + i * ldx);
    std::fill(xw + i * ldx + k, xw + (i + 1) * ldx, 0.0f);
    if (round_bf16_) round_bf16(xw + i * ldx, ldx);
  }
  const int64_t n_strips = count_units(parts, kR);
  const int nt = static_cast<int>(std::min<int64_t>(n_threads, n_strips));
#pragma omp parallel num_threads(nt)
  {
    int64_t s0 = 0, s1 = 0;
    split_range(n_strips, omp_get_num_threads(), omp_get_thread_num(), &s0, &s1);
    for_unit_rows(parts, kR, s0, s1, [&](size_t i, int64_t col, int64_t j0, int64_t j1) {
      const WeightPart& p = parts[i];
      strips(y + col, y_stride, xw, ldx, static_cast<const uint8_t*>(p.w), p.dtype, p.row_bytes,
             p.bias, m, p.n, k, round_bf16_, j0 / kR, (j1 + kR - 1) / kR);
    });
  }
  return Status::kOk;
#else
  (void)y, (void)y_stride, (void)x, (void)x_stride, (void)parts, (void)m, (void)k,
      (void)round_bf16_, (void)ws, (void)n_threads;
  return Status::kUnsupported;
#endif
}

}  // namespace strata::cpu
