// Dispatch macros of the CUDA launchers: a runtime size or dtype becomes a
// compile-time constant (or type) inside the macro's body, one case per
// supported value. The default branch records the unsupported value for the
// calling thread (note_unsupported) and makes the launcher return
// Status::kUnsupported; the backend puts last_detail() in its error
// message ("head_dim 72 (supported: 64, 80, 96, 112, 128, 256)"). Kernels stay
// leaves: no exception, no log.
//
// Plain C++ (no CUDA header): tests/ops runs the macros on the CPU.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "kernels/status.h"

namespace strata::cuda {

// Per-thread detail of the last failure of a launcher, for the caller's
// message: "what value (supported: list)" for an unsupported dispatch, or a
// library's own words for kBackendError ("cublasGemmEx: CUBLAS_STATUS_...").
void note_unsupported(std::string_view what, int64_t value, std::string_view supported);
void note_unsupported(std::string_view what, std::string_view value, std::string_view supported);
void note_detail(std::string_view detail);
void clear_detail();
// The last note of this thread ("" when there is none).
std::string_view last_detail();

inline constexpr std::string_view kHeadDims = "64, 80, 96, 112, 128, 256";

}  // namespace strata::cuda

#define STRATA_DISPATCH_CASE_INT(NAME, VALUE, ...) \
  case VALUE: {                                    \
    constexpr int NAME = VALUE;                    \
    __VA_ARGS__;                                   \
    break;                                         \
  }

// Head sizes of attention: constexpr int NAME in the body.
#define STRATA_DISPATCH_HEAD_DIM(head_dim, NAME, ...)                              \
  switch (head_dim) {                                                              \
    STRATA_DISPATCH_CASE_INT(NAME, 64, __VA_ARGS__)                                \
    STRATA_DISPATCH_CASE_INT(NAME, 80, __VA_ARGS__)                                \
    STRATA_DISPATCH_CASE_INT(NAME, 96, __VA_ARGS__)                                \
    STRATA_DISPATCH_CASE_INT(NAME, 112, __VA_ARGS__)                               \
    STRATA_DISPATCH_CASE_INT(NAME, 128, __VA_ARGS__)                               \
    STRATA_DISPATCH_CASE_INT(NAME, 256, __VA_ARGS__)                               \
    default:                                                                       \
      ::strata::cuda::note_unsupported("head_dim", static_cast<int64_t>(head_dim), \
                                       ::strata::cuda::kHeadDims);                 \
      return ::strata::Status::kUnsupported;                                       \
  }

// Element types of KV pages and of 16-bit tensors: `using NAME = Store...`
// (numeric.h) in the body.
#define STRATA_DISPATCH_STORE(dtype, NAME, ...)                                                 \
  switch (dtype) {                                                                              \
    case ::strata::DType::kF32: {                                                               \
      using NAME = ::strata::cuda::StoreF32;                                                    \
      __VA_ARGS__;                                                                              \
      break;                                                                                    \
    }                                                                                           \
    case ::strata::DType::kF16: {                                                               \
      using NAME = ::strata::cuda::StoreF16;                                                    \
      __VA_ARGS__;                                                                              \
      break;                                                                                    \
    }                                                                                           \
    case ::strata::DType::kBF16: {                                                              \
      using NAME = ::strata::cuda::StoreBF16;                                                   \
      __VA_ARGS__;                                                                              \
      break;                                                                                    \
    }                                                                                           \
    default:                                                                                    \
      ::strata::cuda::note_unsupported("dtype", ::strata::dtype_name(dtype), "f32, f16, bf16"); \
      return ::strata::Status::kUnsupported;                                                    \
  }

#define STRATA_DISPATCH_CASE_DTYPE(NAME, VALUE, ...) \
  case VALUE: {                                      \
    constexpr ::strata::DType NAME = VALUE;          \
    __VA_ARGS__;                                     \
    break;                                           \
  }

// Every quantized format: constexpr DType NAME in the body.
#define STRATA_DISPATCH_QUANT(dtype, NAME, ...)                                            \
  switch (dtype) {                                                                         \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ8S32, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ8S64, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ8S128, __VA_ARGS__)                \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ8A32, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ8A64, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ8A128, __VA_ARGS__)                \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ4S32, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ4A32, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ4A64, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ4A128, __VA_ARGS__)                \
    default:                                                                               \
      ::strata::cuda::note_unsupported("quantized dtype", ::strata::dtype_name(dtype),     \
                                       "q8s32/64/128, q8a32/64/128, q4s32, q4a32/64/128"); \
      return ::strata::Status::kUnsupported;                                               \
  }

// The GGUF-only formats (gguf_numeric.h): constexpr DType NAME in the body.
#define STRATA_DISPATCH_GGUF(dtype, NAME, ...)                                            \
  switch (dtype) {                                                                        \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ5_0, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ5_1, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ2_K, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ3_K, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ4_K, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ5_K, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ6_K, __VA_ARGS__)                 \
    STRATA_DISPATCH_CASE_DTYPE(NAME, ::strata::DType::kQ8_K, __VA_ARGS__)                 \
    default:                                                                              \
      ::strata::cuda::note_unsupported("GGUF dtype", ::strata::dtype_name(dtype),         \
                                       "q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, q8_k"); \
      return ::strata::Status::kUnsupported;                                              \
  }

// Every weight dtype (f32, f16, bf16, quantized, GGUF-only): `using NAME =
// LoadPlain<..>`, `LoadQuant<..>` (numeric.h) or `LoadGguf<..>`
// (gguf_numeric.h) in the body.
#define STRATA_DISPATCH_LOAD(dtype, NAME, ...)                           \
  switch (dtype) {                                                       \
    case ::strata::DType::kF32: {                                        \
      using NAME = ::strata::cuda::LoadPlain<::strata::cuda::StoreF32>;  \
      __VA_ARGS__;                                                       \
      break;                                                             \
    }                                                                    \
    case ::strata::DType::kF16: {                                        \
      using NAME = ::strata::cuda::LoadPlain<::strata::cuda::StoreF16>;  \
      __VA_ARGS__;                                                       \
      break;                                                             \
    }                                                                    \
    case ::strata::DType::kBF16: {                                       \
      using NAME = ::strata::cuda::LoadPlain<::strata::cuda::StoreBF16>; \
      __VA_ARGS__;                                                       \
      break;                                                             \
    }                                                                    \
    default: {                                                           \
      if (::strata::dtype_info(dtype).dequant_only) {                    \
        STRATA_DISPATCH_GGUF(dtype, NAME##_gguf_dtype_, {                \
          using NAME = ::strata::cuda::LoadGguf<NAME##_gguf_dtype_>;     \
          __VA_ARGS__;                                                   \
        })                                                               \
        break;                                                           \
      }                                                                  \
      STRATA_DISPATCH_QUANT(dtype, NAME##_quant_dtype_, {                \
        using NAME = ::strata::cuda::LoadQuant<NAME##_quant_dtype_>;     \
        __VA_ARGS__;                                                     \
      })                                                                 \
      break;                                                             \
    }                                                                    \
  }
