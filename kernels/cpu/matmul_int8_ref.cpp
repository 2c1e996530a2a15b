// The int8 matmul's definition in scalar code (matmul_int8.h): the
// activation quantizer and the product with exact integer group sums, summed
// over groups in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/int8_weight_format.h"
#include "kernels/cpu/matmul_int8.h"

namespace strata::cpu {

void quantize_row_int8_ref(const float* x, int64_t k, int64_t group, int8_t* qx, float* dx,
                           int32_t* sum) {
  for (int64_t g0 = 0; g0 < k; g0 += group) {
    float amax = 0.0f;
    bool bad = false;
    for (int64_t e = 0; e < group; ++e) {
      const float a = std::fabs(x[g0 + e]);
      bad = bad || !std::isfinite(a);
      amax = std::max(amax, a);
    }
    int32_t s = 0;
    if (bad || amax < kInt8TinyGroup) {
      dx[g0 / group] = bad ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      for (int64_t e = 0; e < group; ++e) qx[g0 + e] = 0;
    } else {
      dx[g0 / group] = amax / 127.0f;
      const float id = 127.0f / amax;
      for (int64_t e = 0; e < group; ++e) {
        const float p = x[g0 + e] * id;
        const float r = std::nearbyint(p);
        const int32_t q = static_cast<int32_t>(std::clamp(r, -127.0f, 127.0f));
        qx[g0 + e] = static_cast<int8_t>(q);
        s += q;
      }
    }
    sum[g0 / group] = s;
  }
}

void matmul_int8_ref(float* y, int64_t y_stride, const float* x, int64_t x_stride, const void* w,
                     DType w_dtype, size_t w_row_bytes, const float* bias, int64_t m, int64_t n,
                     int64_t k) {
  const WeightFormat f = weight_format(w_dtype);
  const int64_t g_sz = f.group;
  const int64_t ng = k / g_sz;
  std::vector<int8_t> qx(static_cast<size_t>(k));
  std::vector<float> dx(static_cast<size_t>(ng));
  std::vector<int32_t> t(static_cast<size_t>(ng));
  // Stored integers c and scales of every weight row, from the block bytes.
  std::vector<int32_t> c(static_cast<size_t>(n * k));
  std::vector<double> dw(static_cast<size_t>(n * ng)), mw(static_cast<size_t>(n * ng));
  std::vector<uint8_t> u(static_cast<size_t>(f.block_elems));
  std::vector<float> bd(static_cast<size_t>(f.groups_per_block())), bm(bd.size());
  for (int64_t j = 0; j < n; ++j) {
    const auto* row = static_cast<const uint8_t*>(w) + static_cast<size_t>(j) * w_row_bytes;
    for (int64_t b = 0; b < k / f.block_elems; ++b) {
      unpack_block(f, row + b * f.block_bytes, u.data(), bd.data(), bm.data());
      for (int64_t e = 0; e < f.block_elems; ++e) {
        c[static_cast<size_t>(j * k + b * f.block_elems + e)] =
            static_cast<int32_t>(u[static_cast<size_t>(e)]) - f.bias;
      }
      for (int64_t g = 0; g < f.groups_per_block(); ++g) {
        const size_t jg = static_cast<size_t>(j * ng + b * f.groups_per_block() + g);
        dw[jg] = bd[static_cast<size_t>(g)];
        mw[jg] = bm[static_cast<size_t>(g)];
      }
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    quantize_row_int8_ref(x + i * x_stride, k, g_sz, qx.data(), dx.data(), t.data());
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias != nullptr ? bias[j] : 0.0;
      for (int64_t g = 0; g < ng; ++g) {
        int64_t s = 0;
        for (int64_t e = 0; e < g_sz; ++e) {
          s += static_cast<int64_t>(c[static_cast<size_t>(j * k + g * g_sz + e)]) *
               qx[static_cast<size_t>(g * g_sz + e)];
        }
        const size_t jg = static_cast<size_t>(j * ng + g);
        acc += static_cast<double>(dx[static_cast<size_t>(g)]) *
               (dw[jg] * static_cast<double>(s) + mw[jg] * t[static_cast<size_t>(g)]);
      }
      y[i * y_stride + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace strata::cpu
