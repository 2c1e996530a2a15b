// Token embedding lookup: rows of a table stored in any weight dtype (f32,
// f16, bf16 or a quantized format, e.g. a GGUF Q8_0 token_embd) gathered
// into f32 rows. Every id is checked against n_vocab before anything is
// written.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/status.h"

namespace strata::cpu {

// y: [n_ids, d] f32, row stride y_stride (>= d)
// table: [n_vocab, d] in dtype, row stride table_row_bytes (>= row_bytes(dtype, d))
// ids: [n_ids], each in [0, n_vocab)
Status embedding(float* y, int64_t y_stride, const void* table, DType dtype, size_t table_row_bytes,
                 int64_t n_vocab, int64_t d, const int32_t* ids, int64_t n_ids);
Status embedding_ref(float* y, int64_t y_stride, const void* table, DType dtype,
                     size_t table_row_bytes, int64_t n_vocab, int64_t d, const int32_t* ids,
                     int64_t n_ids);

}  // namespace strata::cpu
