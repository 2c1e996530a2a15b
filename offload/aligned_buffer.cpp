// AlignedBuffer: aligned_alloc / free, move-only ownership.
#include "offload/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "core/error.h"

namespace strata {

AlignedBuffer::AlignedBuffer(size_t bytes, size_t alignment, bool zero) : alignment_(alignment) {
  STRATA_ASSERT(alignment >= sizeof(void*) && (alignment & (alignment - 1)) == 0);
  if (bytes == 0) return;
  size_ = align_up(bytes, alignment);
  void* p = std::aligned_alloc(alignment, size_);
  if (!p) throw std::bad_alloc();
  data_ = static_cast<std::byte*>(p);
  if (zero) std::memset(data_, 0, size_);
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      alignment_(other.alignment_) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    alignment_ = other.alignment_;
  }
  return *this;
}

}  // namespace strata
