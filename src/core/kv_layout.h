// Bytes of a KV cache page in every storage dtype: the one definition the
// page pool, the kernels and the cost model share.
//
// f32/f16/bf16 pages hold [page_size][n_kv_head][head_dim] elements. In a
// quantized format (q4/q8, quant/blocks.h) values are stored per token as
// head_dim / G blocks per kv head, and keys per channel over the page: per
// (kv head, channel) an f16 scale and minimum, then page_size codes of 4 or 8
// bits (kernels/cpu/attention_quant.h has the layout); K and V pages have one
// size, the larger of the two.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata {

// Bits of a quantized key code: 4 for the q4 formats, 8 for q8.
int kv_key_bits(DType dtype);
// Quantized formats: bytes of a page of keys, of values, and of every page.
size_t kv_key_page_bytes(DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim);
size_t kv_value_page_bytes(DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim);
size_t kv_quant_page_bytes(DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim);
// Any dtype: bytes of one K (or V) page.
size_t kv_page_bytes(DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim);

// KV pages on disk (offload/kv_file.h): a record per (layer, page) holds
// its K then V page, rounded up to the 4 KiB of O_DIRECT.
uint64_t kv_disk_record_bytes(uint64_t page_bytes);
// A sequence's disk pages take consecutive slots of extents it owns
// (kv/kv_cache.h), so one layer of a sequence is read in requests of up to
// an extent. The extent aims at kKvDiskExtentBytes of records (reads that
// size run near the disk's best rate), but is no longer than the most disk
// pages a sequence of the block has (`most_disk_pages`; at least 1).
inline constexpr uint64_t kKvDiskExtentBytes = uint64_t{1} << 20;
int64_t kv_disk_extent_pages(uint64_t page_bytes, int64_t most_disk_pages);

// Sparse decode attention (--sparse-budget) leaves the layers before this
// one dense, as QUEST does (their attention is spread too evenly for a page
// bound to pick); the forward, the KV staging and the cost model agree on it.
inline constexpr int64_t kSparseFirstLayer = 2;

}  // namespace strata
