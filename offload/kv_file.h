// The file that holds the KV pages living on disk (kv/kv_cache.h: pages
// whose home is disk have a slot each). Layout: one record per (layer, slot),
// [n_layer][slots] records of record_bytes() = 2 page_bytes rounded up to
// kDiskAlign, K first then V, so a page's layer is one O_DIRECT read and the
// pages of one layer with consecutive slots are one read. The file is
// created in the offload directory and unlinked at once: it never outlives
// the process.
#pragma once

#include <cstdint>
#include <string>

#include "kv/page_pool.h"
#include "offload/disk_io.h"

namespace strata {

class KvFile {
 public:
  explicit KvFile(const KvGeometry& geometry);

  // Creates (or grows) the file in `dir` for `slots` slots per layer; a
  // no-op when it has that many. Throws Error naming the directory when it
  // cannot be created or sized (a full disk shows here, before any work).
  void prepare(const std::string& dir, int64_t slots);
  const DiskFile& file() const { return file_; }
  uint64_t bytes() const;
  uint64_t record_bytes() const { return record_bytes_; }
  // The bytes of one record for pages of `geometry`.
  static uint64_t record_bytes_for(const KvGeometry& geometry);
  uint64_t record_offset(int64_t layer, int32_t slot) const;

 private:
  int64_t n_layer_ = 0;
  uint64_t record_bytes_ = 0;
  int64_t slots_ = 0;
  DiskFile file_;
};

}  // namespace strata
