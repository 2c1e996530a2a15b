// Speculative decoding in the cost model's terms (Workload::spec_rows,
// spec_tokens): what drafts of k tokens cost and keep per sequence and
// decode step when each draft token is accepted with the same chance p,
// given the ones before it were (a step keeps the drafts up to the first
// rejection, then the target's own token). The chance comes from the share
// of draft tokens a run accepted (its report: accepted / drafted).
#pragma once

#include <cstdint>

namespace strata {

struct DraftRates {
  double rows = 1;    // tokens computed: 1 + k
  double tokens = 1;  // tokens kept, expected: 1 + p + p^2 + ... + p^k
};
DraftRates draft_rates(double p, int64_t k);

// The chance p for which drafts of k tokens accept the share `accepted`
// of their tokens: (p + p^2 + ... + p^k) / k = accepted. Error unless
// 0 < accepted <= 1 and k >= 1.
double draft_token_acceptance(double accepted, int64_t k);

}  // namespace strata
