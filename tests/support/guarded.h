// Output buffers with guards: canary values before, after and between the
// rows an op may write, so a test sees a write out of bounds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace strata::test {

// Rows of `cols` floats `stride` apart inside a buffer with `kGuard` canary
// floats before and after; the gaps between rows hold canaries too.
class GuardedRows {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint32_t kCanary = 0x7fc0dead;  // a NaN payload no op writes

  GuardedRows(int64_t rows, int64_t cols, int64_t stride)
      : rows_(rows),
        cols_(cols),
        stride_(stride),
        buf_(kGuard * 2 + static_cast<size_t>(std::max<int64_t>(rows * stride, 0))) {
    for (auto& v : buf_) std::memcpy(&v, &kCanary, 4);
  }
  float* data() { return buf_.data() + kGuard; }
  const float* data() const { return buf_.data() + kGuard; }
  float& at(int64_t r, int64_t c) { return data()[r * stride_ + c]; }
  float at(int64_t r, int64_t c) const { return data()[r * stride_ + c]; }
  int64_t stride() const { return stride_; }

  // Fills the rows (not the gaps) from `v` ([rows, cols] contiguous).
  void fill(const std::vector<float>& v) {
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t c = 0; c < cols_; ++c) at(r, c) = v[static_cast<size_t>(r * cols_ + c)];
    }
  }
  std::vector<float> rows() const {
    std::vector<float> v(static_cast<size_t>(rows_ * cols_));
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t c = 0; c < cols_; ++c) v[static_cast<size_t>(r * cols_ + c)] = at(r, c);
    }
    return v;
  }
  // Every float outside the rows still holds the canary.
  ::testing::AssertionResult canaries_intact() const {
    for (size_t i = 0; i < buf_.size(); ++i) {
      const int64_t e = static_cast<int64_t>(i) - static_cast<int64_t>(kGuard);
      const bool inside = e >= 0 && e < rows_ * stride_ && e % stride_ < cols_;
      if (inside) continue;
      uint32_t bits;
      std::memcpy(&bits, &buf_[i], 4);
      if (bits != kCanary) {
        return ::testing::AssertionFailure()
               << "canary overwritten at offset " << e << " (rows " << rows_ << " x " << cols_
               << ", stride " << stride_ << ")";
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  int64_t rows_, cols_, stride_;
  std::vector<float> buf_;
};

// A byte buffer with guard bytes on both sides; data() is 64-byte aligned
// plus `offset`, so tests can also place rows at unaligned addresses.
class Guarded {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kFill = 0xa5;
  explicit Guarded(size_t bytes, size_t offset = 0)
      : bytes_(bytes), offset_(offset), buf_(bytes + 2 * kGuard + offset + 64, kFill) {
    auto p = reinterpret_cast<uintptr_t>(buf_.data()) + kGuard;
    start_ = static_cast<size_t>(((p + 63) & ~uintptr_t{63}) -
                                 reinterpret_cast<uintptr_t>(buf_.data())) +
             offset;
  }
  uint8_t* data() { return buf_.data() + start_; }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data());
  }
  size_t size() const { return bytes_; }
  // True when every byte outside [data(), data() + size()) is still kFill.
  bool guards_intact() const {
    for (size_t i = 0; i < buf_.size(); ++i) {
      if ((i < start_ || i >= start_ + bytes_) && buf_[i] != kFill) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  size_t offset_;
  std::vector<uint8_t> buf_;
  size_t start_ = 0;
};

}  // namespace strata::test
