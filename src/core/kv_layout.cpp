#include "core/kv_layout.h"

#include <algorithm>

namespace strata {

int kv_key_bits(DType dtype) { return dtype_info(dtype).bits <= 4 ? 4 : 8; }

size_t kv_key_page_bytes(DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim) {
  const size_t codes = static_cast<size_t>((page_size * kv_key_bits(dtype) + 7) / 8);
  return static_cast<size_t>(n_kv_head * head_dim) * (4 + codes);
}

size_t kv_value_page_bytes(DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim) {
  const DTypeInfo& info = dtype_info(dtype);
  const int64_t blocks = (head_dim + info.block_elems - 1) / info.block_elems;
  return static_cast<size_t>(page_size * n_kv_head * blocks) * static_cast<size_t>(info.block_bytes);
}

size_t kv_quant_page_bytes(DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim) {
  return std::max(kv_key_page_bytes(dtype, page_size, n_kv_head, head_dim),
                  kv_value_page_bytes(dtype, page_size, n_kv_head, head_dim));
}

size_t kv_page_bytes(DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim) {
  return dtype_info(dtype).quantized ? kv_quant_page_bytes(dtype, page_size, n_kv_head, head_dim)
                                     : kv_value_page_bytes(dtype, page_size, n_kv_head, head_dim);
}

uint64_t kv_disk_record_bytes(uint64_t page_bytes) {
  constexpr uint64_t kAlign = 4096;
  return (2 * page_bytes + kAlign - 1) / kAlign * kAlign;
}

int64_t kv_disk_extent_pages(uint64_t page_bytes, int64_t most_disk_pages) {
  const uint64_t record = kv_disk_record_bytes(page_bytes);
  const auto target = static_cast<int64_t>((kKvDiskExtentBytes + record - 1) / record);
  return std::max<int64_t>(1, std::min(target, most_disk_pages));
}

}  // namespace strata
