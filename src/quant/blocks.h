// Block layouts of the group-wise quantized formats. One block holds one group
// of G consecutive values of a row; a row of n values is n/G blocks laid end to
// end with no padding. Scales (d) and minimums (m) are IEEE f16 bit patterns.
// The invariant owned here: sizeof(every block) == dtype_info(t).block_bytes
// and block_elems == G, checked at compile time, so a pointer to a row of any
// format can be cast to an array of its block struct.
//
// Nibble order (4-bit formats) is GGUF's: byte j of qs holds element j in its
// low nibble and element j + G/2 in its high nibble.
//
//   BlockQ8S<G>  x = d*q,       q int8 in [-127,127]   (BlockQ8S<32> == GGUF block_q8_0)
//   BlockQ8A<G>  x = d*q + m,   q uint8 in [0,255]
//   BlockQ4S32   x = d*(q-8),   q in [0,15]           (== GGUF block_q4_0)
//   BlockQ4A<G>  x = d*q + m,   q in [0,15]           (BlockQ4A<32> == GGUF block_q4_1)
//
// Blocks have alignment 2 (the f16 fields), so any even byte offset is a valid
// block address; rows read from files at odd offsets must be copied first.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

namespace strata {

template <int G>
struct BlockQ8S {
  static constexpr int kGroup = G;
  uint16_t d;    // f16 scale
  int8_t qs[G];  // [G]
};

template <int G>
struct BlockQ8A {
  static constexpr int kGroup = G;
  uint16_t d;     // f16 scale
  uint16_t m;     // f16 minimum
  uint8_t qs[G];  // [G]
};

struct BlockQ4S32 {
  static constexpr int kGroup = 32;
  uint16_t d;      // f16 scale
  uint8_t qs[16];  // [G/2] two 4-bit values per byte
};

template <int G>
struct BlockQ4A {
  static constexpr int kGroup = G;
  uint16_t d;         // f16 scale
  uint16_t m;         // f16 minimum
  uint8_t qs[G / 2];  // [G/2] two 4-bit values per byte
};

// The block struct of each quantized DType, for code that dispatches on it.
template <DType T>
struct BlockOf;
// clang-format off
template <> struct BlockOf<DType::kQ8S32> { using type = BlockQ8S<32>; };
template <> struct BlockOf<DType::kQ8S64> { using type = BlockQ8S<64>; };
template <> struct BlockOf<DType::kQ8S128> { using type = BlockQ8S<128>; };
template <> struct BlockOf<DType::kQ8A32> { using type = BlockQ8A<32>; };
template <> struct BlockOf<DType::kQ8A64> { using type = BlockQ8A<64>; };
template <> struct BlockOf<DType::kQ8A128> { using type = BlockQ8A<128>; };
template <> struct BlockOf<DType::kQ4S32> { using type = BlockQ4S32; };
template <> struct BlockOf<DType::kQ4A32> { using type = BlockQ4A<32>; };
template <> struct BlockOf<DType::kQ4A64> { using type = BlockQ4A<64>; };
template <> struct BlockOf<DType::kQ4A128> { using type = BlockQ4A<128>; };
// clang-format on
template <DType T>
using block_of_t = typename BlockOf<T>::type;

namespace detail {
template <DType T>
constexpr bool block_layout_ok() {
  using B = block_of_t<T>;
  return sizeof(B) == static_cast<size_t>(dtype_info_constexpr(T).block_bytes) &&
         B::kGroup == dtype_info_constexpr(T).block_elems && std::is_trivially_copyable_v<B> &&
         std::is_standard_layout_v<B> && alignof(B) == 2;
}
}  // namespace detail

static_assert(detail::block_layout_ok<DType::kQ8S32>(), "q8s32 block layout");
static_assert(detail::block_layout_ok<DType::kQ8S64>(), "q8s64 block layout");
static_assert(detail::block_layout_ok<DType::kQ8S128>(), "q8s128 block layout");
static_assert(detail::block_layout_ok<DType::kQ8A32>(), "q8a32 block layout");
static_assert(detail::block_layout_ok<DType::kQ8A64>(), "q8a64 block layout");
static_assert(detail::block_layout_ok<DType::kQ8A128>(), "q8a128 block layout");
static_assert(detail::block_layout_ok<DType::kQ4S32>(), "q4s32 block layout");
static_assert(detail::block_layout_ok<DType::kQ4A32>(), "q4a32 block layout");
static_assert(detail::block_layout_ok<DType::kQ4A64>(), "q4a64 block layout");
static_assert(detail::block_layout_ok<DType::kQ4A128>(), "q4a128 block layout");

// Calls f(static_cast<B*>(nullptr)) with B the block struct of the
// quantized dtype t: the one switch over the formats, for code whose
// kernels are overloaded on the block type (quant_ref.cpp, the fast paths).
template <typename F>
void visit_block_type(DType t, F&& f) {
  switch (t) {
    case DType::kQ8S32: return f(static_cast<BlockQ8S<32>*>(nullptr));
    case DType::kQ8S64: return f(static_cast<BlockQ8S<64>*>(nullptr));
    case DType::kQ8S128: return f(static_cast<BlockQ8S<128>*>(nullptr));
    case DType::kQ8A32: return f(static_cast<BlockQ8A<32>*>(nullptr));
    case DType::kQ8A64: return f(static_cast<BlockQ8A<64>*>(nullptr));
    case DType::kQ8A128: return f(static_cast<BlockQ8A<128>*>(nullptr));
    case DType::kQ4S32: return f(static_cast<BlockQ4S32*>(nullptr));
    case DType::kQ4A32: return f(static_cast<BlockQ4A<32>*>(nullptr));
    case DType::kQ4A64: return f(static_cast<BlockQ4A<64>*>(nullptr));
    case DType::kQ4A128: return f(static_cast<BlockQ4A<128>*>(nullptr));
    default: break;
  }
  STRATA_ASSERT_MSG(false, "{} is not a q4/q8 block format", dtype_name(t));
}

// GGUF's names for the blocks that are byte-identical to theirs.
using BlockQ8_0 = BlockQ8S<32>;
using BlockQ4_0 = BlockQ4S32;
using BlockQ4_1 = BlockQ4A<32>;

}  // namespace strata
