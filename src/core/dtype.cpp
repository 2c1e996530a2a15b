#include "core/dtype.h"

#include <array>
#include <cstring>

#include "core/error.h"

namespace strata {

namespace {

constexpr const auto& kInfo = detail::kDTypeInfo;

}  // namespace

const DTypeInfo& dtype_info(DType t) {
  auto i = static_cast<size_t>(t);
  STRATA_ASSERT(i < kInfo.size());
  return kInfo[i];
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < kInfo.size(); ++i) {
    if (kInfo[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::optional<DType> quant_dtype(int bits, bool symmetric, int group) {
  for (size_t i = 0; i < kInfo.size(); ++i) {
    const auto& d = kInfo[i];
    if (d.quantized && !d.dequant_only && d.bits == bits && d.symmetric == symmetric &&
        d.block_elems == group) {
      return static_cast<DType>(i);
    }
  }
  return std::nullopt;
}

bool row_elems_ok(DType t, int64_t n_elems) {
  return n_elems >= 0 && n_elems % dtype_info(t).block_elems == 0;
}

size_t row_bytes(DType t, int64_t n_elems) {
  const auto& d = dtype_info(t);
  STRATA_ASSERT_MSG(row_elems_ok(t, n_elems), "{} elements of {}", n_elems, d.name);
  return static_cast<size_t>(n_elems / d.block_elems) * static_cast<size_t>(d.block_bytes);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
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
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (incl. rounding up) or Inf
  if (abs < 0x38800000u) {                        // subnormal or zero in f16
    if (abs < 0x33000000u) return sign;           // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    uint32_t q = mant >> (shift);
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t v = abs - (112u << 23);  // rebias exponent 127 -> 15
  v += 0xfffu + ((v >> 13) & 1u);   // round to nearest even
  return sign | static_cast<uint16_t>(v >> 13);
}

}  // namespace strata
