// Helpers of the CPU kernel tests: seeded random data, output buffers with
// canaries around them (and in the gaps of strided rows), and an
// every-element comparison against a reference with a per-element tolerance
// that reports the first failures with index, values and bound.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace strata::test {

inline constexpr double kU32 = 0x1p-24;    // unit roundoff of f32 (round to nearest)
inline constexpr double kTiny = 0x1p-100;  // absolute slack for results flushed to zero

inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

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

// Every element: NaN where the reference is NaN, the same infinity where it is
// infinite, else |out - ref| <= tol(i). Reports up to 5 failures.
inline ::testing::AssertionResult all_close(const std::vector<float>& out,
                                            const std::vector<double>& ref,
                                            const std::function<double(size_t)>& tol,
                                            const std::string& what) {
  if (out.size() != ref.size()) {
    return ::testing::AssertionFailure() << what << ": size " << out.size() << " vs " << ref.size();
  }
  size_t n_bad = 0;
  std::string msg;
  for (size_t i = 0; i < out.size(); ++i) {
    bool ok;
    double bound = 0;
    if (std::isnan(ref[i])) {
      ok = std::isnan(out[i]);
    } else if (std::isinf(ref[i])) {
      ok = out[i] == ref[i];
    } else {
      bound = tol(i);
      ok = std::isfinite(out[i]) && std::fabs(out[i] - ref[i]) <= bound;
    }
    if (!ok && ++n_bad <= 5) {
      char line[200];
      std::snprintf(line, sizeof line, "\n  [%zu] got %.9g want %.9g (|diff| %.3g > tol %.3g)", i,
                    out[i], ref[i], std::fabs(out[i] - ref[i]), bound);
      msg += line;
    }
  }
  if (n_bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << n_bad << " of " << out.size() << " elements out of tolerance" << msg;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace strata::test
