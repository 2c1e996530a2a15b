// Weight matrices multiplied by the same x in one call (a layer's q, k and v;
// its gate and up): part p's products go to the columns [col_p, col_p + n_p)
// of y, col_p the sum of the earlier parts' n. The decode kernels split the
// rows of all parts over one team of threads, so a small matrix (k and v of a
// grouped-query layer) neither runs on one thread nor opens a parallel region
// of its own; every row gets the same arithmetic as in a call of its own.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace strata::cpu {

struct WeightPart {
  const void* w = nullptr;  // [n, k] in dtype, rows row_bytes apart
  DType dtype = DType::kF32;
  size_t row_bytes = 0;
  const float* bias = nullptr;  // [n] or null
  int64_t n = 0;
};

using WeightParts = std::span<const WeightPart>;

// Parts one fused call takes (q, k, v).
inline constexpr size_t kMaxWeightParts = 3;

inline int64_t total_rows(WeightParts parts) {
  int64_t n = 0;
  for (const WeightPart& p : parts) n += p.n;
  return n;
}

// Units of `unit` rows when each part is cut on its own (its last unit may
// be short).
inline int64_t count_units(WeightParts parts, int64_t unit) {
  int64_t u = 0;
  for (const WeightPart& p : parts) u += (p.n + unit - 1) / unit;
  return u;
}

// Calls f(part index, first column of the part in y, j0, j1) for the rows
// [j0, j1) of each part that units [u0, u1) cover, parts in order.
template <typename F>
void for_unit_rows(WeightParts parts, int64_t unit, int64_t u0, int64_t u1, F&& f) {
  int64_t first = 0, col = 0;  // the part's first unit and first column
  for (size_t i = 0; i < parts.size() && first < u1; ++i) {
    const int64_t n = parts[i].n;
    const int64_t units = (n + unit - 1) / unit;
    const int64_t a = std::max(u0, first) - first, b = std::min(u1, first + units) - first;
    if (b > a) f(i, col, a * unit, std::min(n, b * unit));
    first += units;
    col += n;
  }
}

}  // namespace strata::cpu
