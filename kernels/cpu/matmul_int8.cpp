#include "kernels/cpu/matmul_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/int8_panel.h"
#include "kernels/cpu/int8_weight_format.h"
#include "kernels/cpu/matmul_int8_avx2.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/step_prefetch.h"
#include "quant/gguf_integers.h"

namespace strata::cpu {

namespace {

using namespace int8_panel;

constexpr int64_t kMaxMr = 6;         // rows of x per micro-tile
constexpr int64_t kMChunk = 120;      // rows of x per pass over a panel (L2)
constexpr int64_t kPrefetchRows = 6;  // weight rows read ahead of their unpacking

// Offsets of the parts of the x workspace.
struct XLayout {
  size_t q = 0, d = 0, bt = 0, tf = 0, bytes = 0;
};

XLayout x_layout(int64_t m, int64_t k, int64_t group) {
  XLayout l;
  const int64_t ng = k / group;
  l.q = 0;
  l.d = static_cast<size_t>(round_up(m * k, 64));
  l.bt = l.d + static_cast<size_t>(round_up(m * ng * 4, 64));
  l.tf = l.bt + static_cast<size_t>(round_up(m * ng * 4, 64));
  l.bytes = l.tf + static_cast<size_t>(round_up(m * ng * 4, 64));
  return l;
}

// ---- Portable path: the same float operations in the same order. ----

// s[g] = sum u[e] * q[e] over group g of `group` values, for the k / group
// groups of a row, exactly.
void group_dots(const uint8_t* u, const int8_t* q, int64_t k, int64_t group, int32_t* s) {
  for (int64_t g = 0; g < k / group; ++g) {
    int32_t acc = 0;
    for (int64_t e = g * group; e < (g + 1) * group; ++e) acc += static_cast<int32_t>(u[e]) * q[e];
    s[g] = acc;
  }
}

void matmul_int8_portable(float* y, int64_t y_stride, const WeightFormat& f, WeightParts parts,
                          int64_t m, int64_t k, const int8_t* qx, const float* dx,
                          const int32_t* sums, int n_threads) {
  const int64_t g_sz = f.group;
  const int64_t ng = k / g_sz;
  const int64_t n = total_rows(parts);
#pragma omp parallel num_threads(n_threads)
  {
    std::vector<uint8_t> u(static_cast<size_t>(k));
    std::vector<float> dw(static_cast<size_t>(ng)), mw(static_cast<size_t>(ng));
    std::vector<int32_t> sg(static_cast<size_t>(ng));
    int64_t r0 = 0, r1 = 0;
    split_range(n, omp_get_num_threads(), omp_get_thread_num(), &r0, &r1);
    for_unit_rows(parts, 1, r0, r1, [&](size_t pi, int64_t col, int64_t j0, int64_t j1) {
      const WeightPart& p = parts[pi];
      for (int64_t j = j0; j < j1; ++j) {
        const auto* row = static_cast<const uint8_t*>(p.w) + static_cast<size_t>(j) * p.row_bytes;
        const int64_t gpb = f.groups_per_block();
        for (int64_t b = 0; b < k / f.block_elems; ++b) {
          unpack_block(f, row + b * f.block_bytes, u.data() + b * f.block_elems,
                       dw.data() + b * gpb, mw.data() + b * gpb);
        }
        for (int64_t i = 0; i < m; ++i) {
          group_dots(u.data(), qx + i * k, k, g_sz, sg.data());
          float acc = 0.0f;
          for (int64_t g = 0; g < ng; ++g) {
            const int32_t s = sg[static_cast<size_t>(g)];
            const int32_t t = sums[i * ng + g];
            float fv;
            if (f.has_min) {
              fv = static_cast<float>(s) * dw[static_cast<size_t>(g)];
              fv = std::fmaf(mw[static_cast<size_t>(g)], static_cast<float>(t), fv);
            } else {
              fv = static_cast<float>(s - f.bias * t) * dw[static_cast<size_t>(g)];
            }
            acc = std::fmaf(fv, dx[i * ng + g], acc);
          }
          y[i * y_stride + col + j] = p.bias != nullptr ? acc + p.bias[j] : acc;
        }
      }
    });
  }
}

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
bool vnni_detected() {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// One row of x quantized per group (quantize_row_int8_ref, vectorised).
STRATA_VNNI void quantize_row_int8_avx512(const float* x, int64_t k, int64_t group, int8_t* qx,
                                          float* dx, int32_t* sum) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  for (int64_t g0 = 0; g0 < k; g0 += group) {
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t e = 0; e < group; e += 16) {
      const __m512 a = _mm512_and_ps(_mm512_loadu_ps(x + g0 + e), abs_mask);
      bad |= _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ);  // inf or NaN
      amax = _mm512_max_ps(amax, a);
    }
    const float am = _mm512_reduce_max_ps(amax);
    float* d = dx + g0 / group;
    int32_t* s = sum + g0 / group;
    if (bad != 0 || am < kInt8TinyGroup) {
      *d = bad != 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      *s = 0;
      std::memset(qx + g0, 0, static_cast<size_t>(group));
      continue;
    }
    *d = am / 127.0f;
    const __m512 id = _mm512_set1_ps(127.0f / am);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    __m512i total = _mm512_setzero_si512();
    for (int64_t e = 0; e < group; e += 16) {
      __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + g0 + e), id),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm512_min_epi32(_mm512_max_epi32(q, lo), hi);
      total = _mm512_add_epi32(total, q);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qx + g0 + e), _mm512_cvtepi32_epi8(q));
    }
    *s = _mm512_reduce_add_epi32(total);
  }
}

// Unpacks weight rows [j0, j0 + kTileRows) (rows past n are zero) into a
// panel. Rows are read in order, whole (one sequential stream of the
// weights), into u ([16][k] bytes, L1/L2), then transposed 64 elements at a
// time into the panel's [step][vector][16 rows][4] layout.
STRATA_VNNI void pack_panel(const WeightFormat& f, const void* w, size_t w_row_bytes, int64_t j0,
                            int64_t n, int64_t k, const PanelLayout& pl, char* panel, uint8_t* u) {
  const int64_t ng = k / f.group;
  auto* wq = reinterpret_cast<uint8_t*>(panel + pl.wq);
  auto* dwp = reinterpret_cast<float*>(panel + pl.dw);
  auto* mwp = reinterpret_cast<float*>(panel + pl.mw);
  const int64_t ldu = round_up(k, 64);
  for (int64_t v = 0; v < 2; ++v) {
    for (int64_t r = 0; r < 16; ++r) {
      const int64_t j = j0 + 16 * v + r;
      uint8_t* ur = u + r * ldu;
      if (j < n) {
        // The row kPrefetchRows ahead (the next panel's, at the end), into L2.
        if (j + kPrefetchRows < n) {
          const char* ahead =
              static_cast<const char*>(w) + static_cast<size_t>(j + kPrefetchRows) * w_row_bytes;
          for (size_t o = 0; o < w_row_bytes; o += 64) _mm_prefetch(ahead + o, _MM_HINT_T1);
        }
        unpack_row_x86(f, static_cast<const uint8_t*>(w) + static_cast<size_t>(j) * w_row_bytes, k,
                       ur, dwp + v * 16 + r, mwp + v * 16 + r, 32, false);
      } else {
        std::memset(ur, 0, static_cast<size_t>(k));
        for (int64_t g = 0; g < ng; ++g) dwp[g * 32 + v * 16 + r] = mwp[g * 32 + v * 16 + r] = 0;
      }
      std::memset(ur + k, 0, static_cast<size_t>(ldu - k));
    }
    for (int64_t k0 = 0; k0 < k; k0 += 64) {
      __m512i t[16];
      for (int64_t r = 0; r < 16; ++r) t[r] = _mm512_load_si512(u + r * ldu + k0);
      transpose16_epi32(t);
      // t[s]: elements k0 + 4s .. k0 + 4s + 3 of each of the 16 rows.
      const int64_t n_steps = std::min<int64_t>(64, k - k0) / 4;
      for (int64_t s = 0; s < n_steps; ++s) {
        _mm512_store_si512(wq + ((k0 / 4 + s) * 2 + v) * 64, t[s]);
      }
    }
  }
}

// Bits 0..3 of each 32-bit lane of v as 0x10 or 0 in its bytes 0..3: byte 0
// of the lane copied to its four bytes, each tested against its own bit.
STRATA_VNNI inline __m512i spread_fifth_bits(__m512i v) {
  const __m512i byte0 = _mm512_shuffle_epi8(
      v, _mm512_broadcast_i32x4(_mm_setr_epi32(0x00000000, 0x04040404, 0x08080808, 0x0c0c0c0c)));
  const __mmask64 set =
      _mm512_test_epi8_mask(byte0, _mm512_set1_epi32(static_cast<int32_t>(0x08040201u)));
  return _mm512_maskz_mov_epi8(set, _mm512_set1_epi8(0x10));
}

// Stores dword-step t of a group's quantized bytes (16 rows x 4 bytes, as
// loaded) as unsigned steps of the panel: 4-bit formats give step t (low
// nibbles) and step t + hi_off (high nibbles), Q5_0 / Q5_1 with their fifth
// bits from qh (one 32-bit lane per row) added, Q8S is shifted by 128.
// out: the group's first step of this vector; steps are 2 x 64 bytes apart.
STRATA_VNNI inline void emit_step(const WeightFormat& f, uint8_t* out, int64_t t, int64_t hi_off,
                                  __m512i q, __m512i qh) {
  if (f.nibbles) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512i lo = _mm512_and_si512(q, low4);
    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
    if (f.qh_off >= 0) {
      // Step t holds values 4t .. 4t + 3, its high step values 16 + 4t ...
      lo = _mm512_or_si512(lo, spread_fifth_bits(_mm512_srlv_epi32(qh, _mm512_set1_epi32(4 * t))));
      hi = _mm512_or_si512(hi,
                           spread_fifth_bits(_mm512_srlv_epi32(qh, _mm512_set1_epi32(16 + 4 * t))));
    }
    _mm512_store_si512(out + t * 128, lo);
    _mm512_store_si512(out + (t + hi_off) * 128, hi);
  } else if (f.signed_q) {
    _mm512_store_si512(out + t * 128,
                       _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80))));
  } else {
    _mm512_store_si512(out + t * 128, q);
  }
}

// A full panel (rows j0 .. j0 + 31 all exist) straight from the blocks, group
// by group, 16 rows at a time, through registers: the rows' quantized bytes
// of the group are transposed to [4-element step][16 rows] (for 4-bit
// formats, one transpose yields the steps of the low and of the high
// nibbles), the 16 scales (and minimums) come in with one gather. Meanwhile
// the next panel's rows are prefetched into L2, a share per group.
STRATA_VNNI void pack_panel_full(const WeightFormat& f, const void* w, size_t w_row_bytes,
                                 int64_t j0, int64_t n, int64_t k, const PanelLayout& pl,
                                 char* panel) {
  const int64_t g_sz = f.group, ng = k / g_sz;
  auto* wq = reinterpret_cast<uint8_t*>(panel + pl.wq);
  auto* dwp = reinterpret_cast<float*>(panel + pl.dw);
  auto* mwp = reinterpret_cast<float*>(panel + pl.mw);
  const int64_t qs_off = f.qs_off;
  const int64_t qs_bytes = f.nibbles ? g_sz / 2 : g_sz;
  const int64_t steps_per_dword_row = f.nibbles ? g_sz / 8 : 0;  // hi nibble step offset
  const auto* base = static_cast<const uint8_t*>(w) + static_cast<size_t>(j0) * w_row_bytes;
  const __m512i row_idx =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int32_t>(w_row_bytes)));
  // The next panel: prefetched a share per group (step_prefetch.h).
  StepPrefetch next;
  if (j0 + 2 * kTileRows <= n) {
    next = StepPrefetch(base + kTileRows * w_row_bytes, kTileRows * w_row_bytes,
                        static_cast<size_t>(ng), PrefetchInto::kL2);
  }
  const int64_t g_steps = g_sz / 4;
  for (int64_t g = 0; g < ng; ++g) {
    next.step();
    for (int64_t v = 0; v < 2; ++v) {
      const uint8_t* rows = base + static_cast<size_t>(16 * v) * w_row_bytes + g * f.block_bytes;
      const __m512i sc = _mm512_i32gather_epi32(row_idx, rows, 1);
      _mm512_store_ps(dwp + (g * 2 + v) * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(sc)));
      _mm512_store_ps(mwp + (g * 2 + v) * 16,
                      f.has_min ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(sc, 16)))
                                : _mm512_setzero_ps());
      const uint8_t* q = rows + qs_off;
      const __m512i qh = f.qh_off >= 0 ? _mm512_i32gather_epi32(row_idx, rows + f.qh_off, 1)
                                       : _mm512_setzero_si512();
      if (qs_bytes == 16) {
        // 16 rows x 4 dwords: four rows per register, a dword transpose within
        // each 128-bit lane, then a 4 x 4 transpose of the lanes.
        const __m512i lane_t =
            _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
        __m512i r4[4];
        for (int64_t i = 0; i < 4; ++i) {
          __m512i x = _mm512_castsi128_si512(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (4 * i) * w_row_bytes)));
          x = _mm512_inserti32x4(
              x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (4 * i + 1) * w_row_bytes)),
              1);
          x = _mm512_inserti32x4(
              x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (4 * i + 2) * w_row_bytes)),
              2);
          x = _mm512_inserti32x4(
              x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (4 * i + 3) * w_row_bytes)),
              3);
          r4[i] = _mm512_permutexvar_epi32(lane_t, x);
        }
        const __m512i a01 = _mm512_shuffle_i32x4(r4[0], r4[1], 0x44);
        const __m512i b01 = _mm512_shuffle_i32x4(r4[0], r4[1], 0xee);
        const __m512i a23 = _mm512_shuffle_i32x4(r4[2], r4[3], 0x44);
        const __m512i b23 = _mm512_shuffle_i32x4(r4[2], r4[3], 0xee);
        uint8_t* out = wq + (g * g_steps * 2 + v) * 64;
        emit_step(f, out, 0, steps_per_dword_row, _mm512_shuffle_i32x4(a01, a23, 0x88), qh);
        emit_step(f, out, 1, steps_per_dword_row, _mm512_shuffle_i32x4(a01, a23, 0xdd), qh);
        emit_step(f, out, 2, steps_per_dword_row, _mm512_shuffle_i32x4(b01, b23, 0x88), qh);
        emit_step(f, out, 3, steps_per_dword_row, _mm512_shuffle_i32x4(b01, b23, 0xdd), qh);
      } else {
        // 16 rows x up to 16 dwords at a time: a full 16 x 16 transpose.
        for (int64_t h = 0; h < qs_bytes; h += 64) {
          const int64_t bytes = std::min<int64_t>(64, qs_bytes - h);
          const __mmask64 mk = bytes == 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
          __m512i t[16];
          for (int64_t r = 0; r < 16; ++r)
            t[r] = _mm512_maskz_loadu_epi8(mk, q + r * w_row_bytes + h);
          transpose16_epi32(t);
          uint8_t* out = wq + (g * g_steps * 2 + v) * 64;
          for (int64_t s = 0; s < bytes / 4; ++s) {
            emit_step(f, out, h / 4 + s, steps_per_dword_row, t[s], qh);
          }
        }
      }
    }
  }
}

// y rows [0, MR) x panel columns [0, nn): per group, 32-bit integer sums of
// u * qx with vpdpbusd (16 weight rows per vector, 4 elements per lane), then
// the group's scale (and minimum, or bias) in f32.
template <int MR, int G, bool kAsym>
STRATA_VNNI void tile_vnni(const char* panel, const PanelLayout& pl, int64_t k, int64_t ng,
                           const int8_t* qx, const float* dx, const int32_t* bt, const float* tf,
                           float* y, int64_t y_stride, int64_t nn, const float* bias) {
  const auto* wq = reinterpret_cast<const uint8_t*>(panel + pl.wq);
  const auto* dwp = reinterpret_cast<const float*>(panel + pl.dw);
  const auto* mwp = reinterpret_cast<const float*>(panel + pl.mw);
  __m512 acc[MR][2];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    __m512i s[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) s[r][0] = s[r][1] = _mm512_setzero_si512();
    const uint8_t* wg = wq + g * G * 32;  // G/4 steps x 2 vectors x 64 bytes
    const int8_t* xg = qx + g * G;
#pragma GCC unroll 8
    for (int st = 0; st < G / 4; ++st) {
      const __m512i w0 = _mm512_load_si512(wg + st * 128);
      const __m512i w1 = _mm512_load_si512(wg + st * 128 + 64);
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        int32_t x4;
        std::memcpy(&x4, xg + r * k + 4 * st, 4);
        const __m512i xb = _mm512_set1_epi32(x4);
        s[r][0] = _mm512_dpbusd_epi32(s[r][0], w0, xb);
        s[r][1] = _mm512_dpbusd_epi32(s[r][1], w1, xb);
      }
    }
    const __m512 dw0 = _mm512_load_ps(dwp + g * 32), dw1 = _mm512_load_ps(dwp + g * 32 + 16);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512 d = _mm512_set1_ps(dx[r * ng + g]);
      __m512 f0, f1;
      if constexpr (kAsym) {
        const __m512 t = _mm512_set1_ps(tf[r * ng + g]);
        f0 = _mm512_fmadd_ps(_mm512_load_ps(mwp + g * 32), t,
                             _mm512_mul_ps(_mm512_cvtepi32_ps(s[r][0]), dw0));
        f1 = _mm512_fmadd_ps(_mm512_load_ps(mwp + g * 32 + 16), t,
                             _mm512_mul_ps(_mm512_cvtepi32_ps(s[r][1]), dw1));
      } else {
        const __m512i b = _mm512_set1_epi32(bt[r * ng + g]);
        f0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][0], b)), dw0);
        f1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][1], b)), dw1);
      }
      acc[r][0] = _mm512_fmadd_ps(f0, d, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(f1, d, acc[r][1]);
    }
  }
  const __mmask16 m0 = nn >= 16 ? 0xffff : static_cast<__mmask16>((1u << nn) - 1);
  const __mmask16 m1 = nn >= 32   ? 0xffff
                       : nn <= 16 ? 0
                                  : static_cast<__mmask16>((1u << (nn - 16)) - 1);
  __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
  if (bias != nullptr) {
    b0 = _mm512_maskz_loadu_ps(m0, bias);
    b1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(y + r * y_stride, m0,
                          bias != nullptr ? _mm512_add_ps(acc[r][0], b0) : acc[r][0]);
    _mm512_mask_storeu_ps(y + r * y_stride + 16, m1,
                          bias != nullptr ? _mm512_add_ps(acc[r][1], b1) : acc[r][1]);
  }
}

using TileFn = void (*)(const char*, const PanelLayout&, int64_t, int64_t, const int8_t*,
                        const float*, const int32_t*, const float*, float*, int64_t, int64_t,
                        const float*);

template <int G, bool kAsym>
constexpr TileFn kTiles[kMaxMr + 1] = {nullptr,
                                       tile_vnni<1, G, kAsym>,
                                       tile_vnni<2, G, kAsym>,
                                       tile_vnni<3, G, kAsym>,
                                       tile_vnni<4, G, kAsym>,
                                       tile_vnni<5, G, kAsym>,
                                       tile_vnni<6, G, kAsym>};

const TileFn* tiles_for(int64_t group, bool asym) {
  if (group == 16) return asym ? kTiles<16, true> : kTiles<16, false>;
  if (group == 32) return asym ? kTiles<32, true> : kTiles<32, false>;
  if (group == 64) return asym ? kTiles<64, true> : kTiles<64, false>;
  return asym ? kTiles<128, true> : kTiles<128, false>;
}

// Weight rows [j0, j0 + kTileRows) of one weight (rows past n zero) into the
// panel, with the fastest packer that takes them.
void pack_tile(const WeightFormat& f, const void* w, size_t w_row_bytes, int64_t j0, int64_t n,
               int64_t k, const PanelLayout& pl, char* panel) {
  const bool full = j0 + kTileRows <= n;
  const bool gather_ok = w_row_bytes * 16 < (size_t{1} << 31);
  if (full && gather_ok && (f.dtype == DType::kQ4_K || f.dtype == DType::kQ5_K)) {
    pack_panel_kquant(f, w, w_row_bytes, j0, k, pl, panel);
  } else if (full && gather_ok && f.dtype == DType::kQ6_K) {
    pack_panel_q6_k(w, w_row_bytes, j0, k, pl, panel);
  } else if (full && gather_ok && (!f.gguf || f.qh_off >= 0)) {
    pack_panel_full(f, w, w_row_bytes, j0, n, k, pl, panel);
  } else {
    pack_panel(f, w, w_row_bytes, j0, n, k, pl, panel, reinterpret_cast<uint8_t*>(panel + pl.u));
  }
}

#pragma GCC diagnostic pop
#endif  // __x86_64__

}  // namespace

bool matmul_int8_native() {
#if defined(__x86_64__)
  static const bool vnni = vnni_detected();
  return vnni && cpu_features().avx512;
#else
  return false;
#endif
}

void quantize_row_int8(const float* x, int64_t k, int64_t group, int8_t* qx, float* dx,
                       int32_t* sum) {
#if defined(__x86_64__)
  if (matmul_int8_native() && group % 16 == 0) {
    quantize_row_int8_avx512(x, k, group, qx, dx, sum);
    return;
  }
#endif
  quantize_row_int8_ref(x, k, group, qx, dx, sum);
}

bool matmul_int8_ok(DType w_dtype) {
  // Q8_K's one scale per 256 values has no tile; it multiplies in bf16.
  return is_quantized(w_dtype) && w_dtype != DType::kQ8_K;
}

int64_t matmul_int8_group(DType w_dtype) {
  return weight_format(w_dtype).group;
}

size_t matmul_int8_x_bytes(int64_t m, int64_t k, int64_t group) {
  return x_layout(m, k, group).bytes;
}

size_t matmul_int8_panel_bytes(int64_t k, int64_t group) {
  // The kernel that runs here: the VNNI panel, the AVX2 strip, or nothing.
  if (matmul_int8_native()) return panel_layout(k, group).bytes;
  if (matmul_int8_avx2_ok()) return matmul_int8_avx2_ws_bytes(k, group);
  return 64;
}

Status matmul_int8(float* y, int64_t y_stride, const float* x, int64_t x_stride, WeightParts parts,
                   int64_t m, int64_t k, void* x_ws, void* const* panels, int n_threads) {
  if (parts.empty()) return Status::kInvalidArgument;
  const DType w_dtype = parts[0].dtype;
  for (const WeightPart& p : parts) {
    if (p.dtype != w_dtype) return Status::kInvalidArgument;  // one quantization of x
  }
  if (!matmul_int8_ok(w_dtype)) return Status::kUnsupported;
  const WeightFormat f = weight_format(w_dtype);
  const int64_t g_sz = f.group;
  const int64_t ng = k / g_sz;
  const XLayout xl = x_layout(m, k, g_sz);
  auto* ws = static_cast<char*>(x_ws);
  auto* qx = reinterpret_cast<int8_t*>(ws + xl.q);
  auto* dx = reinterpret_cast<float*>(ws + xl.d);
  auto* bt = reinterpret_cast<int32_t*>(ws + xl.bt);
  auto* tf = reinterpret_cast<float*>(ws + xl.tf);
#if defined(__x86_64__)
  const bool native = matmul_int8_native();
#else
  const bool native = false;
#endif
  if (!native) {
    // sums in bt: the portable path reads T itself.
#pragma omp parallel for schedule(static) \
    num_threads(static_cast <int>(std::min <int64_t>(n_threads, m)))
    for (int64_t i = 0; i < m; ++i) {
      quantize_row_int8_ref(x + i * x_stride, k, g_sz, qx + i * k, dx + i * ng, bt + i * ng);
    }
    if (matmul_int8_avx2_ok()) {
      matmul_int8_avx2(y, y_stride, f, parts, m, k, qx, dx, bt, panels, n_threads);
    } else {
      matmul_int8_portable(y, y_stride, f, parts, m, k, qx, dx, bt, n_threads);
    }
    return Status::kOk;
  }
#if defined(__x86_64__)
  const PanelLayout pl = panel_layout(k, g_sz);
  const TileFn* tiles = tiles_for(g_sz, f.has_min);
  const int64_t n_tiles = count_units(parts, kTileRows);
  const int64_t n_mchunks = (m + kMChunk - 1) / kMChunk;
  const int64_t n_units = n_tiles * n_mchunks;
  const int nt = static_cast<int>(std::min<int64_t>(n_threads, n_units));
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      int32_t* t = bt + i * ng;
      quantize_row_int8_avx512(x + i * x_stride, k, g_sz, qx + i * k, dx + i * ng, t);
      for (int64_t g = 0; g < ng; ++g) {
        tf[i * ng + g] = static_cast<float>(t[g]);
        t[g] *= f.bias;  // bias * T for the symmetric formats
      }
    }
    // (the loop's barrier publishes x)
    const int tid = omp_get_thread_num();
    char* panel = static_cast<char*>(panels[tid]);
    int64_t u0 = 0, u1 = 0;
    split_range(n_units, omp_get_num_threads(), tid, &u0, &u1);
    int64_t packed = -1;  // the tile (of all parts) now in the panel
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t mc = u / n_tiles, tile = u % n_tiles;
      for_unit_rows(parts, kTileRows, tile, tile + 1,
                    [&](size_t pi, int64_t col, int64_t j0, int64_t j1) {
                      const WeightPart& p = parts[pi];
                      if (packed != tile) {
                        pack_tile(f, p.w, p.row_bytes, j0, p.n, k, pl, panel);
                        packed = tile;
                      }
                      const int64_t i_end = std::min(m, (mc + 1) * kMChunk);
                      for (int64_t i0 = mc * kMChunk; i0 < i_end; i0 += kMaxMr) {
                        const int64_t mr = std::min(kMaxMr, i_end - i0);
                        tiles[mr](panel, pl, k, ng, qx + i0 * k, dx + i0 * ng, bt + i0 * ng,
                                  tf + i0 * ng, y + i0 * y_stride + col + j0, y_stride, j1 - j0,
                                  p.bias != nullptr ? p.bias + j0 : nullptr);
                      }
                    });
    }
  }
#endif
  return Status::kOk;
}

}  // namespace strata::cpu
