// Speculative decoding in the cost model's terms (speculation.h).
#include "policy/speculation.h"

#include <cmath>

#include "core/error.h"

namespace strata {

DraftRates draft_rates(double p, int64_t k) {
  DraftRates r;
  double pi = 1;
  for (int64_t i = 0; i < k; ++i) {
    pi *= p;
    r.tokens += pi;
  }
  r.rows = 1 + static_cast<double>(k);
  return r;
}

double draft_token_acceptance(double accepted, int64_t k) {
  if (!(accepted > 0 && accepted <= 1) || k < 1) {
    fail(
        "speculation: an accepted share of {} with drafts of {} tokens; need a share in (0, 1] "
        "and drafts of at least one token",
        accepted, k);
  }
  // The share grows with p from 0 (p = 0) to 1 (p = 1): bisection.
  double lo = 0, hi = 1;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    const double share = (draft_rates(mid, k).tokens - 1) / static_cast<double>(k);
    (share < accepted ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace strata
