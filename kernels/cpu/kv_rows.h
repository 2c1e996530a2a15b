// Internal to the CPU attention kernels (attention.cpp, attention_ref.cpp,
// attention_decode*.cpp): the rows of f32/f16/bf16 KV pages (element sizes,
// writing a row in the page dtype, reading one element as stored, and with
// AVX-512 16 elements widened to f32) and the
// argument checks the fast and the reference paths share, so that both
// accept and reject exactly the same calls.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "quant/convert.h"

namespace strata::cpu {

inline bool kv_dtype_ok(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

inline int64_t elem_bytes(DType t) {
  return t == DType::kF32 ? 4 : 2;
}

// x: [n] f32 -> y: [n] in t (f32, f16 or bf16), round to nearest even.
inline void store_row(DType t, const float* x, void* y, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(y, x, static_cast<size_t>(n) * 4);
      break;
    case DType::kF16:
      f32_to_f16_row(x, static_cast<uint16_t*>(y), n);
      break;
    default:
      f32_to_bf16_row(x, static_cast<uint16_t*>(y), n);
      break;
  }
}

inline float stored_value(DType t, const void* row, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(row)[i];
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(row)[i]);
    default:
      return bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
  }
}

// f32/f16/bf16 pages; the shape checks are check_attention_batch's.
Status check_batch(const float* out, int64_t out_stride, const float* q, int64_t q_stride,
                   int64_t n_head, const KvPages& kv, const AttentionBatch& b, int64_t* n_tokens,
                   int64_t* max_new, int64_t* work);
Status check_append(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                    int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                    int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                    int64_t n_tokens);
Status check_minmax(const float* k_min, const float* k_max, const void* const* k_pages,
                    int64_t n_pages, DType dtype, int64_t page_size, int64_t n_kv_head,
                    int64_t head_dim, const int32_t* page_ids, const int32_t* n_filled,
                    int64_t n_list);

#if defined(__x86_64__)
#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

// GCC 12 warns about the undefined pass-through operand inside several
// AVX-512 intrinsics of its own headers; nothing here reads one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 16 elements of a K or V row from element c on, widened to f32; lanes
// outside `m` are zero. F16C widening is exact; NaN stays NaN.
template <DType T>
STRATA_AVX512 inline __m512 load16(const void* row, int64_t c, __mmask16 m) {
  if constexpr (T == DType::kF32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + c);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + c);
    if constexpr (T == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
#pragma GCC diagnostic pop
#endif  // __x86_64__

}  // namespace strata::cpu
