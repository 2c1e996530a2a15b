// The int8 panel packers of the K-quants (int8_panel.h): super-blocks read
// straight into the panel, 16 rows at a time through registers.
#include <cstring>

#include "kernels/cpu/int8_panel.h"
#include "quant/gguf_blocks.h"

#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::cpu::int8_panel {

// pack_panel_full for Q4_K / Q5_K: per super-block and 16 rows, the scales
// and minimums of the 8 groups decoded 16 rows at a time (one row per lane,
// kquant_sub_block's products), then each
// 64-value chunk's 32 bytes of the 16 rows transposed at once: low nibbles
// are group 2c's steps, high nibbles group 2c + 1's; Q5_K's fifth bits (bit
// g of qh[l]) come from the same transpose of qh.
STRATA_VNNI void pack_panel_kquant(const WeightFormat& f, const void* w, size_t w_row_bytes,
                                   int64_t j0, int64_t k, const PanelLayout& pl, char* panel) {
  const bool five = f.dtype == DType::kQ5_K;
  const int64_t qs_off = five ? 48 : 16;
  auto* wq = reinterpret_cast<uint8_t*>(panel + pl.wq);
  auto* dwp = reinterpret_cast<float*>(panel + pl.dw);
  auto* mwp = reinterpret_cast<float*>(panel + pl.mw);
  const auto* base = static_cast<const uint8_t*>(w) + static_cast<size_t>(j0) * w_row_bytes;
  const __m512i low4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
  const __mmask64 half = (__mmask64{1} << 32) - 1;
  const __m512i row_idx =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int32_t>(w_row_bytes)));
  const __m512i ff = _mm512_set1_epi32(0xff), s63 = _mm512_set1_epi32(63);
  const __m512 neg = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int32_t>(0x80000000u)));
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    for (int64_t v = 0; v < 2; ++v) {
      const uint8_t* rows = base + static_cast<size_t>(16 * v) * w_row_bytes + sb * f.block_bytes;
      // The 16 rows' d, dmin and 12 scale bytes, one row per lane.
      const __m512i dd = _mm512_i32gather_epi32(row_idx, rows, 1);
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
      const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
      const __m512i q[3] = {_mm512_i32gather_epi32(row_idx, rows + 4, 1),
                            _mm512_i32gather_epi32(row_idx, rows + 8, 1),
                            _mm512_i32gather_epi32(row_idx, rows + 12, 1)};
      auto byte = [&](int a, int i) STRATA_VNNI {
        return _mm512_and_si512(_mm512_srli_epi32(q[a], static_cast<unsigned>(8 * i)), ff);
      };
      for (int j = 0; j < 8; ++j) {  // kquant_scale_min, 16 rows at once
        __m512i sc, mn;
        if (j < 4) {
          sc = _mm512_and_si512(byte(0, j), s63);
          mn = _mm512_and_si512(byte(1, j), s63);
        } else {
          const __m512i hi0 = _mm512_slli_epi32(_mm512_srli_epi32(byte(0, j - 4), 6), 4);
          const __m512i hi1 = _mm512_slli_epi32(_mm512_srli_epi32(byte(1, j - 4), 6), 4);
          sc = _mm512_or_si512(_mm512_and_si512(byte(2, j - 4), _mm512_set1_epi32(15)), hi0);
          mn = _mm512_or_si512(_mm512_srli_epi32(byte(2, j - 4), 4), hi1);
        }
        const int64_t at = ((sb * 8 + j) * 2 + v) * 16;
        _mm512_store_ps(dwp + at, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        _mm512_store_ps(mwp + at, _mm512_xor_ps(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn)), neg));
      }
      __m512i th[16];
      if (five) {
        for (int64_t r = 0; r < 16; ++r)
          th[r] = _mm512_maskz_loadu_epi8(half, rows + r * w_row_bytes + 16);
        transpose16_epi32(th);
      }
      for (int64_t c = 0; c < 4; ++c) {
        __m512i t[16];
        for (int64_t r = 0; r < 16; ++r) {
          t[r] = _mm512_maskz_loadu_epi8(half, rows + r * w_row_bytes + qs_off + 32 * c);
        }
        transpose16_epi32(t);
        // Group 2c's steps, then group 2c + 1's, 8 of each.
        uint8_t* out = wq + ((sb * 8 + 2 * c) * 8 * 2 + v) * 64;
        for (int64_t st = 0; st < 8; ++st) {
          __m512i lo = _mm512_and_si512(t[st], low4);
          __m512i hi = _mm512_and_si512(_mm512_srli_epi16(t[st], 4), low4);
          if (five) {
            const __m512i b0 =
                _mm512_and_si512(_mm512_srli_epi16(th[st], static_cast<unsigned>(2 * c)), one);
            const __m512i b1 =
                _mm512_and_si512(_mm512_srli_epi16(th[st], static_cast<unsigned>(2 * c + 1)), one);
            lo = _mm512_or_si512(lo, _mm512_slli_epi16(b0, 4));
            hi = _mm512_or_si512(hi, _mm512_slli_epi16(b1, 4));
          }
          _mm512_store_si512(out + st * 128, lo);
          _mm512_store_si512(out + (st + 8) * 128, hi);
        }
      }
    }
  }
}

// Q6_K: 16 groups of 16 per super-block. Per half h of the block: ql bytes
// [64h, 64h + 32) hold values 128h + l (low nibbles) and 128h + 64 + l (high),
// bytes [64h + 32, 64h + 64) values 128h + 32 + l and 128h + 96 + l; bits 2i,
// 2i + 1 of qh[32h + l] are the two high bits of value 128h + 32i + l. One
// transpose of each 32-byte run of the 16 rows gives dword-step s (values
// 4s .. 4s + 3 of the run) of all of them; the scales (int8) and d come in
// with gathers, one row per lane.
STRATA_VNNI void pack_panel_q6_k(const void* w, size_t w_row_bytes, int64_t j0, int64_t k,
                                 const PanelLayout& pl, char* panel) {
  auto* wq = reinterpret_cast<uint8_t*>(panel + pl.wq);
  auto* dwp = reinterpret_cast<float*>(panel + pl.dw);
  auto* mwp = reinterpret_cast<float*>(panel + pl.mw);
  const auto* base = static_cast<const uint8_t*>(w) + static_cast<size_t>(j0) * w_row_bytes;
  const __mmask64 half = (__mmask64{1} << 32) - 1;
  const __m512i row_idx =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int32_t>(w_row_bytes)));
  const __m512i low4 = _mm512_set1_epi8(0x0f), three = _mm512_set1_epi8(3);
  constexpr int64_t kBlockBytes = 210;
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    for (int64_t v = 0; v < 2; ++v) {
      const uint8_t* rows = base + static_cast<size_t>(16 * v) * w_row_bytes + sb * kBlockBytes;
      // d: the high half of the dword at 206 (the block's last 4 bytes).
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
          _mm512_srli_epi32(_mm512_i32gather_epi32(row_idx, rows + 206, 1), 16)));
      for (int q = 0; q < 4; ++q) {
        const __m512i sc4 = _mm512_i32gather_epi32(row_idx, rows + 192 + 4 * q, 1);
        for (int i = 0; i < 4; ++i) {
          // Scale 4q + i, sign-extended from its byte.
          const __m512i sc =
              _mm512_srai_epi32(_mm512_slli_epi32(sc4, static_cast<unsigned>(24 - 8 * i)), 24);
          const int64_t at = ((sb * 16 + 4 * q + i) * 2 + v) * 16;
          _mm512_store_ps(dwp + at, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
          _mm512_store_ps(mwp + at, _mm512_setzero_ps());
        }
      }
      for (int64_t h = 0; h < 2; ++h) {
        __m512i th[16], ta[16], tb[16];
        for (int64_t r = 0; r < 16; ++r) {
          const uint8_t* row = rows + r * w_row_bytes;
          ta[r] = _mm512_maskz_loadu_epi8(half, row + 64 * h);
          tb[r] = _mm512_maskz_loadu_epi8(half, row + 64 * h + 32);
          th[r] = _mm512_maskz_loadu_epi8(half, row + 128 + 32 * h);
        }
        transpose16_epi32(ta);
        transpose16_epi32(tb);
        transpose16_epi32(th);
        // Value 128h + 32i + 4s + b is step 8i + s of the half (4 steps a group).
        uint8_t* out = wq + ((sb * 64 + h * 32) * 2 + v) * 64;
        for (int64_t s = 0; s < 8; ++s) {
          auto high = [&](int i) STRATA_VNNI {  // bits 2i, 2i + 1 of qh at bits 4, 5
            return _mm512_slli_epi16(
                _mm512_and_si512(_mm512_srli_epi16(th[s], static_cast<unsigned>(2 * i)), three), 4);
          };
          const __m512i a_lo = _mm512_and_si512(ta[s], low4);
          const __m512i a_hi = _mm512_and_si512(_mm512_srli_epi16(ta[s], 4), low4);
          const __m512i b_lo = _mm512_and_si512(tb[s], low4);
          const __m512i b_hi = _mm512_and_si512(_mm512_srli_epi16(tb[s], 4), low4);
          _mm512_store_si512(out + (0 + s) * 128, _mm512_or_si512(a_lo, high(0)));
          _mm512_store_si512(out + (8 + s) * 128, _mm512_or_si512(b_lo, high(1)));
          _mm512_store_si512(out + (16 + s) * 128, _mm512_or_si512(a_hi, high(2)));
          _mm512_store_si512(out + (24 + s) * 128, _mm512_or_si512(b_hi, high(3)));
        }
      }
    }
  }
}

}  // namespace strata::cpu::int8_panel

#endif  // __x86_64__
