// Element types of tensors: plain floats, integers, and the block-quantized
// formats. This table is the single source of every format's block size in
// bytes and in elements; the block structs in quant/blocks.h static_assert
// against it. Quantized formats store a row as consecutive blocks of
// `block_elems` values along the innermost dimension.
//
// Quantized formats (x = dequantized value, q = stored integer):
//   Q8S<G>: symmetric 8-bit, x = d*q, q in [-127,127]        (Q8S32 == GGUF Q8_0)
//   Q8A<G>: asymmetric 8-bit, x = d*q + m, q in [0,255]
//   Q4S<G>: symmetric 4-bit, x = d*(q-8), q in [0,15]       (Q4S32 == GGUF Q4_0)
//   Q4A<G>: asymmetric 4-bit, x = d*q + m, q in [0,15]      (Q4A32 == GGUF Q4_1)
//
// GGUF-only formats, read from model files and never written (dequant_only;
// quant/gguf_blocks.h has their layouts and arithmetic): Q5_0, Q5_1, and the
// K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K (super-blocks of 256 values
// with 6- or 8-bit sub-block scales).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI32,
  kI8,
  kQ8S32,
  kQ8S64,
  kQ8S128,
  kQ8A32,
  kQ8A64,
  kQ8A128,
  kQ4S32,
  kQ4A32,
  kQ4A64,
  kQ4A128,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
  kCount,
};

// GGUF's names for the formats that are identical to ours.
inline constexpr DType kQ8_0 = DType::kQ8S32;
inline constexpr DType kQ4_0 = DType::kQ4S32;
inline constexpr DType kQ4_1 = DType::kQ4A32;

struct DTypeInfo {
  std::string_view name;  // "f32", "q4a32", ...
  int block_elems;        // 1 for plain types
  int block_bytes;        // bytes of one block (the element size for plain types)
  int bits;               // bits per stored integer (0 for float types)
  bool quantized;
  bool symmetric;             // quantized only: scale alone, no minimum
  bool dequant_only = false;  // a GGUF format Strata reads but never writes
};

const DTypeInfo& dtype_info(DType t);

namespace detail {
inline constexpr std::array<DTypeInfo, static_cast<size_t>(DType::kCount)> kDTypeInfo = {{
    {"f32", 1, 4, 0, false, false},
    {"f16", 1, 2, 0, false, false},
    {"bf16", 1, 2, 0, false, false},
    {"i32", 1, 4, 0, false, false},
    {"i8", 1, 1, 0, false, false},
    {"q8s32", 32, 2 + 32, 8, true, true},
    {"q8s64", 64, 2 + 64, 8, true, true},
    {"q8s128", 128, 2 + 128, 8, true, true},
    {"q8a32", 32, 4 + 32, 8, true, false},
    {"q8a64", 64, 4 + 64, 8, true, false},
    {"q8a128", 128, 4 + 128, 8, true, false},
    {"q4s32", 32, 2 + 16, 4, true, true},
    {"q4a32", 32, 4 + 16, 4, true, false},
    {"q4a64", 64, 4 + 32, 4, true, false},
    {"q4a128", 128, 4 + 64, 4, true, false},
    {"q5_0", 32, 2 + 4 + 16, 5, true, true, true},
    {"q5_1", 32, 2 + 2 + 4 + 16, 5, true, false, true},
    {"q2_k", 256, 16 + 64 + 2 + 2, 2, true, false, true},
    {"q3_k", 256, 32 + 64 + 12 + 2, 3, true, true, true},
    {"q4_k", 256, 2 + 2 + 12 + 128, 4, true, false, true},
    {"q5_k", 256, 2 + 2 + 12 + 32 + 128, 5, true, false, true},
    {"q6_k", 256, 128 + 64 + 16 + 2, 6, true, true, true},
    {"q8_k", 256, 4 + 256 + 32, 8, true, true, true},
}};
}  // namespace detail

// dtype_info() for constant expressions (static_asserts on block layouts); t
// must be a valid DType (an invalid one does not compile in a constant
// expression). At run time use dtype_info(), which checks.
constexpr const DTypeInfo& dtype_info_constexpr(DType t) {
  return detail::kDTypeInfo[static_cast<size_t>(t)];
}

inline std::string_view dtype_name(DType t) {
  return dtype_info(t).name;
}
inline bool is_quantized(DType t) {
  return dtype_info(t).quantized;
}
// Parses a name from dtype_name(); nullopt when unknown.
std::optional<DType> dtype_from_name(std::string_view name);

// The quantized format for a bit width, symmetry and group size; nullopt when
// Strata has no such format.
std::optional<DType> quant_dtype(int bits, bool symmetric, int group);

// Bytes of n_elems elements of a row. n_elems must be a multiple of the block
// size (asserted); callers validating file input check that first with
// row_elems_ok().
bool row_elems_ok(DType t, int64_t n_elems);
size_t row_bytes(DType t, int64_t n_elems);

// ---- f16 / bf16 scalar conversions (round to nearest even) ----

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace strata
