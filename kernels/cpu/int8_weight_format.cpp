#include "kernels/cpu/int8_weight_format.h"

#include <cstring>

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

}  // namespace strata::cpu
