// Prompt lookup (ngram_draft.h).
#include "generate/ngram_draft.h"

#include <algorithm>

namespace strata {

std::vector<int32_t> ngram_draft(std::span<const int32_t> context, int64_t k) {
  const auto len = static_cast<int64_t>(context.size());
  if (k <= 0) return {};
  for (int64_t n = std::min(kNgramMax, len - 1); n >= kNgramMin; --n) {
    const std::span<const int32_t> suffix = context.subspan(static_cast<size_t>(len - n));
    // The latest start i < len - n whose n tokens equal the suffix.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(len, from + k);
      return {context.begin() + from, context.begin() + to};
    }
  }
  return {};
}

void NgramDrafter::propose(std::span<const Request> requests, std::span<std::vector<int32_t>> out) {
  for (size_t i = 0; i < requests.size(); ++i)
    out[i] = ngram_draft(requests[i].context, requests[i].k);
}

}  // namespace strata
