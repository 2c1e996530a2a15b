// The weight panel of the int8 matmul's AVX512-VNNI kernel (matmul_int8.h):
// its layout, the register transpose that fills it, and the packers that
// write it straight from the K-quants' super-blocks (int8_panel_kquant.cpp).
// Internal to kernels/cpu.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/int8_weight_format.h"

namespace strata::cpu::int8_panel {

inline constexpr int64_t kTileRows = 32;  // weight rows of a panel: two vectors of 16

inline int64_t round_up(int64_t v, int64_t q) {
  return (v + q - 1) / q * q;
}

// A panel: kTileRows weight rows as the kernel reads them.
//   wq: [k / 4 steps][2 vectors][16 rows][4] u8
//   dw, mw: [k / G groups][2 vectors][16 rows] f32
//   u: [16][k rounded up to 64] u8, the unpacked rows before the transpose
struct PanelLayout {
  size_t wq = 0, dw = 0, mw = 0, u = 0, bytes = 0;
};

inline PanelLayout panel_layout(int64_t k, int64_t group) {
  PanelLayout l;
  const int64_t ng = k / group;
  l.wq = 0;
  l.dw = static_cast<size_t>(round_up(kTileRows * k, 64));
  l.mw = l.dw + static_cast<size_t>(ng * kTileRows * 4);
  l.u = static_cast<size_t>(round_up(static_cast<int64_t>(l.mw) + ng * kTileRows * 4, 64));
  l.bytes = l.u + static_cast<size_t>(16 * round_up(k, 64));
  return l;
}

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define STRATA_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

// In-place transpose of 16 x 16 32-bit elements held in 16 registers.
__attribute__((always_inline)) STRATA_VNNI inline void transpose16_epi32(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

#pragma GCC diagnostic pop

// Full panels (rows j0 .. j0 + 31 all exist; w_row_bytes * 16 < 2^31, for
// the gathers) of Q4_K / Q5_K and of Q6_K weights.
void pack_panel_kquant(const WeightFormat& f, const void* w, size_t w_row_bytes, int64_t j0,
                       int64_t k, const PanelLayout& pl, char* panel);
void pack_panel_q6_k(const void* w, size_t w_row_bytes, int64_t j0, int64_t k,
                     const PanelLayout& pl, char* panel);
#endif

}  // namespace strata::cpu::int8_panel
