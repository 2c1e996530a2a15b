// Whether the offload engine runs a plan, and what it needs of each tier,
// asked without loading or allocating anything: the same checks and the same
// memory derivation the engine applies when it is made (the options, the
// device's rules of device_support.h, the weights as placed with their
// staging, and a full block of the planned lengths: block_budget.h and
// tier_budgets.h). The policy search asks it about every candidate, so the
// plan it returns is one the engine accepts.
#pragma once

#include <cstdint>
#include <string>

#include "generate/engine.h"
#include "kv/page_pool.h"
#include "offload/device_support.h"
#include "offload/memory_mode.h"
#include "offload/tier_budgets.h"
#include "offload/weight_placement.h"

namespace strata {

class Model;

struct ModelConfig;

// What an engine decides once from its (validated) options on a device: the
// placement as the device holds it, the memory mode, where each weight
// lives, and whether anything needs the offload directory. Error for what
// the device refuses and for data on disk without an offload directory. The
// engine is built from it; plan_fit asks it the same questions.
struct PlanLayout {
  Placement placement;  // folded for the device
  MemoryMode mode = MemoryMode::kHostMemory;
  PackOptions pack;
  WeightPlacement weights;
  bool kv_on_disk = false;
  bool need_dir = false;  // weights or KV pages on disk, or a requantized pack

  // The budgets these options ask for (the tiers' defaults applied by
  // tier_budgets_for).
  BudgetRequest budget_request(const EngineOptions& o, uint64_t default_device_bytes) const;
};
PlanLayout lay_out_plan(const Model& model, const EngineOptions& options, const DeviceCaps& caps);

// The KV cache's geometry for a model under these options.
KvGeometry kv_geometry_of(const ModelConfig& c, const EngineOptions& options);

struct PlanFit {
  std::string refusal;  // non-empty: the engine refuses the plan (the Error's text)
  TierBytes need;       // weights, their staging and a full block, per tier
  TierBytes budget;
  uint64_t kv_need = 0, kv_budget = 0;  // backed KV pages of the block, and the KV budget

  bool fits() const {
    return refusal.empty() && need.device <= budget.device && need.ram <= budget.ram &&
           need.disk <= budget.disk && kv_need <= kv_budget;
  }
};

// `options` as make_engine takes them (with plan_prompt_tokens and
// plan_new_tokens: without them only the weights are counted) on a device
// with `caps`; `default_device_bytes`: its default memory budget.
PlanFit plan_fit(const Model& model, const EngineOptions& options, const DeviceCaps& caps,
                 uint64_t default_device_bytes = 0);

}  // namespace strata
