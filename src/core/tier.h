// The three tiers data lives on (docs/DESIGN.md §2): gpu (memory of the compute
// device), cpu (host RAM), disk (files in the offload directory). One
// definition for every module that names them: the cost model (policy/)
// and the pools and transfers (offload/) talk about the same tiers.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata {

enum class Tier : uint8_t { kGpu, kCpu, kDisk };

// "gpu", "cpu", "disk"
inline std::string_view tier_name(Tier t) {
  switch (t) {
    case Tier::kGpu:
      return "gpu";
    case Tier::kCpu:
      return "cpu";
    case Tier::kDisk:
      return "disk";
  }
  return "?";
}

}  // namespace strata
