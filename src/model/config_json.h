// A model config as JSON: every field, with the names config.h gives the
// enums. The weight pack's manifest keeps it to tell a pack from another
// model's (offload/pack.h); `strata inspect --json` shows it.
#pragma once

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace strata {

nlohmann::json config_to_json(const ModelConfig& c);

}  // namespace strata
