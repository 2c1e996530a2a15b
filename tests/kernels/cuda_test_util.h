// Helpers of the CUDA tests: skipping without a GPU, device buffers with
// guard bytes before and after (and canaries in the gaps of strided rows),
// seeded random data, and the every-element comparison against a reference
// with a per-element tolerance. Ops run on the legacy default stream, so the
// synchronous cudaMemcpy of a download waits for them.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/ops.h"
#include "quant/quant_ref.h"
#include "support/all_close.h"
#include "support/random.h"
#include "support/random_weights.h"

namespace strata::test {

// Relative errors of CUDA's functions (CUDA C++ Programming Guide,
// "Mathematical functions", single precision, no fast math): expf 2 ulp,
// erfcf 4 ulp, sinf/cosf 2 ulp from the correctly rounded result, which is
// itself within 0.5 ulp of the exact value; one ulp of a float x is at most
// 2^-23 |x|.
inline constexpr double kExpErr = 2.5 * 0x1p-23;
inline constexpr double kErfcErr = 4.5 * 0x1p-23;
inline constexpr double kTrigErr = 2.5 * 0x1p-23;

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define STRATA_REQUIRE_GPU()                                                                   \
  do {                                                                                         \
    if (!::strata::test::have_gpu()) {                                                         \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none): runs on a GPU machine"; \
    }                                                                                          \
  } while (0)

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Device memory holding `bytes` bytes with kGuard guard bytes on each side;
// everything starts as the guard pattern.
class DeviceBytes {
 public:
  static constexpr size_t kGuard = 256;  // keeps data() 256-byte aligned
  static constexpr uint8_t kFill = 0xa5;

  explicit DeviceBytes(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&base_, bytes + 2 * kGuard) != cudaSuccess) {
      cudaGetLastError();
      base_ = nullptr;
      ADD_FAILURE() << "cudaMalloc of " << bytes << " bytes failed";
      return;
    }
    cudaMemset(base_, kFill, bytes + 2 * kGuard);
  }
  ~DeviceBytes() {
    if (base_ != nullptr) cudaFree(base_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  void* data() const { return static_cast<char*>(base_) + kGuard; }
  size_t size() const { return bytes_; }
  void upload(const void* src, size_t bytes, size_t offset = 0) {
    ASSERT_LE(offset + bytes, bytes_);
    ASSERT_EQ(cudaMemcpy(static_cast<char*>(data()) + offset, src, bytes, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  // The whole buffer, guards included.
  std::vector<uint8_t> download_all() const {
    std::vector<uint8_t> v(bytes_ + 2 * kGuard);
    EXPECT_EQ(cudaMemcpy(v.data(), base_, v.size(), cudaMemcpyDeviceToHost), cudaSuccess)
        << cudaGetErrorString(cudaGetLastError());
    return v;
  }
  std::vector<uint8_t> download() const {
    auto all = download_all();
    return std::vector<uint8_t>(all.begin() + kGuard, all.begin() + kGuard + bytes_);
  }
  ::testing::AssertionResult guards_intact() const {
    const auto all = download_all();
    for (size_t i = 0; i < kGuard; ++i) {
      if (all[i] != kFill)
        return ::testing::AssertionFailure() << "guard before data hit at -" << kGuard - i;
      if (all[kGuard + bytes_ + i] != kFill) {
        return ::testing::AssertionFailure() << "guard after data hit at +" << i;
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// A device array of T, uploaded from a host vector (no guards).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(const std::vector<T>& host) : n_(host.size()) {
    if (cudaMalloc(&p_, std::max<size_t>(1, n_) * sizeof(T)) != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      ADD_FAILURE() << "cudaMalloc failed";
      return;
    }
    if (n_ > 0) cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceArray(DeviceArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* data() const { return static_cast<T*>(p_); }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess)
          << cudaGetErrorString(cudaGetLastError());
    }
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// A zeroed device-side error report.
class DeviceErrorBox {
 public:
  DeviceErrorBox() : arr_(std::vector<cuda::DeviceError>(1)) {}
  cuda::DeviceError* get() const { return arr_.data(); }
  cuda::DeviceError read() const { return arr_.download().at(0); }

 private:
  DeviceArray<cuda::DeviceError> arr_;
};

// Rows of `cols` floats `stride` apart in device memory, with canary floats
// in the guards and in the gaps between rows (a NaN payload no op writes).
class DeviceRows {
 public:
  static constexpr uint32_t kCanary = 0x7fc0dead;
  static constexpr size_t kGuardFloats = DeviceBytes::kGuard / 4;

  DeviceRows(int64_t rows, int64_t cols, int64_t stride)
      : rows_(rows),
        cols_(cols),
        stride_(stride),
        host_(kGuardFloats * 2 + static_cast<size_t>(std::max<int64_t>(rows * stride, 0))),
        mem_(host_.size() * 4 - 2 * DeviceBytes::kGuard) {
    for (auto& v : host_) std::memcpy(&v, &kCanary, 4);
    upload();
  }
  // Fills the rows (not the gaps) from v ([rows, cols] contiguous) and uploads
  // everything, canaries included.
  void fill(const std::vector<float>& v) {
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t c = 0; c < cols_; ++c) {
        host_[kGuardFloats + static_cast<size_t>(r * stride_ + c)] =
            v[static_cast<size_t>(r * cols_ + c)];
      }
    }
    upload();
  }
  // Uploads the rows and the canaries of the gaps (the guards before and
  // after are DeviceBytes' own).
  void upload() {
    if (mem_.size() > 0) mem_.upload(host_.data() + kGuardFloats, mem_.size());
  }
  float* data() const { return static_cast<float*>(mem_.data()); }
  int64_t stride() const { return stride_; }
  // Downloads and returns the rows, [rows, cols] contiguous.
  std::vector<float> rows() {
    download();
    std::vector<float> v(static_cast<size_t>(rows_ * cols_));
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t c = 0; c < cols_; ++c) {
        v[static_cast<size_t>(r * cols_ + c)] =
            host_[kGuardFloats + static_cast<size_t>(r * stride_ + c)];
      }
    }
    return v;
  }
  // Guards before/after untouched and every gap float still the canary.
  ::testing::AssertionResult canaries_intact() {
    if (auto g = mem_.guards_intact(); !g) return g;
    download();
    for (int64_t e = 0; e < rows_ * stride_; ++e) {
      if (e % stride_ < cols_) continue;
      uint32_t b;
      std::memcpy(&b, &host_[kGuardFloats + static_cast<size_t>(e)], 4);
      if (b != kCanary) {
        return ::testing::AssertionFailure()
               << "canary overwritten at element " << e << " (rows " << rows_ << " x " << cols_
               << ", stride " << stride_ << ")";
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  void download() {
    if (mem_.size() == 0) return;
    const auto b = mem_.download();
    std::memcpy(host_.data() + kGuardFloats, b.data(), b.size());
  }

  int64_t rows_, cols_, stride_;
  std::vector<float> host_;
  DeviceBytes mem_;
};

// Bit-identical floats, except that any NaN matches any NaN.
inline ::testing::AssertionResult same_bits(const std::vector<float>& out,
                                            const std::vector<float>& ref,
                                            const std::string& what) {
  if (out.size() != ref.size()) {
    return ::testing::AssertionFailure() << what << ": size " << out.size() << " vs " << ref.size();
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) && std::isnan(ref[i])) continue;
    if (bits_of(out[i]) != bits_of(ref[i])) {
      return ::testing::AssertionFailure()
             << what << ": element " << i << " is " << out[i] << " (0x" << std::hex
             << bits_of(out[i]) << "), want " << ref[i] << " (0x" << bits_of(ref[i]) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

inline std::vector<float> bytes_to_floats(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// f32, f16, bf16 and every quantized format (Strata's and the GGUF-only
// ones): every weight dtype the CUDA kernels read.
inline std::vector<DType> weight_types() {
  std::vector<DType> out = {DType::kF32, DType::kF16, DType::kBF16};
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    const DType t = static_cast<DType>(i);
    if (is_quantized(t)) out.push_back(t);
  }
  return out;
}

// n_rows rows of n values in dtype t, stride_bytes apart (>= row_bytes(t,
// n); the padding holds 0x5a), from random values in [lo, hi] (quantized
// with quant's reference quantizer). With specials, a few values are NaN,
// Inf and 70000 (beyond f16) so that special groups are covered too. The
// GGUF-only formats have no quantizer: random blocks with finite scales
// (random_gguf_row), whatever lo, hi and specials say.
inline std::vector<uint8_t> weight_rows(DType t, int64_t n_rows, int64_t n, size_t stride_bytes,
                                        uint32_t seed, bool specials = true, float lo = -2.0f,
                                        float hi = 2.0f) {
  std::vector<uint8_t> out(static_cast<size_t>(n_rows) * stride_bytes, 0x5a);
  auto x = random_floats(static_cast<size_t>(n_rows * n), lo, hi, seed);
  if (specials && x.size() > 40) {
    x[3] = NAN;
    x[37] = INFINITY;
    x[x.size() - 5] = 70000.0f;
  }
  encode_weights(t, x.data(), n_rows, n, stride_bytes, seed, reinterpret_cast<char*>(out.data()));
  return out;
}

}  // namespace strata::test
