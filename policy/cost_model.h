// The cost model: for a model shape, a hardware profile, a workload and a
// policy, the time of one layer step in prefill and in decode, and the bytes
// each tier holds. It follows FlexGen's model (experimental/cost_model.py of
// FlexGen), generalised to grouped-query attention, gated FFNs, compression,
// sparse attention, a choice of CPU attention, and a CPU compute device.
//
// Every quantity is an affine function of the six placement fractions
// (weights, KV cache, activations on gpu / cpu; disk holds the rest), so
// that the same numbers serve two callers: evaluate() plugs in a policy's
// fractions, and the linear program (placement_lp.h) optimises over them.
// The LP and the dry run therefore cannot disagree about a policy. One
// constant comes from the policy's own placement: the size of a KV read
// from disk (a sequence's disk pages of a layer), from its KV disk share
// (all pages when it has none there); the search solves again at the share
// the LP found (search.cpp).
//
// Vocabulary: L layers, s prompt tokens, n generated tokens, g = gpu batch
// size, k = number of gpu batches, B = g*k sequences per block. A step runs
// one layer for the whole block (zig-zag schedule: weights loaded once per
// layer, used by all k micro-batches). A step lasts at least each of its
// bounds, and a bound is a sum of terms, as in FlexGen:
//   prefill: max(cpu->gpu + disk->cpu, gpu->cpu + cpu->disk, compute)
//   decode:  cpu->gpu + max(gpu->cpu, disk->cpu, cpu->disk, compute)
// (disk reads relay through CPU memory on the host->device queue; in decode
// the host->device copies do not overlap the CPU's attention work.) Unlike
// FlexGen, one disk serves the reads and the writes: disk->cpu + cpu->disk
// is a bound of every step too (on a CPU device it replaces the two).
// A block takes L*prefill_layer + prefill_head + (n-1)*(L*decode_layer +
// decode_head), the head being the output projection of each step; with
// speculative decoding (n-1)/E steps of R rows per sequence, and with
// shared prompt prefixes a prefix step's L*prefix_layer + prefix_head
// before the prefill in a share of the blocks (Workload).
//
// Transfer terms: bytes over the link's bandwidth. Compute: GEMM at the
// device's prefill or decode rate with a roofline on reading the weights
// from device memory, attention at the device's rate, or at the CPU's rate
// (FlexGen's fitted small-batch correction included) for the KV held off the
// device when cpu_attention is set, which takes that KV off the
// host->device link. On a CPU device the compute terms can instead be the
// engine's own times for this model, measured on this machine
// (engine_compute.h): the profile's rates come from one GEMM and one
// attention shape in one dtype and miss the per-layer work of a small
// model. Compression shrinks weight and KV bytes. A sparse
// attention budget caps the tokens read and attended per decode step.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/placement.h"
#include "core/tier.h"
#include "policy/engine_compute.h"
#include "policy/hardware.h"
#include "policy/model_shape.h"
#include "policy/policy.h"

namespace strata {

struct Workload {
  int64_t prompt_len = 512;
  int64_t gen_len = 32;
  // Speculative decoding, per sequence and decode step: the rows computed
  // (1 + the draft tokens fed) and the tokens kept (1 + those accepted),
  // rows >= tokens >= 1; 1 and 1 without. A decode step then computes
  // rows x B tokens (matrix products, attention queries, the head's rows)
  // while the weights and the KV cache are read once, and a block takes
  // (n - 1) / tokens decode steps.
  double spec_rows = 1, spec_tokens = 1;
  // A draft model's seconds per decode step of a block (its passes run
  // between the engine's steps, so they add to each step); 0 without one.
  double draft_step_s = 0;
  // Shared prompt prefixes (kv/shared_prefix.h): per sequence, the prompt
  // tokens its prefill does not compute (whole pages of a prefix it shares
  // with others of its block); a block with shared prefixes first runs a
  // prefix step, one more pass over the layers that computes and stores
  // each distinct prefix once (prefix_step_tokens in all), in prefix_steps
  // of the blocks (0 to 1). The prefill then computes s - shared_tokens
  // tokens per sequence, attending over all s; prefill and decode load a
  // shared page once per micro-batch (taken as if each micro-batch's
  // sequences shared one prefix) from where it lives.
  double shared_tokens = 0;
  double prefix_step_tokens = 0;
  double prefix_steps = 0;
  // KV stored once: in every block, kv_shared_seqs sequences take their
  // first kv_shared_tokens (whole pages) of KV from another sequence of the
  // block (offload/block_budget.h), so the block holds that much less.
  int64_t kv_shared_seqs = 0;
  int64_t kv_shared_tokens = 0;
  // Bytes of an uncompressed KV element: the engine's KV dtype (f16, or f32
  // when it computes in f32 on a CPU). Policy::compress_kv replaces it.
  double kv_elem_bytes = 2;
  // Bytes of an activation element (hidden states held between layers, the
  // working buffers of a layer): FlexGen's f16 by default; the engine holds
  // them in f32 (offload/block_budget.h).
  double act_elem_bytes = 2;
};

// Memory budget of each tier, bytes.
struct Budgets {
  double gpu = 0;
  double cpu = 0;
  double disk = 0;
};
Budgets budgets_of(const HardwareProfile& hw);

inline constexpr int kNumTiers = 3;  // Tier and tier_name: core/tier.h

enum class Phase { kPrefill, kDecode };
inline constexpr int kNumPhases = 2;
std::string_view phase_name(Phase p);  // "prefill", "decode"

// The linear program's variables are the six shares of a Placement
// (core/placement.h), indexed by Share.
// constant + sum_i coef[i] * x.share[i]
struct Affine {
  double constant = 0;
  std::array<double, kNumShares> coef{};

  double operator()(const Placement& x) const;
  Affine& operator+=(const Affine& o);
  friend Affine operator+(Affine a, const Affine& b) { return a += b; }
  friend Affine operator*(double c, Affine a);
};
Affine affine_constant(double c);
// The share of a kind of data held on a tier (disk = 1 - gpu - cpu).
Affine share(DataKind kind, Tier tier);

// One link or compute term of a step, seconds.
struct CostTerm {
  // What the term keeps busy: the link it names, the compute device, or
  // the CPU's attention beside a device.
  enum class Kind { kLink, kCompute, kCpuAttention };
  std::string name;  // "cpu->gpu", "disk->cpu", "gemm", "attention (cpu)", ...
  Affine seconds;
  Kind kind = Kind::kLink;
  // The name of what it keeps busy, as the engine's report measures it: the
  // link ("disk->cpu"), "compute" or "cpu attention".
  std::string busy_name() const;
};
// The step lasts at least the sum of these terms.
struct CostBound {
  std::string name;  // "cpu->gpu + disk->cpu", "compute", ...
  std::vector<int> terms;
};
struct StepCost {
  std::vector<CostTerm> terms;
  std::vector<CostBound> bounds;

  Affine bound_seconds(size_t b) const;
  double seconds(const Placement& x) const;  // the largest bound
  size_t binding(const Placement& x) const;  // index of the largest bound
  // The bound's name without its terms that are zero at x ("compute" rather
  // than "cpu->gpu + compute" when nothing crosses cpu->gpu).
  std::string bound_label(size_t b, const Placement& x) const;
};

// Bytes one tier holds in one phase, by what they are. `buffers` are the
// double buffers of streamed weights, KV and activations, staging for disk
// relays, and the working memory of one micro-batch; beyond them a tier that
// stages weights holds the constant CostModel::staging_granule.
struct TierMemory {
  Affine weights, kv_cache, activations, buffers;
  Affine total() const { return weights + kv_cache + activations + buffers; }
};

// How the weights reach the compute device: all resident where it computes,
// streamed from RAM only (a device with memory of its own), or streamed with
// a share from disk. The placement LP solves each case on its own, since a
// tier's staging is a constant once anything streams through it.
enum class WeightPath : uint8_t { kResident, kFromRam, kFromDisk };

// Everything the model predicts for one choice of batch sizes, attention and
// compression, as affine functions of the fractions.
struct CostModel {
  ModelShape shape;
  HardwareProfile hw;
  Workload work;
  Policy batch;  // batch sizes, cpu_attention, compression; its fractions are not used
  StepCost prefill_layer, prefill_head, decode_layer, decode_head;
  // The prefix step of a block with shared prompt prefixes (no terms
  // without: Workload::prefix_steps == 0).
  StepCost prefix_layer, prefix_head;
  std::array<std::array<TierMemory, kNumPhases>, kNumTiers> memory;  // [tier][phase]
  // Shares the device fixes: with a CPU device the gpu tier is RAM and the
  // gpu fractions are 0 (RAM-resident data counts as cpu).
  PlacementPins forced;
  // Staging buffers hold whole tensors (the engine cuts a unit's shares at
  // tensor boundaries, and the embeddings and the head are one tensor each),
  // so a tier that stages weights holds these bytes beyond the
  // share-proportional part of its buffers: the device tier when any weights
  // are off it, the host tier of a separate-memory device when any are on
  // disk.
  std::array<double, kNumTiers> staging_granule{};
  // The compute terms are the engine's measured times (term "layer" for a
  // layer at short context, "attention" beyond it) rather than rates.
  bool compute_measured = false;

  // The path at x; the granule tier t holds on a path.
  WeightPath weight_path(const Placement& x) const;
  double granule(int tier, WeightPath path) const;
  // Bytes of tier t in phase ph at x, its granule included.
  double bytes(int tier, int phase, const Placement& x) const;

  double prefill_seconds(const Placement& x) const;  // one block
  double decode_seconds(const Placement& x) const;
  // Seconds each link ("disk->cpu", ...), the device's compute ("compute":
  // the layers' products and attention, the heads) and CPU attention beside
  // a device ("cpu attention") are busy in one block at x, summed over every
  // step (the prefix steps, the prefill, the decode steps). What the
  // engine's report measures as a link's and a queue's busy time.
  std::map<std::string, double> busy_seconds(const Placement& x) const;
  double generated_tokens() const;  // B * n per block
};

// Checks the inputs (Error naming the bad value) and builds the model. The
// policy's fractions are ignored but for its KV disk share (the size of a KV
// read from disk: kv_disk_share_assumed); everything else in it is used.
// With `compute` (the engine's times measured on this machine for this
// model and its dtypes, engine_compute.h) a CPU device's compute terms are
// those times; a device with memory of its own keeps the profile's rates.
CostModel build_cost_model(const ModelShape& shape, const HardwareProfile& hw, const Workload& work,
                           const Policy& policy, const EngineCompute* compute = nullptr);

// The share of a sequence's KV pages on disk that build_cost_model prices
// a KV disk read at: the placement's share, or all pages when it has none
// on disk (the search solves again at the share the LP found).
double kv_disk_share_assumed(const Placement& placement);

// The policy as the device runs it: with a CPU device, gpu fractions fold into
// cpu and cpu_attention is off (attention runs on the device, the CPU).
Policy normalize_policy(const Policy& p, const HardwareProfile& hw);

struct TierUse {
  double budget = 0;
  double prefill = 0, decode = 0, peak = 0;
  // The parts of the peak phase.
  double weights = 0, kv_cache = 0, activations = 0, buffers = 0;
  bool used = true;  // false for the gpu tier of a CPU device
  bool over() const { return used && peak > budget * (1 + 1e-9) + 1; }
};

struct Prediction {
  int64_t block_size = 0;
  double prefill_s = 0, decode_s = 0, total_s = 0;  // one block
  double prefill_tokens_per_s = 0;                  // B*s / prefill_s
  double decode_tokens_per_s = 0;                   // B*(n-1) / decode_s (0 when n == 1)
  double total_tokens_per_s = 0;                    // B*n / total_s, the FlexGen metric
  double prefill_layer_s = 0, decode_layer_s = 0;   // one layer step
  double prefill_head_s = 0, decode_head_s = 0;
  std::vector<std::pair<std::string, double>> prefill_terms, decode_terms;  // layer step, seconds
  std::map<std::string, double> block_busy_s;  // CostModel::busy_seconds
  std::string bound_prefill, bound_decode;  // binding bound of the layer step (bound_label)
  Phase bound_phase = Phase::kPrefill;      // the phase that takes longer
  std::array<TierUse, kNumTiers> memory;
  bool fits = true;
};

// Predicts a policy (normalised for the device first). Budgets only mark tiers
// over budget; the prediction is made either way.
Prediction evaluate(const CostModel& model, const Policy& policy, const Budgets& budgets);
Prediction predict(const ModelShape& shape, const HardwareProfile& hw, const Workload& work,
                   const Policy& policy, const Budgets& budgets,
                   const EngineCompute* compute = nullptr);

// "needs 16.6G of GPU memory, --gpu-mem is 15G" for every tier over budget,
// joined with "; "; empty when the policy fits.
std::string over_budget_message(const Prediction& p);

}  // namespace strata
