// Checking EngineOptions and their defaults (engine_options.h).
#include "offload/engine_options.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "offload/device_support.h"
#include "offload/tier_budgets.h"

namespace strata {

DType default_kv_dtype(DType compute_dtype) {
  return compute_dtype == DType::kF32 ? DType::kF32 : DType::kF16;
}

uint64_t default_kv_budget_bytes() {
  constexpr uint64_t kMin = uint64_t{256} << 20;
  const uint64_t avail = available_ram_bytes();
  if (avail > 0) return std::max(kMin, avail / 2);
  spdlog::warn("engine: /proc/meminfo has no MemAvailable; the KV budget defaults to {}",
               format_bytes(static_cast<double>(kMin)));
  return kMin;
}

EngineOptions validated_options(const EngineOptions& o) {
  if (o.compute_dtype != DType::kF32 && o.compute_dtype != DType::kBF16 &&
      o.compute_dtype != DType::kI8) {
    fail("compute dtype {} is not supported; use f32, bf16 or int8", dtype_name(o.compute_dtype));
  }
  if (o.kv_dtype != DType::kF32 && o.kv_dtype != DType::kF16 && o.kv_dtype != DType::kBF16 &&
      !is_quantized(o.kv_dtype)) {
    fail("KV cache dtype {} is not supported; use f32, f16, bf16 or a q4/q8 format",
         dtype_name(o.kv_dtype));
  }
  if (o.weight_dtype && !is_quantized(*o.weight_dtype)) {
    fail("weight compression {} is not a q4/q8 format", dtype_name(*o.weight_dtype));
  }
  if (o.weight_dtype && o.offload_dir.empty()) {
    fail(
        "weight compression {} needs a directory for the requantized weight pack; pass "
        "--offload-dir DIR",
        dtype_name(*o.weight_dtype));
  }
  if (o.gpu_batch_size < 1 || o.gpu_batch_size > kMaxBatchSize) {
    fail("batch size {} is not allowed; use 1 to {}", o.gpu_batch_size, kMaxBatchSize);
  }
  if (o.num_gpu_batches < 1 || o.num_gpu_batches > (1 << 20)) {
    fail("number of batches {} is not allowed; use 1 or more", o.num_gpu_batches);
  }
  if (o.page_size < 1 || o.page_size > 4096) {
    fail("KV page size {} is not allowed; use 1 to 4096 tokens", o.page_size);
  }
  if (o.threads < 0) fail("thread count {} is not allowed; use 0 (all cores) or more", o.threads);
  if (o.sparse_budget < 0) {
    fail("--sparse-budget {}: must not be negative (0: dense)", o.sparse_budget);
  }
  if (o.max_draft_tokens < 0 || o.max_draft_tokens > kMaxDraftTokens) {
    fail("--speculate-tokens {}: use 1 to {} draft tokens per step", o.max_draft_tokens,
         kMaxDraftTokens);
  }
  if (o.max_draft_tokens > 0 && is_quantized(o.kv_dtype)) {
    fail(
        "--speculate needs a KV cache of f32, f16 or bf16, not {}: the keys of a quantized page "
        "share its scales, which rejected draft tokens would change; use --compress-kv none or f16",
        dtype_name(o.kv_dtype));
  }
  const PlanSharing& ps = o.plan_sharing;
  if (ps.seqs != 0 || ps.pages != 0) {
    const int64_t block = o.gpu_batch_size * o.num_gpu_batches;
    if (!o.prefix_sharing || ps.seqs < 0 || ps.seqs >= block || ps.pages < 0 ||
        ps.pages * o.page_size >= std::max<int64_t>(1, o.plan_prompt_tokens)) {
      fail(
          "planned prefix sharing of {} pages by {} sequences does not fit a block of {} "
          "sequences of {} prompt tokens{}",
          ps.pages, ps.seqs, block, o.plan_prompt_tokens,
          o.prefix_sharing ? "" : " (prefix sharing is off)");
    }
  }
  check_dtypes(device_caps(o.device), o.compute_dtype, o.kv_dtype);
  check_sparse(device_caps(o.device), o.sparse_budget, o.page_size);
  EngineOptions v = o;
  if (v.kv_budget_bytes == 0) v.kv_budget_bytes = default_kv_budget_bytes();
  return v;
}

}  // namespace strata
