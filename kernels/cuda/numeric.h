// Scalar number formats shared by the CUDA kernels and their host tests:
// f16/bf16 <-> f32 conversions and the dequantized value of one element of a
// quantized row. Every function is __host__ __device__ and uses integer
// operations and explicitly rounded float operations only, so that the device
// computes the same bits as the host definitions:
//   - f16_to_f32 / f32_to_f16 / f32_to_bf16 / bf16_to_f32 equal core/dtype.h's
//     (round to nearest even, the same NaN patterns; f16_to_f32 on the device
//     may give another NaN payload, as quant.h allows);
//   - dequant_value<T> equals quant's dequantize_row_ref element for element:
//     d and m widened from f16 exactly, then a multiply and an add each
//     rounded separately (never contracted into a fused multiply-add).
// This header includes no CUDA header; compiled by a host compiler the
// STRATA_HD functions are plain inline functions (tests/ops checks them
// against core and quant on the CPU).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "quant/blocks.h"

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__ __forceinline__
#else
#define STRATA_HD inline
#endif

namespace strata::cuda {

// a * b and a + b rounded once each: on the device the _rn intrinsics, which
// the compiler never fuses; on the host the plain operators (the project
// builds host code without floating-point contraction).
STRATA_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
STRATA_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

STRATA_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

STRATA_HD float bits_to_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}
STRATA_HD uint32_t f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#endif
}

// f16 bit pattern -> f32, exact (subnormals normalised). The device uses the
// hardware conversion (also exact; a NaN stays a NaN, its payload may differ).
STRATA_HD float f16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      u = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return bits_to_f32(u);
#endif
}

// f32 -> f16 bit pattern, round to nearest even; NaN -> sign | 0x7e00.
STRATA_HD uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return sign;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t v = abs - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<uint16_t>(sign | (v >> 13));
}

STRATA_HD float bf16_to_f32(uint16_t h) {
  return bits_to_f32(static_cast<uint32_t>(h) << 16);
}

// f32 -> bf16 bit pattern, round to nearest even; NaN -> quiet NaN, same sign.
STRATA_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The four families of quantized formats (core/dtype.h).
enum class QuantKind : uint8_t { kNone, kQ8S, kQ8A, kQ4S, kQ4A };

STRATA_HD constexpr QuantKind quant_kind(DType t) {
  switch (t) {
    case DType::kQ8S32:
    case DType::kQ8S64:
    case DType::kQ8S128:
      return QuantKind::kQ8S;
    case DType::kQ8A32:
    case DType::kQ8A64:
    case DType::kQ8A128:
      return QuantKind::kQ8A;
    case DType::kQ4S32:
      return QuantKind::kQ4S;
    case DType::kQ4A32:
    case DType::kQ4A64:
    case DType::kQ4A128:
      return QuantKind::kQ4A;
    default:
      return QuantKind::kNone;
  }
}

// Element j of a quantized row of format T (row: the first block; blocks are
// 2-byte aligned). Equal, bit for bit, to dequantize_row_ref's y[j].
template <DType T>
STRATA_HD float dequant_value(const void* row, int64_t j) {
  using B = block_of_t<T>;
  constexpr int G = B::kGroup;
  const B& b = static_cast<const B*>(row)[j / G];
  const int e = static_cast<int>(j % G);
  constexpr QuantKind kind = quant_kind(T);
  if constexpr (kind == QuantKind::kQ8S) {
    return mul_rn(static_cast<float>(b.qs[e]), f16_to_f32(b.d));
  } else if constexpr (kind == QuantKind::kQ4S) {
    const int q = e < G / 2 ? (b.qs[e] & 0x0f) : (b.qs[e - G / 2] >> 4);
    return mul_rn(static_cast<float>(q - 8), f16_to_f32(b.d));
  } else if constexpr (kind == QuantKind::kQ8A) {
    return add_rn(mul_rn(static_cast<float>(b.qs[e]), f16_to_f32(b.d)), f16_to_f32(b.m));
  } else {
    static_assert(kind == QuantKind::kQ4A, "not a quantized format");
    const int q = e < G / 2 ? (b.qs[e] & 0x0f) : (b.qs[e - G / 2] >> 4);
    return add_rn(mul_rn(static_cast<float>(q), f16_to_f32(b.d)), f16_to_f32(b.m));
  }
}

// Values of one whole block (G consecutive elements starting at block index
// ib) into y[0..G): the scale and minimum are widened once.
template <DType T>
STRATA_HD void dequant_block(const void* row, int64_t ib, float* y) {
  using B = block_of_t<T>;
  constexpr int G = B::kGroup;
  const B& b = static_cast<const B*>(row)[ib];
  const float d = f16_to_f32(b.d);
  constexpr QuantKind kind = quant_kind(T);
  if constexpr (kind == QuantKind::kQ8S) {
    for (int e = 0; e < G; ++e) y[e] = mul_rn(static_cast<float>(b.qs[e]), d);
  } else if constexpr (kind == QuantKind::kQ4S) {
    for (int e = 0; e < G / 2; ++e) {
      y[e] = mul_rn(static_cast<float>((b.qs[e] & 0x0f) - 8), d);
      y[e + G / 2] = mul_rn(static_cast<float>((b.qs[e] >> 4) - 8), d);
    }
  } else if constexpr (kind == QuantKind::kQ8A) {
    const float m = f16_to_f32(b.m);
    for (int e = 0; e < G; ++e) y[e] = add_rn(mul_rn(static_cast<float>(b.qs[e]), d), m);
  } else {
    static_assert(kind == QuantKind::kQ4A, "not a quantized format");
    const float m = f16_to_f32(b.m);
    for (int e = 0; e < G / 2; ++e) {
      y[e] = add_rn(mul_rn(static_cast<float>(b.qs[e] & 0x0f), d), m);
      y[e + G / 2] = add_rn(mul_rn(static_cast<float>(b.qs[e] >> 4), d), m);
    }
  }
}

// Storage types of the KV pages and of 16-bit weights: load one element as
// f32, store one f32 (round to nearest even).
struct StoreF32 {
  using type = float;
  static constexpr DType kDType = DType::kF32;
  STRATA_HD static float load(const type* p, int64_t i) { return p[i]; }
  STRATA_HD static type from_f32(float x) { return x; }
};
struct StoreF16 {
  using type = uint16_t;
  static constexpr DType kDType = DType::kF16;
  STRATA_HD static float load(const type* p, int64_t i) { return f16_to_f32(p[i]); }
  STRATA_HD static type from_f32(float x) { return f32_to_f16(x); }
};
struct StoreBF16 {
  using type = uint16_t;
  static constexpr DType kDType = DType::kBF16;
  STRATA_HD static float load(const type* p, int64_t i) { return bf16_to_f32(p[i]); }
  STRATA_HD static type from_f32(float x) { return f32_to_bf16(x); }
};

// Element loaders of a row in any weight dtype, as f32 (exact): plain types
// through their Store, quantized formats through dequant_value.
template <typename S>
struct LoadPlain {
  static constexpr DType kDType = S::kDType;
  STRATA_HD float operator()(const void* row, int64_t j) const {
    return S::load(static_cast<const typename S::type*>(row), j);
  }
};
template <DType T>
struct LoadQuant {
  static constexpr DType kDType = T;
  STRATA_HD float operator()(const void* row, int64_t j) const { return dequant_value<T>(row, j); }
};

// Alignment a row of dtype t needs: 4 for f32, 2 for f16/bf16 and the
// quantized blocks (their f16 fields), 1 otherwise.
inline constexpr size_t row_align(DType t) {
  return t == DType::kF32 || t == DType::kI32 ? 4 : (t == DType::kI8 ? 1 : 2);
}

}  // namespace strata::cuda
