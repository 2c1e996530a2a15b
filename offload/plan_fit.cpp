// Whether the engine runs a plan (plan_fit.h).
#include "offload/plan_fit.h"

#include <algorithm>

#include "core/error.h"
#include "model/model.h"
#include "offload/block_budget.h"
#include "offload/engine_options.h"
#include "offload/weight_placement.h"

namespace strata {

PlanLayout lay_out_plan(const Model& model, const EngineOptions& o, const DeviceCaps& caps) {
  PlanLayout l;
  o.placement.validate("placement");
  l.placement = o.placement.folded(caps.memory_is_host);
  check_dtypes(caps, o.compute_dtype, o.kv_dtype);
  check_sparse(caps, o.sparse_budget, o.page_size);
  check_placement(caps, l.placement, o.cpu_attention);
  l.mode = memory_mode(caps, o.cpu_attention);
  l.pack.weight_dtype = o.weight_dtype;
  l.weights = place_weights(model.desc(), l.pack, l.placement);
  l.kv_on_disk = l.placement.disk(DataKind::kKv) > 1e-12;
  l.need_dir = l.weights.any_on_disk() || l.kv_on_disk || o.weight_dtype.has_value();
  if (l.need_dir && o.offload_dir.empty()) {
    fail(
        "this placement keeps {} on disk but no offload directory was given; pass --offload-dir "
        "DIR",
        l.weights.any_on_disk() ? "weights"
        : l.kv_on_disk          ? "KV cache pages"
                                : "the weight pack");
  }
  return l;
}

BudgetRequest PlanLayout::budget_request(const EngineOptions& o,
                                         uint64_t default_device_bytes) const {
  BudgetRequest r;
  r.gpu_mem = o.gpu_mem;
  r.cpu_mem = o.cpu_mem;
  r.disk_mem = o.disk_mem;
  r.default_device_bytes = default_device_bytes;
  r.offload_dir = o.offload_dir;
  r.need_dir = need_dir;
  return r;
}

KvGeometry kv_geometry_of(const ModelConfig& c, const EngineOptions& o) {
  KvGeometry g;
  g.n_layer = c.n_layer;
  g.n_kv_head = c.n_kv_head;
  g.head_dim = c.head_dim;
  g.dtype = o.kv_dtype;
  g.page_size = o.page_size;
  return g;
}

PlanFit plan_fit(const Model& model, const EngineOptions& options, const DeviceCaps& caps,
                 uint64_t default_device_bytes) {
  PlanFit fit;
  try {
    const EngineOptions o = validated_options(options);
    const PlanLayout l = lay_out_plan(model, o, caps);
    fit.budget = tier_budgets_for(l.budget_request(o, default_device_bytes), l.mode);
    fit.need = weight_tier_bytes(l.weights, l.mode);
    fit.need.ram += o.draft_memory.fixed;
    fit.kv_budget = o.kv_budget_bytes;
    if (o.plan_prompt_tokens > 0 && o.plan_new_tokens > 0) {
      const BlockMemory m =
          block_memory(model.config(), kv_geometry_of(model.config(), o), l.placement,
                       BlockShape::full(o.gpu_batch_size, o.num_gpu_batches, o.plan_prompt_tokens,
                                        o.plan_new_tokens, 1 + o.max_draft_tokens, o.plan_sharing),
                       o.draft_memory);
      const BlockTiers t = block_tiers(m, l.mode);
      fit.need.device += t.device;
      fit.need.ram += t.ram;
      fit.need.disk += t.disk;
      fit.kv_need = m.kv_pages;
    }
  } catch (const Error& e) {
    fit.refusal = e.what();
  }
  return fit;
}

}  // namespace strata
