// Stopping rules (stop.h).
#include "generate/stop.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kNone:
      break;
  }
  return "";
}

StopChecker::StopChecker(const Tokenizer& tokenizer, std::vector<int32_t> eos_ids,
                         std::vector<std::string> stops, int32_t max_new_tokens)
    : decoder_(tokenizer, /*skip_special=*/true),
      eos_ids_(std::move(eos_ids)),
      stops_(std::move(stops)),
      max_new_tokens_(max_new_tokens) {
  STRATA_ASSERT(max_new_tokens_ >= 1);
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

bool StopChecker::find_stop(size_t new_from) {
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    // A match must end inside the new bytes, so it starts at most
    // s.size() - 1 bytes before them; older text was already searched.
    const size_t start = new_from >= s.size() - 1 ? new_from - (s.size() - 1) : 0;
    const size_t pos = text_.find(s, start);
    if (pos != std::string::npos) best = std::min(best, pos);
  }
  if (best == std::string::npos) return false;
  text_.resize(best);
  return true;
}

FinishReason StopChecker::push(int32_t token) {
  STRATA_ASSERT(reason_ == FinishReason::kNone);
  ids_.push_back(token);
  if (std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) {
    text_ += decoder_.finish();
    find_stop(0);
    reason_ = FinishReason::kStop;
    return reason_;
  }
  const size_t old_size = text_.size();
  text_ += decoder_.push(token);
  if (!stops_.empty() && text_.size() > old_size && find_stop(old_size)) {
    reason_ = FinishReason::kStop;
    return reason_;
  }
  if (static_cast<int32_t>(ids_.size()) >= max_new_tokens_) {
    // Flush a held-back partial character; it may still complete a stop string.
    const size_t before_flush = text_.size();
    text_ += decoder_.finish();
    reason_ = (text_.size() > before_flush && find_stop(before_flush)) ? FinishReason::kStop
                                                                       : FinishReason::kLength;
    return reason_;
  }
  return FinishReason::kNone;
}

}  // namespace strata
