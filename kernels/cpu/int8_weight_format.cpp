#include "kernels/cpu/int8_weight_format.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "kernels/cpu/matmul_int8.h"
#include "quant/gguf_integers.h"

namespace strata::cpu {

WeightFormat weight_format(DType t) {
  STRATA_ASSERT_MSG(matmul_int8_ok(t), "the int8 matmul does not read {}", dtype_name(t));
  const DTypeInfo& info = dtype_info(t);
  WeightFormat f;
  f.dtype = t;
  f.block_elems = info.block_elems;
  f.block_bytes = info.block_bytes;
  if (info.dequant_only) {
    const GgufIntegers g = gguf_integers(t);
    f.gguf = true;
    f.group = g.group;
    f.has_min = g.has_min;
    f.bias = g.bias;
    if (t == DType::kQ5_0 || t == DType::kQ5_1) {  // d [m] qh qs, qs laid out as Q4's
      f.nibbles = true;
      f.qh_off = t == DType::kQ5_0 ? 2 : 4;
      f.qs_off = f.qh_off + 4;
    }
    return f;
  }
  f.group = info.block_elems;
  f.nibbles = info.bits == 4;
  f.has_min = !info.symmetric;
  f.signed_q = info.bits == 8 && info.symmetric;
  f.bias = f.signed_q ? 128 : (f.nibbles && info.symmetric ? 8 : 0);
  f.qs_off = f.has_min ? 4 : 2;
  return f;
}

void unpack_block(const WeightFormat& f, const uint8_t* block, uint8_t* u, float* dw, float* mw) {
  if (f.gguf) return gguf_unpack_block_ref(f.dtype, block, u, dw, mw);
  uint16_t d = 0, m = 0;
  std::memcpy(&d, block, 2);
  if (f.has_min) std::memcpy(&m, block + 2, 2);
  const uint8_t* qs = block + f.qs_off;
  *dw = f16_to_f32(d);
  *mw = f.has_min ? f16_to_f32(m) : 0.0f;
  if (f.nibbles) {
    for (int64_t j = 0; j < f.group / 2; ++j) {
      u[j] = qs[j] & 0x0f;
      u[j + f.group / 2] = qs[j] >> 4;
    }
  } else {
    for (int64_t j = 0; j < f.group; ++j) {
      u[j] = f.signed_q ? static_cast<uint8_t>(qs[j] ^ 0x80) : qs[j];
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("sse2,f16c"))) void unpack_row_x86(const WeightFormat& f, const uint8_t* row,
                                                         int64_t k, uint8_t* u, float* dw,
                                                         float* mw, int64_t stride,
                                                         bool minus_128) {
  const int64_t g_sz = f.group;
  if (f.gguf) {
    const int64_t gpb = f.groups_per_block();
    float bd[16], bm[16];
    for (int64_t b = 0; b < k / f.block_elems; ++b) {
      gguf_unpack_block(f.dtype, row + b * f.block_bytes, u + b * f.block_elems, bd, bm);
      for (int64_t g = 0; g < gpb; ++g) {
        dw[(b * gpb + g) * stride] = bd[g];
        mw[(b * gpb + g) * stride] = bm[g];
      }
    }
    return;
  }
  const __m128i low4 = _mm_set1_epi8(0x0f);
  // Q8S stores q = u - 128, Q8A stores u.
  const __m128i flip = _mm_set1_epi8(static_cast<char>(f.signed_q != minus_128 ? 0x80 : 0));
  for (int64_t g = 0; g < k / g_sz; ++g) {
    const uint8_t* block = row + g * f.block_bytes;
    uint16_t d = 0, m = 0;
    std::memcpy(&d, block, 2);
    if (f.has_min) std::memcpy(&m, block + 2, 2);
    const uint8_t* qs = block + f.qs_off;
    dw[g * stride] = _cvtsh_ss(d);
    mw[g * stride] = f.has_min ? _cvtsh_ss(m) : 0.0f;
    uint8_t* ug = u + g * g_sz;
    if (f.nibbles) {
      // Element j: the low nibble of byte j (j < G/2), else the high nibble of byte j - G/2.
      for (int64_t j = 0; j < g_sz / 2; j += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + j));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ug + j), _mm_and_si128(v, low4));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ug + g_sz / 2 + j),
                         _mm_and_si128(_mm_srli_epi16(v, 4), low4));
      }
    } else {
      for (int64_t j = 0; j < g_sz; j += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + j));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ug + j), _mm_xor_si128(v, flip));
      }
    }
  }
}
#endif

}  // namespace strata::cpu
