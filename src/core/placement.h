// Placement: the share of the weights, the KV cache and the activations that
// lives on each tier (core/tier.h), FlexGen's six numbers. The one type the
// policy, the cost model and its linear program, the engine options and the
// report all use, with one default and one converter to and from --percent.
//
// Each kind of data has a gpu and a cpu share; the disk holds the rest
// (1 - gpu - cpu). The gpu tier is the compute device's memory: on the CPU
// device that is RAM, so the gpu share folds into cpu there (folded()).
//
// Default: everything on the gpu tier, i.e. where the device computes (the
// gpu tier of a GPU, RAM on the CPU).
//
// Invariant (validate): every share is in [0, 1] and a kind's gpu + cpu is at
// most 1 (within rounding).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/tier.h"

namespace strata {

// The kinds of data a placement places.
enum class DataKind : uint8_t { kWeights, kKv, kAct };
inline constexpr int kNumDataKinds = 3;
std::string_view data_kind_name(DataKind k);  // "weights", "KV cache", "activations"

// The six shares in FlexGen's order (--percent W_GPU W_CPU KV_GPU KV_CPU
// ACT_GPU ACT_CPU); the linear program's variables are indexed the same way.
enum class Share : uint8_t { kWGpu, kWCpu, kKvGpu, kKvCpu, kActGpu, kActCpu };
inline constexpr int kNumShares = 6;
std::string_view share_name(Share s);  // "w_gpu", "w_cpu", ...
// The share of `kind` on `tier` (gpu or cpu; disk has none of its own).
Share share_of(DataKind kind, Tier tier);

// Slack allowed on gpu + cpu <= 1 (shares that come out of an LP or a sum of
// percentages are off by rounding).
inline constexpr double kShareSlack = 1e-9;

struct Placement {
  std::array<double, kNumShares> share{1, 0, 1, 0, 1, 0};

  double operator[](Share s) const { return share[static_cast<size_t>(s)]; }
  double& operator[](Share s) { return share[static_cast<size_t>(s)]; }
  // The share of `kind` on `tier`; disk is 1 - gpu - cpu, 0 when that is
  // rounding residue (below 1e-12) or negative.
  double on(DataKind kind, Tier tier) const;
  double disk(DataKind kind) const { return on(kind, Tier::kDisk); }
  void set(DataKind kind, double gpu, double cpu);

  // As a device runs it: where the device computes on host RAM (`unified`),
  // the gpu shares fold into cpu.
  Placement folded(bool unified) const;
  // Throws Error "<source>: <kind>: gpu G and cpu C must be fractions from 0
  // to 1 that add up to at most 1" for the first kind that breaks the invariant.
  void validate(std::string_view source) const;

  // From FlexGen's six percentages (0..100); Error naming `flag`, the
  // share and the value when one is out of range or a kind's sum is over 100.
  static Placement from_percent(std::span<const double> percent,
                                std::string_view flag = "--percent");
  std::array<double, kNumShares> to_percent() const;

  // "weights 0/50/50%, KV 0/100/0%, activations 0/100/0% (gpu/cpu/disk)"
  std::string describe() const;

  bool operator==(const Placement&) const = default;
};

// Shares pinned by a caller (flags, or what a device can run); nullopt: free.
using PlacementPins = std::array<std::optional<double>, kNumShares>;

}  // namespace strata
