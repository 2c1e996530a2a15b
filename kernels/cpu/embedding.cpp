#include "kernels/cpu/embedding.h"

#include <cstddef>

#include "kernels/cpu/op_args.h"
#include "kernels/cpu/parallel.h"
#include "quant/convert.h"

namespace strata::cpu {

Status embedding(float* y, int64_t y_stride, const void* table, DType dtype, size_t table_row_bytes,
                 int64_t n_vocab, int64_t d, const int32_t* ids, int64_t n_ids) {
  if (Status s =
          op_args::embedding(y, y_stride, table, dtype, table_row_bytes, n_vocab, d, ids, n_ids);
      s != Status::kOk) {
    return s;
  }
#pragma omp parallel for schedule(static) num_threads(threads_for(n_ids* d))
  for (int64_t i = 0; i < n_ids; ++i) {
    row_to_f32(dtype, op_args::table_row(table, table_row_bytes, ids[i]), y + i * y_stride, d);
  }
  return Status::kOk;
}

}  // namespace strata::cpu
