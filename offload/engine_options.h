// EngineOptions (generate/engine.h) as the offload engine runs them: the
// checks that need no model and no device (dtypes, batch and page sizes,
// threads; the device by name, before it is opened) and the defaults that
// go with them.
#pragma once

#include <cstdint>

#include "generate/engine.h"

namespace strata {

// The most draft tokens a decode step verifies per sequence
// (EngineOptions::max_draft_tokens).
inline constexpr int64_t kMaxDraftTokens = 32;

// The options checked, with the KV budget's default; Error naming the bad
// setting.
EngineOptions validated_options(const EngineOptions& o);

// The KV dtype that goes with a compute dtype: f32 for f32 compute; f16 for
// bf16 compute (same bytes as bf16 but 3 more mantissa bits, so the cache
// adds 2^-11 relative error instead of 2^-9, well below the bf16 rounding
// of the matmul operands; K and V of the supported families stay far
// inside f16's range of 65504).
DType default_kv_dtype(DType compute_dtype);

// The KV budget used when EngineOptions::kv_budget_bytes is 0: half of the
// RAM available now (MemAvailable), at least 256 MiB. Storage is taken from
// it only as sequences grow.
uint64_t default_kv_budget_bytes();

}  // namespace strata
