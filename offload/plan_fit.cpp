// Whether the engine runs a plan (plan_fit.h).
#include "offload/plan_fit.h"

#include <algorithm>

#include "core/error.h"
#include "model/model.h"
#include "offload/block_budget.h"
#include "offload/engine_options.h"
#include "offload/weight_placement.h"

namespace strata {

PlanFit plan_fit(const Model& model, const EngineOptions& options, const DeviceCaps& caps,
                 uint64_t default_device_bytes) {
  PlanFit fit;
  try {
    const EngineOptions o = validated_options(options);
    o.placement.validate("placement");
    const Placement placement = o.placement.folded(caps.memory_is_host);
    check_dtypes(caps, o.compute_dtype, o.kv_dtype);
    check_placement(caps, placement, o.cpu_attention);
    const MemoryMode mode = memory_mode(caps, o.cpu_attention);
    PackOptions po;
    po.weight_dtype = o.weight_dtype;
    const WeightPlacement wp = place_weights(model.desc(), po, placement);
    const bool kv_disk = placement.disk(DataKind::kKv) > 1e-12;
    BudgetRequest br;
    br.gpu_mem = o.gpu_mem;
    br.cpu_mem = o.cpu_mem;
    br.disk_mem = o.disk_mem;
    br.default_device_bytes = default_device_bytes;
    br.offload_dir = o.offload_dir;
    br.need_dir = wp.any_on_disk() || kv_disk || o.weight_dtype.has_value();
    if (br.need_dir && o.offload_dir.empty()) {
      fail("this placement keeps data on disk but no offload directory was given");
    }
    fit.budget = tier_budgets_for(br, mode);
    fit.need = weight_tier_bytes(wp, mode);
    fit.kv_budget = o.kv_budget_bytes;
    if (o.plan_prompt_tokens > 0 && o.plan_new_tokens > 0) {
      const ModelConfig& c = model.config();
      KvGeometry g;
      g.n_layer = c.n_layer;
      g.n_kv_head = c.n_kv_head;
      g.head_dim = c.head_dim;
      g.dtype = o.kv_dtype;
      g.page_size = o.page_size;
      const BlockMemory m = block_memory(
          c, g, placement,
          BlockShape::full(o.gpu_batch_size, o.num_gpu_batches, o.plan_prompt_tokens,
                           o.plan_new_tokens));
      const BlockTiers t = block_tiers(m, mode);
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
