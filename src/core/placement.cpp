// Placement (placement.h): shares, folding, validation, --percent.
#include "core/placement.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

namespace {

constexpr double kResidue = 1e-12;
constexpr const char* kPercentNames[kNumShares] = {"W_GPU",  "W_CPU",   "KV_GPU",
                                                    "KV_CPU", "ACT_GPU", "ACT_CPU"};
// The key of each kind in policy YAML and in validation messages.
constexpr const char* kKindKeys[kNumDataKinds] = {"weights", "kv_cache", "activations"};

}  // namespace

std::string_view data_kind_name(DataKind k) {
  switch (k) {
    case DataKind::kWeights:
      return "weights";
    case DataKind::kKv:
      return "KV cache";
    case DataKind::kAct:
      return "activations";
  }
  return "?";
}

std::string_view share_name(Share s) {
  static constexpr const char* kNames[kNumShares] = {"w_gpu",  "w_cpu",   "kv_gpu",
                                                     "kv_cpu", "act_gpu", "act_cpu"};
  return kNames[static_cast<size_t>(s)];
}

Share share_of(DataKind kind, Tier tier) {
  STRATA_ASSERT(tier != Tier::kDisk);
  return static_cast<Share>(2 * static_cast<int>(kind) + (tier == Tier::kCpu ? 1 : 0));
}

double Placement::on(DataKind kind, Tier tier) const {
  if (tier != Tier::kDisk) return (*this)[share_of(kind, tier)];
  const double d = 1 - (*this)[share_of(kind, Tier::kGpu)] - (*this)[share_of(kind, Tier::kCpu)];
  return d < kResidue ? 0.0 : d;  // rounding residue of gpu + cpu = 1 is no data
}

void Placement::set(DataKind kind, double gpu, double cpu) {
  (*this)[share_of(kind, Tier::kGpu)] = gpu;
  (*this)[share_of(kind, Tier::kCpu)] = cpu;
}

Placement Placement::folded(bool unified) const {
  if (!unified) return *this;
  Placement u;
  for (int k = 0; k < kNumDataKinds; ++k) {
    const auto kind = static_cast<DataKind>(k);
    u.set(kind, 0, std::min(1.0, on(kind, Tier::kGpu) + on(kind, Tier::kCpu)));
  }
  return u;
}

void Placement::validate(std::string_view source) const {
  for (int k = 0; k < kNumDataKinds; ++k) {
    const auto kind = static_cast<DataKind>(k);
    const double g = on(kind, Tier::kGpu), c = on(kind, Tier::kCpu);
    if (!(g >= 0 && g <= 1) || !(c >= 0 && c <= 1) || g + c > 1 + kShareSlack) {
      fail("{}: {}: gpu {} and cpu {} must be fractions from 0 to 1 that add up to at most 1",
           source, kKindKeys[k], g, c);
    }
  }
}

Placement Placement::from_percent(std::span<const double> percent, std::string_view flag) {
  if (percent.size() != kNumShares) {
    fail("{}: needs {} numbers ({}), got {}", flag, kNumShares,
         fmt::join(kPercentNames, " "), percent.size());
  }
  Placement p;
  for (size_t i = 0; i < kNumShares; ++i) {
    if (!(percent[i] >= 0 && percent[i] <= 100)) {
      fail("{}: {} {} is not a percentage from 0 to 100", flag, kPercentNames[i], percent[i]);
    }
    p.share[i] = percent[i] / 100;
  }
  for (size_t k = 0; k < kNumDataKinds; ++k) {
    if (p.share[2 * k] + p.share[2 * k + 1] > 1 + kShareSlack) {
      fail("{}: {} {} + {} {} is more than 100; disk holds the rest", flag, kPercentNames[2 * k],
           percent[2 * k], kPercentNames[2 * k + 1], percent[2 * k + 1]);
    }
  }
  return p;
}

std::array<double, kNumShares> Placement::to_percent() const {
  std::array<double, kNumShares> out{};
  for (size_t i = 0; i < kNumShares; ++i) out[i] = 100 * share[i];
  return out;
}

std::string Placement::describe() const {
  auto pct = [](double x) { return fmt::format("{:.4g}", 100 * std::max(0.0, x)); };
  auto kind = [&](DataKind k) {
    return fmt::format("{}/{}/{}%", pct(on(k, Tier::kGpu)), pct(on(k, Tier::kCpu)),
                       pct(on(k, Tier::kDisk)));
  };
  return fmt::format("weights {}, KV {}, activations {} (gpu/cpu/disk)", kind(DataKind::kWeights),
                     kind(DataKind::kKv), kind(DataKind::kAct));
}

}  // namespace strata
