// Every-element comparison against a reference with a per-element bound
// derived from the dtype (STYLE: never a pass rate): the unit roundoffs the
// bounds are written in, and the check that reports the first failures with
// index, values and bound.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace strata::test {

inline constexpr double kU32 = 0x1p-24;    // unit roundoff of f32 (round to nearest)
inline constexpr double kTiny = 0x1p-100;  // absolute slack for results flushed to or near zero

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
