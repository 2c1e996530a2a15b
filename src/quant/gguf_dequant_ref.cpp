// Reference dequantization of the GGUF-only formats (gguf_blocks.h): ggml's
// dequantize_row_* written out, one block at a time.
#include <cstring>

#include "core/error.h"
#include "quant/gguf_blocks.h"

namespace strata {
namespace {

void q5_0(const BlockQ5_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    const uint8_t xh0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
    const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
    const int32_t x0 = ((b.qs[j] & 0x0F) | xh0) - 16;
    const int32_t x1 = ((b.qs[j] >> 4) | xh1) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

void q5_1(const BlockQ5_1& b, float* y) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    const uint8_t xh0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
    const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
    const int32_t x0 = (b.qs[j] & 0x0F) | xh0;
    const int32_t x1 = (b.qs[j] >> 4) | xh1;
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}

void q2_k(const BlockQ2_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const uint8_t* q = b.qs;
  int is = 0;
  for (int n = 0; n < kQK_K; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = b.scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
        }
      }
      shift += 2;
    }
    q += 32;
  }
}

void q3_k(const BlockQ3_K& b, float* y) {
  constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, b.scales, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  const float d_all = f16_to_f32(b.d);
  const uint8_t* q = b.qs;
  const uint8_t* hm = b.hmask;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < kQK_K; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          const int k = l + 16 * half;
          const int v = ((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      shift += 2;
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

void q4_k(const BlockQ4_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const uint8_t* q = b.qs;
  for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2) {
    const auto [d1, m1] = kquant_sub_block(is, b.scales, d, dmin);
    const auto [d2, m2] = kquant_sub_block(is + 1, b.scales, d, dmin);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
  }
}

void q5_k(const BlockQ5_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const uint8_t* ql = b.qs;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2) {
    const auto [d1, m1] = kquant_sub_block(is, b.scales, d, dmin);
    const auto [d2, m2] = kquant_sub_block(is + 1, b.scales, d, dmin);
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
    }
    ql += 32;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

void q6_k(const BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < kQK_K; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

void q8_k(const BlockQ8_K& b, float* y) {
  for (int j = 0; j < kQK_K; ++j) y[j] = b.d * static_cast<float>(b.qs[j]);
}

template <typename B, void (*F)(const B&, float*)>
void rows(const void* x, float* y, int64_t n, int per_block) {
  const auto* p = static_cast<const uint8_t*>(x);
  for (int64_t i = 0; i < n / per_block; ++i)
    F(load_block<B>(p + i * sizeof(B)), y + i * per_block);
}

}  // namespace

void dequantize_gguf_row_ref(DType t, const void* x, float* y, int64_t n) {
  STRATA_ASSERT_MSG(dtype_info(t).dequant_only && row_elems_ok(t, n), "{} x {}", dtype_name(t), n);
  switch (t) {
    case DType::kQ5_0:
      return rows<BlockQ5_0, q5_0>(x, y, n, 32);
    case DType::kQ5_1:
      return rows<BlockQ5_1, q5_1>(x, y, n, 32);
    case DType::kQ2_K:
      return rows<BlockQ2_K, q2_k>(x, y, n, kQK_K);
    case DType::kQ3_K:
      return rows<BlockQ3_K, q3_k>(x, y, n, kQK_K);
    case DType::kQ4_K:
      return rows<BlockQ4_K, q4_k>(x, y, n, kQK_K);
    case DType::kQ5_K:
      return rows<BlockQ5_K, q5_k>(x, y, n, kQK_K);
    case DType::kQ6_K:
      return rows<BlockQ6_K, q6_k>(x, y, n, kQK_K);
    case DType::kQ8_K:
      return rows<BlockQ8_K, q8_k>(x, y, n, kQK_K);
    default:
      break;
  }
  STRATA_ASSERT_MSG(false, "{} is not a GGUF-only format", dtype_name(t));
}

}  // namespace strata
