// A read-only memory-mapped file. The mapping lives as long as the object;
// views into it (spans, string_views) must not outlive it. Bounds are the
// caller's to check with in_bounds() before any offset read from the file is
// used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace strata {

class MappedFile {
 public:
  // Maps `path` read-only; throws Error naming the path when it cannot be
  // opened or mapped. An empty file maps to an empty span.
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Modification time when mapped (ns since the epoch): with size(), the
  // file's identity for checks that a derived file is still current.
  int64_t mtime_ns() const { return mtime_ns_; }
  const std::byte* data() const { return data_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

  // True when [offset, offset + length) lies inside the file, without overflow.
  bool in_bounds(uint64_t offset, uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }
  // The bytes [offset, offset + length); throws Error naming the file when
  // they are not inside it.
  std::span<const std::byte> slice(uint64_t offset, uint64_t length) const;

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  int64_t mtime_ns_ = 0;
};

}  // namespace strata
