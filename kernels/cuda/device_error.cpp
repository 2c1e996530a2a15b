// One-line descriptions of the device-side argument errors of kernels/cuda
// (DeviceError, ops.h).
#include <fmt/format.h>

#include "kernels/cuda/ops.h"

namespace strata::cuda {

std::string describe(const DeviceError& e) {
  switch (static_cast<DeviceErrorCode>(e.code)) {
    case DeviceErrorCode::kNone:
      return "no error";
    case DeviceErrorCode::kTokenId:
      return fmt::format("embedding: token id {} at row {} is outside [0, {})", e.value, e.row,
                         e.limit);
    case DeviceErrorCode::kGatherRow:
      return fmt::format("gather_rows: row index {} at row {} is negative", e.value, e.row);
    case DeviceErrorCode::kPosition:
      return fmt::format("rope: position {} of token {} is negative", e.value, e.row);
    case DeviceErrorCode::kSlot:
      return fmt::format("kv_append: slot {} of token {} is outside [0, {}) or on a null page",
                         e.value, e.row, e.limit);
    case DeviceErrorCode::kPageId:
      return fmt::format("page_key_minmax: page id {} at entry {} is outside [0, {}) or null",
                         e.value, e.row, e.limit);
    case DeviceErrorCode::kFill:
      return fmt::format("page_key_minmax: fill {} at entry {} is outside [1, {}]", e.value, e.row,
                         e.limit);
    case DeviceErrorCode::kSequence:
      return fmt::format(
          "attention: sequence {} (kv_len {}) has an inconsistent q_indptr/page_indptr/kv_len",
          e.row, e.value);
    case DeviceErrorCode::kAttentionPage:
      return fmt::format("attention: sequence {} uses page id {} outside [0, {}) or a null page",
                         e.row, e.value, e.limit);
  }
  return fmt::format("unknown device error code {} (row {}, value {}, limit {})", e.code, e.row,
                     e.value, e.limit);
}

}  // namespace strata::cuda
