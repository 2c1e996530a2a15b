// Aligned host memory, owned: the buffers the disk I/O layer reads into and
// writes from with O_DIRECT (addresses, offsets and lengths multiples of
// kDiskAlign), and the default memory behind the cpu tier's pool. Freed on
// destruction; move-only. Contents are not initialised unless asked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace strata {

// Alignment O_DIRECT needs on every disk Strata targets (the 4 KiB logical
// block of NVMe drives; 512-byte devices accept it too).
inline constexpr size_t kDiskAlign = 4096;

constexpr uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}
constexpr uint64_t align_down(uint64_t x, uint64_t a) {
  return x / a * a;
}
inline bool is_aligned(const void* p, size_t a) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // `bytes` rounded up to a multiple of `alignment` (a power of two); zeroed
  // when `zero`. Throws std::bad_alloc when the memory is not there.
  explicit AlignedBuffer(size_t bytes, size_t alignment = kDiskAlign, bool zero = false);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }  // the rounded size
  size_t alignment() const { return alignment_; }
  bool empty() const { return size_ == 0; }
  std::span<std::byte> bytes() { return {data_, size_}; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t alignment_ = kDiskAlign;
};

}  // namespace strata
