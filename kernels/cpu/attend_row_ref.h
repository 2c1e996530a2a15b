// The reference definition of attention for one query row, shared by the
// reference paged attention over stored pages (attention_ref.cpp) and over
// quantized ones (attention_quant.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace strata::cpu {

// One query row attending over keys 0..p in double, as the references
// define attention: the exact softmax of scale q.k_j, then the weighted sum
// of the values. key(j, d) and value(j, d) are the stored (or dequantized)
// elements.
template <class Key, class Value>
void attend_row_ref(float* o, const float* qr, int64_t hd, int64_t p, double scale, Key key,
                    Value value) {
  std::vector<double> w(static_cast<size_t>(p + 1));
  double mx = -INFINITY;
  for (int64_t j = 0; j <= p; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qr[d]) * key(j, d);
    w[static_cast<size_t>(j)] = dot * scale;
    mx = std::max(mx, w[static_cast<size_t>(j)]);
  }
  double sum = 0.0;
  for (double& x : w) sum += (x = std::exp(x - mx));
  for (int64_t d = 0; d < hd; ++d) {
    double acc = 0.0;
    for (int64_t j = 0; j <= p; ++j) acc += w[static_cast<size_t>(j)] * value(j, d);
    o[d] = static_cast<float>(acc / sum);
  }
}

}  // namespace strata::cpu
