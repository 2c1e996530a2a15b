// The KV cache's disk file (kv_file.h).
#include "offload/kv_file.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/kv_layout.h"
#include "core/log.h"
#include "offload/aligned_buffer.h"

namespace strata {

uint64_t KvFile::record_bytes_for(const KvGeometry& geometry) {
  return kv_disk_record_bytes(geometry.page_bytes());
}

KvFile::KvFile(const KvGeometry& geometry)
    : n_layer_(geometry.n_layer), record_bytes_(record_bytes_for(geometry)) {}

void KvFile::prepare(const std::string& dir, int64_t slots) {
  if (slots <= slots_) return;
  namespace fs = std::filesystem;
  if (!file_.is_open()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      fail("--offload-dir {}: cannot create the directory: {}; choose a directory you can write to",
           dir, ec.message());
    }
    static std::atomic<int> counter{0};
    const std::string path =
        (fs::path(dir) / fmt::format("strata-kv-{}-{}.bin", ::getpid(), counter++)).string();
    file_ = DiskFile::open(path, OpenMode::kCreate, true);
    // The name goes at once: the descriptor keeps the file, and nothing is
    // left behind however the process ends.
    ::unlink(path.c_str());
    spdlog::info("kv: pages on disk go to {} ({})", dir,
                 file_.direct() ? "O_DIRECT" : "buffered: the filesystem has no O_DIRECT");
  }
  file_.allocate(static_cast<uint64_t>(n_layer_) * static_cast<uint64_t>(slots) * record_bytes_);
  slots_ = slots;
}

uint64_t KvFile::bytes() const {
  return static_cast<uint64_t>(n_layer_) * static_cast<uint64_t>(slots_) * record_bytes_;
}

uint64_t KvFile::record_offset(int64_t layer, int32_t slot) const {
  STRATA_ASSERT(layer >= 0 && layer < n_layer_);
  STRATA_ASSERT(slot >= 0 && slot < slots_);
  return (static_cast<uint64_t>(layer) * static_cast<uint64_t>(slots_) +
          static_cast<uint64_t>(slot)) *
         record_bytes_;
}

}  // namespace strata
