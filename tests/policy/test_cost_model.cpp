// The cost model against formulas written out by hand: link and compute
// terms of prefill and decode steps, memory per tier, compression, CPU
// attention, sparse attention, the CPU compute device, and agreement with
// FlexGen's own formulas (experimental/cost_model.py) where the models meet.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "policy/cost_model.h"
#include "policy/placement_lp.h"
#include "policy/policy_fixtures.h"
#include "policy/speculation.h"

namespace strata {
namespace {

// Expected values are computed in double in a different order than the
// library: they agree to a few ulps, so 1e-12 relative is ample and still
// catches any wrong term.
constexpr double kRel = 1e-12;

#define EXPECT_REL(actual, expected) \
  EXPECT_NEAR((actual), (expected), kRel* std::max(1.0, std::fabs(expected))) << #actual

double term(const StepCost& st, const std::string& name, const Placement& x) {
  for (const CostTerm& t : st.terms) {
    if (t.name == name) return t.seconds(x);
  }
  ADD_FAILURE() << "no term " << name;
  return -1;
}

// Constants of the tiny shape (policy_fixtures.h), by hand.
constexpr double kLayerElems = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128;  // 36864
constexpr double kWl = 2 * kLayerElems;      // bytes of one layer
constexpr double kWh = 2 * 100 * 64;         // output head
constexpr double kWtot = 2 * kWl + 2 * kWh;  // layers + embedding + head (untied)
// Weight staging: a column's streamed share cut at tensor boundaries. The
// largest matrix of a layer is 64 x 128 (q, k and v together, or one of the
// feed-forward matrices), larger than the head; staging runs from it at share
// 0 to a whole layer at share 1, raised by the most that line falls short of
// min(f * kWl + kTl, kWl) (at f = 1 - kTl / kWl), double-buffered.
constexpr double kTl = 2 * 64 * 128;
constexpr double kStageSlope = kWl - kTl;
constexpr double kStageGranule = 2 * (kTl + kTl * (kWl - kTl) / kWl);
constexpr double kKt = 2 * 32 * 2;  // K+V bytes per token per layer
constexpr double kHt = 64 * 2;      // hidden bytes per token

// Working set of one micro-batch of g sequences on the device: residual
// stream plus the largest stage (qkv, attention with one sequence's scores,
// output projection, gated FFN up, FFN down, f32 logits).
double working(double g, double tokens, double ctx) {
  const double a = 2, h = 64, q = 64, kv = 32, ff = 128, heads = 4, vocab = 100;
  const double stages[] = {a * g * tokens * (h + q + 2 * kv),
                           a * g * tokens * (2 * q + 2 * kv) + a * heads * tokens * ctx,
                           a * g * tokens * (q + h),
                           a * g * tokens * (h + 3 * ff),
                           a * g * tokens * (ff + h),
                           g * (a * h + 4 * vocab)};
  return a * g * tokens * h + *std::max_element(std::begin(stages), std::end(stages));
}

struct TinyCase {
  ModelShape shape = test::tiny_shape();
  HardwareProfile hw = test::tiny_gpu();
  Workload work{8, 4};
  Policy pol;
  TinyCase() {
    pol.gpu_batch_size = 2;
    pol.num_gpu_batches = 3;
    pol.placement[Share::kWGpu] = 0.25;
    pol.placement[Share::kWCpu] = 0.5;
    pol.placement[Share::kKvGpu] = 0.5;
    pol.placement[Share::kKvCpu] = 0.25;
    pol.placement[Share::kActGpu] = 0.5;
    pol.placement[Share::kActCpu] = 0.5;
  }
};

TEST(PolicyCostModel, ShapeCounts) {
  const ModelShape s = test::tiny_shape();
  EXPECT_EQ(s.layer_weight_elems(), 36864);
  EXPECT_EQ(s.q_dim(), 64);
  EXPECT_EQ(s.kv_dim(), 32);
  EXPECT_EQ(s.global_weight_elems(), 2 * 6400);
  EXPECT_EQ(s.n_params(), 2 * 36864 + 2 * 6400);
}

TEST(PolicyCostModel, PrefillTermsByHand) {
  TinyCase t;
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, t.pol);
  const Placement x = t.pol.placement;
  const double s = 8, B = 6, g = 2, k = 3;
  const double wn = 0.25, kn = 0.25, hn = 0.0;
  EXPECT_REL(term(m.prefill_layer, "cpu->gpu", x), (kWl * 0.75 + kHt * s * B * 0.5) / 1000);
  EXPECT_REL(term(m.prefill_layer, "disk->cpu", x), (kWl * wn + kHt * s * B * hn) / 100);
  EXPECT_REL(term(m.prefill_layer, "gpu->cpu", x),
             kKt * s * B * 0.5 / 250 + kHt * s * B * 0.5 / 500);
  EXPECT_REL(term(m.prefill_layer, "cpu->disk", x), kKt * s * B * kn / 25 + kHt * s * B * hn / 50);
  EXPECT_REL(term(m.prefill_layer, "gemm", x), k * g * s * 2 * kLayerElems / 1e6);
  EXPECT_REL(term(m.prefill_layer, "attention", x), B * 4 * s * s * 64 / 2e6);
  // max(load relay, store relay, the disk's reads and writes, compute):
  // here the disk binds (the KV stored to disk at 25 beside the weights
  // read from it at 100).
  const double load = (kWl * 0.75 + kHt * s * B * 0.5) / 1000 + kWl * wn / 100;
  const double store = kKt * s * B * 0.5 / 250 + kHt * s * B * 0.5 / 500 + kKt * s * B * kn / 25;
  const double disk = kWl * wn / 100 + kKt * s * B * kn / 25;
  const double compute = k * g * s * 2 * kLayerElems / 1e6 + B * 4 * s * s * 64 / 2e6;
  EXPECT_GT(disk, std::max({load, store, compute}));
  EXPECT_REL(m.prefill_layer.seconds(x), std::max({load, store, disk, compute}));
  // Output head: only the last position's logits; the step stages the
  // embedding table (as large as the head) and the head.
  EXPECT_REL(m.prefill_head.seconds(x),
             std::max(2 * kWh * 0.75 / 1000 + 2 * kWh * wn / 100, k * g * 2 * 6400 / 1e6));
}

TEST(PolicyCostModel, DecodeTermsByHandWithCpuAttention) {
  TinyCase t;
  t.pol.cpu_attention = true;
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, t.pol);
  const Placement x = t.pol.placement;
  const double B = 6, g = 2, k = 3, ctx = 8 + 4 / 2.0, a = 2, q = 64;
  const double wn = 0.25, kn = 0.25, hn = 0.0;
  const double c2g = (kWl * 0.75 + kHt * B * 0.5 + a * q * B * 0.5) / 1000;
  const double g2c = (kHt * B * 0.5 + kKt * B * 0.5 + a * q * B * 0.5) / 500;
  const double d2c = (kWl * wn + kHt * B * hn + kKt * ctx * B * kn) / 100;
  const double c2d = (kKt * B * kn + kHt * B * hn) / 50;
  const double gemm = k * g * 2 * kLayerElems / 1e5;
  const double attn_gpu = B * 4 * ctx * q / 1e4 * 0.5;
  const double attn_cpu = B * 4 * ctx * q / 1e3 * 0.5;
  EXPECT_REL(term(m.decode_layer, "cpu->gpu", x), c2g);
  EXPECT_REL(term(m.decode_layer, "gpu->cpu", x), g2c);
  EXPECT_REL(term(m.decode_layer, "disk->cpu", x), d2c);
  EXPECT_REL(term(m.decode_layer, "cpu->disk", x), c2d);
  EXPECT_REL(term(m.decode_layer, "gemm", x), gemm);
  EXPECT_REL(term(m.decode_layer, "attention (gpu)", x), attn_gpu);
  EXPECT_REL(term(m.decode_layer, "attention (cpu)", x), attn_cpu);
  // FlexGen's form, cpu->gpu + max(gpu->cpu, disk->cpu, cpu->disk, compute),
  // and the one disk's reads and writes together.
  EXPECT_REL(m.decode_layer.seconds(x),
             std::max(c2g + std::max({g2c, d2c, c2d, gemm + attn_gpu + attn_cpu}), d2c + c2d));
  // A block: L prefill steps and a head, then (n-1) decode steps of L layers and a head.
  EXPECT_REL(m.decode_seconds(x), 3 * (2 * m.decode_layer.seconds(x) + m.decode_head.seconds(x)));
  EXPECT_REL(m.prefill_seconds(x), 2 * m.prefill_layer.seconds(x) + m.prefill_head.seconds(x));
}

// Speculative decoding: R rows per sequence and step cross the links as
// hidden state and compute (matrix products, attention queries), E kept
// tokens' KV is stored, the weights and the KV read stay once per step, and
// a block takes (n-1)/E decode steps.
TEST(PolicyCostModel, SpeculationComputesRowsAndKeepsTokens) {
  TinyCase t;
  t.pol.cpu_attention = true;
  t.work.spec_rows = 3;
  t.work.spec_tokens = 2;
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, t.pol);
  const Placement x = t.pol.placement;
  const double B = 6, g = 2, k = 3, ctx = 8 + 4 / 2.0, a = 2, q = 64, R = 3, E = 2;
  const double wn = 0.25, kn = 0.25, hn = 0.0;
  const double c2g = (kWl * 0.75 + kHt * B * R * 0.5 + a * q * B * R * 0.5) / 1000;
  const double g2c = (kHt * B * R * 0.5 + kKt * B * E * 0.5 + a * q * B * R * 0.5) / 500;
  const double d2c = (kWl * wn + kHt * B * R * hn + kKt * ctx * B * kn) / 100;
  const double c2d = (kKt * B * E * kn + kHt * B * R * hn) / 50;
  const double gemm = k * g * R * 2 * kLayerElems / 1e5;
  const double attn_gpu = B * R * 4 * ctx * q / 1e4 * 0.5;
  const double attn_cpu = B * R * 4 * ctx * q / 1e3 * 0.5;
  EXPECT_REL(term(m.decode_layer, "cpu->gpu", x), c2g);
  EXPECT_REL(term(m.decode_layer, "gpu->cpu", x), g2c);
  EXPECT_REL(term(m.decode_layer, "disk->cpu", x), d2c);
  EXPECT_REL(term(m.decode_layer, "cpu->disk", x), c2d);
  EXPECT_REL(term(m.decode_layer, "gemm", x), gemm);
  EXPECT_REL(term(m.decode_layer, "attention (gpu)", x), attn_gpu);
  EXPECT_REL(term(m.decode_layer, "attention (cpu)", x), attn_cpu);
  EXPECT_REL(m.decode_seconds(x),
             3 / E * (2 * m.decode_layer.seconds(x) + m.decode_head.seconds(x)));
  // The prefill is untouched.
  const CostModel plain = build_cost_model(t.shape, t.hw, TinyCase().work, t.pol);
  EXPECT_REL(m.prefill_seconds(x), plain.prefill_seconds(x));
  // Decode tokens per second count kept tokens: (n-1) B per block.
  const Prediction p = evaluate(m, t.pol, budgets_of(t.hw));
  EXPECT_REL(p.decode_tokens_per_s, B * 3 / m.decode_seconds(x));

  // A draft model's seconds add to every decode step.
  Workload drafted = t.work;
  drafted.draft_step_s = 0.125;
  const CostModel md = build_cost_model(t.shape, t.hw, drafted, t.pol);
  EXPECT_REL(md.decode_seconds(x), m.decode_seconds(x) + 3 / E * 0.125);
  EXPECT_REL(md.prefill_seconds(x), m.prefill_seconds(x));

  for (const auto& [rows, tokens] :
       {std::pair<double, double>{1, 0.5}, {2, 3}, {std::nan(""), 1}}) {
    t.work.spec_rows = rows;
    t.work.spec_tokens = tokens;
    EXPECT_THROW(build_cost_model(t.shape, t.hw, t.work, t.pol), Error) << rows << " " << tokens;
  }
  for (const double d : {-1.0, std::nan("")}) {
    drafted.draft_step_s = d;
    EXPECT_THROW(build_cost_model(t.shape, t.hw, drafted, t.pol), Error) << d;
  }
}

// Shared prompt prefixes: the prefill computes and stores s - shared tokens
// per sequence, attends over all s (the prefix's square taken off), and
// each micro-batch reads the shared pages' KV where it lives; a prefix step in half the
// blocks streams the weights again, computes its P tokens and stores their
// KV; decode loads a shared page once per micro-batch; the LP's objective
// prices the same block.
TEST(PolicyCostModel, SharedPrefixesByHand) {
  TinyCase t;
  t.work.shared_tokens = 4;
  t.work.prefix_step_tokens = 6;
  t.work.prefix_steps = 0.5;
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, t.pol);
  const Placement x = t.pol.placement;
  const double s = 8, shared = 4, sn = 4, P = 6, B = 6, g = 2, k = 3;
  const double wn = 0.25, kn = 0.25, hn = 0.0;
  EXPECT_REL(term(m.prefill_layer, "cpu->gpu", x),
             (kWl * 0.75 + kHt * sn * B * 0.5 + kKt * shared * k * 0.5) / 1000);
  EXPECT_REL(term(m.prefill_layer, "disk->cpu", x),
             (kWl * wn + kHt * sn * B * hn + kKt * shared * k * kn) / 100);
  EXPECT_REL(term(m.prefill_layer, "gpu->cpu", x),
             kKt * sn * B * 0.5 / 250 + kHt * sn * B * 0.5 / 500);
  EXPECT_REL(term(m.prefill_layer, "cpu->disk", x),
             kKt * sn * B * kn / 25 + kHt * sn * B * hn / 50);
  EXPECT_REL(term(m.prefill_layer, "gemm", x), k * g * sn * 2 * kLayerElems / 1e6);
  EXPECT_REL(term(m.prefill_layer, "attention", x), B * 4 * (s * s - shared * shared) * 64 / 2e6);

  EXPECT_REL(term(m.prefix_layer, "cpu->gpu", x), kWl * 0.75 / 1000);
  EXPECT_REL(term(m.prefix_layer, "disk->cpu", x), kWl * wn / 100);
  EXPECT_REL(term(m.prefix_layer, "gpu->cpu", x), kKt * P * 0.5 / 250);
  EXPECT_REL(term(m.prefix_layer, "cpu->disk", x), kKt * P * kn / 25);
  EXPECT_REL(term(m.prefix_layer, "gemm", x), P * 2 * kLayerElems / 1e6 + 4 * P * P * 64 / 2e6);
  EXPECT_REL(m.prefix_head.seconds(x), m.prefill_head.seconds(x));
  EXPECT_REL(m.prefill_seconds(x),
             2 * m.prefill_layer.seconds(x) + m.prefill_head.seconds(x) +
                 0.5 * (2 * m.prefix_layer.seconds(x) + m.prefix_head.seconds(x)));
  // Decode loads a shared page once per micro-batch of g = 2: 10 - 4 / 2
  // tokens of KV per sequence on average; the rest is as without sharing.
  const double ctx_loaded = 8 + 4 / 2.0 - shared / 2;
  EXPECT_REL(term(m.decode_layer, "cpu->gpu", x),
             (kWl * 0.75 + kHt * B * 0.5 + kKt * ctx_loaded * B * 0.5) / 1000);
  EXPECT_REL(term(m.decode_layer, "disk->cpu", x), (kWl * wn + kKt * ctx_loaded * B * kn) / 100);
  const CostModel plain = build_cost_model(t.shape, t.hw, TinyCase().work, t.pol);
  for (const char* same : {"gpu->cpu", "cpu->disk", "gemm", "attention (gpu)"}) {
    EXPECT_REL(term(m.decode_layer, same, x), term(plain.decode_layer, same, x)) << same;
  }
  // Without sharing there is no prefix step.
  EXPECT_TRUE(plain.prefix_layer.terms.empty());
  EXPECT_TRUE(plain.prefix_head.terms.empty());
  EXPECT_REL(plain.prefill_seconds(x),
             2 * plain.prefill_layer.seconds(x) + plain.prefill_head.seconds(x));

  // The LP's objective at its own placement is the evaluation of that policy.
  Budgets b;
  b.gpu = b.cpu = b.disk = 1e12;
  const PlacementResult r = solve_placement(m, b, {});
  ASSERT_TRUE(r.feasible);
  Policy chosen = t.pol;
  chosen.placement = r.x;
  const Prediction p = evaluate(m, chosen, b);
  EXPECT_NEAR(r.seconds_per_token, p.total_s / m.generated_tokens(), 1e-6 * r.seconds_per_token);

  for (const auto& [sh, tokens, steps] : {std::tuple{8.0, 6.0, 0.5},
                                          {-1.0, 6.0, 0.5},
                                          {4.0, -1.0, 0.5},
                                          {4.0, 6.0, 1.5},
                                          {4.0, std::nan(""), 0.5}}) {
    Workload bad = t.work;
    bad.shared_tokens = sh;
    bad.prefix_step_tokens = tokens;
    bad.prefix_steps = steps;
    EXPECT_THROW(build_cost_model(t.shape, t.hw, bad, t.pol), Error) << sh << " " << tokens;
  }
}

// Drafts of k tokens, each accepted with chance p after the ones before:
// rows 1 + k, kept 1 + p + ... + p^k; the chance back from the share a run
// accepted.
TEST(PolicySpeculation, DraftRatesAndAcceptanceFromTheAcceptedShare) {
  EXPECT_DOUBLE_EQ(draft_rates(0.5, 0).rows, 1);
  EXPECT_DOUBLE_EQ(draft_rates(0.5, 0).tokens, 1);
  EXPECT_DOUBLE_EQ(draft_rates(0.5, 2).rows, 3);
  EXPECT_DOUBLE_EQ(draft_rates(0.5, 2).tokens, 1.75);
  EXPECT_DOUBLE_EQ(draft_rates(1.0, 4).tokens, 5);
  EXPECT_DOUBLE_EQ(draft_rates(0.0, 4).tokens, 1);
  // (0.5 + 0.25) / 2 = 0.375 of two-token drafts: p = 0.5.
  EXPECT_NEAR(draft_token_acceptance(0.375, 2), 0.5, 1e-12);
  EXPECT_NEAR(draft_token_acceptance(1.0, 3), 1.0, 1e-12);
  EXPECT_NEAR(draft_token_acceptance(0.3, 1), 0.3, 1e-12);
  for (const double p : {0.1, 0.6, 0.95}) {
    const double share = (draft_rates(p, 5).tokens - 1) / 5;
    EXPECT_NEAR(draft_token_acceptance(share, 5), p, 1e-12) << p;
  }
  EXPECT_THROW(draft_token_acceptance(0, 2), Error);
  EXPECT_THROW(draft_token_acceptance(1.5, 2), Error);
  EXPECT_THROW(draft_token_acceptance(0.5, 0), Error);
}

TEST(PolicyCostModel, CpuAttentionTakesKvOffTheHostToDeviceLink) {
  TinyCase t;
  t.pol.placement[Share::kKvGpu] = 0;
  t.pol.placement[Share::kKvCpu] = 1;
  const Placement x = t.pol.placement;
  const double B = 6, ctx = 10, a = 2, q = 64;
  Policy off = t.pol;
  off.cpu_attention = false;
  Policy on = t.pol;
  on.cpu_attention = true;
  const CostModel m_off = build_cost_model(t.shape, t.hw, t.work, off);
  const CostModel m_on = build_cost_model(t.shape, t.hw, t.work, on);
  // Without CPU attention the whole attended KV crosses cpu->gpu each step;
  // with it only q goes down and the output comes back.
  EXPECT_REL(term(m_off.decode_layer, "cpu->gpu", x) - term(m_on.decode_layer, "cpu->gpu", x),
             (kKt * ctx * B - a * q * B) / 1000);
  EXPECT_EQ(term(m_off.decode_layer, "attention (cpu)", x), 0);
  EXPECT_REL(term(m_on.decode_layer, "attention (cpu)", x), B * 4 * ctx * q / 1e3);
  EXPECT_EQ(term(m_on.decode_layer, "attention (gpu)", x), 0);
  // And the GPU no longer stages a micro-batch's KV: 2 * Kt * (s+n) * g less.
  const int gpu = static_cast<int>(Tier::kGpu), dec = static_cast<int>(Phase::kDecode);
  EXPECT_REL(m_off.memory[gpu][dec].buffers(x) - m_on.memory[gpu][dec].buffers(x),
             2 * kKt * 12 * 2);
}

TEST(PolicyCostModel, MemoryPerTierByHand) {
  TinyCase t;
  t.pol.cpu_attention = false;
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, t.pol);
  const Placement x = t.pol.placement;
  const double s = 8, n = 4, B = 6, g = 2, L = 2;
  const int gpu = 0, cpu = 1, disk = 2, pre = 0, dec = 1;
  // Homes: fractions of the totals.
  EXPECT_REL(m.memory[gpu][dec].weights(x), kWtot * 0.25);
  EXPECT_REL(m.memory[cpu][dec].weights(x), kWtot * 0.5);
  EXPECT_REL(m.memory[disk][dec].weights(x), kWtot * 0.25);
  EXPECT_REL(m.memory[gpu][dec].kv_cache(x), kKt * (s + n) * B * L * 0.5);
  EXPECT_REL(m.memory[gpu][pre].kv_cache(x), kKt * s * B * L * 0.5);
  EXPECT_REL(m.memory[disk][dec].kv_cache(x), kKt * (s + n) * B * L * 0.25);
  EXPECT_REL(m.memory[gpu][pre].activations(x), kHt * s * B * 0.5);
  EXPECT_REL(m.memory[cpu][dec].activations(x), kHt * B * 0.5);
  // Device buffers in decode: the weight double buffer's share-proportional
  // part, activation staging, a micro-batch's KV double-buffered in, the
  // working set of one micro-batch.
  EXPECT_REL(m.memory[gpu][dec].buffers(x), 2 * kStageSlope * 0.75 + 2 * kHt * g * 0.5 +
                                                2 * kKt * (s + n) * g * 0.5 + working(g, 1, s + n));
  EXPECT_REL(m.memory[gpu][pre].buffers(x),
             2 * kStageSlope * 0.75 + 2 * kHt * s * g * 0.5 + kKt * s * g * 0.5 + working(g, s, s));
  // Host relays for what lives on disk.
  EXPECT_REL(m.memory[cpu][dec].buffers(x), 2 * kStageSlope * 0.25 + 2 * kKt * (s + n) * g * 0.25);
  EXPECT_EQ(m.memory[disk][dec].buffers(x), 0);
  // Weights stream from disk: the device and the host each hold the granule.
  EXPECT_EQ(m.weight_path(x), WeightPath::kFromDisk);
  EXPECT_REL(m.granule(gpu, WeightPath::kFromDisk), kStageGranule);
  EXPECT_REL(m.granule(cpu, WeightPath::kFromDisk), kStageGranule);
  EXPECT_EQ(m.granule(cpu, WeightPath::kFromRam), 0);
  EXPECT_EQ(m.granule(gpu, WeightPath::kResident), 0);
  EXPECT_EQ(m.granule(disk, WeightPath::kFromDisk), 0);

  const Prediction p = evaluate(m, t.pol, budgets_of(t.hw));
  EXPECT_REL(
      p.memory[gpu].peak,
      std::max(m.memory[gpu][pre].total()(x), m.memory[gpu][dec].total()(x)) + kStageGranule);
  EXPECT_REL(
      p.memory[cpu].peak,
      std::max(m.memory[cpu][pre].total()(x), m.memory[cpu][dec].total()(x)) + kStageGranule);
  EXPECT_TRUE(p.fits);
}

TEST(PolicyCostModel, CompressionShrinksBytes) {
  TinyCase t;
  Policy q4 = t.pol;
  q4.compress_weight = parse_compression("q4", "test");  // q4a64: 36 bytes per 64
  // KV q8: values q8a32 (36 bytes per 32), keys 1 byte per element plus an
  // f16 scale and minimum per channel and 16-token page (1.25 bytes per
  // element): pages take the larger, 1.25 of f16's 2.
  q4.compress_kv = parse_compression("q8:32", "test");
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, q4);
  const Placement x = q4.placement;
  EXPECT_REL(m.memory[1][1].weights(x), kWtot / 2 * (36.0 / 64) * 0.5);
  EXPECT_REL(m.memory[0][1].kv_cache(x), kKt / 2 * 1.25 * 12 * 6 * 2 * 0.5);
  EXPECT_REL(term(m.prefill_layer, "disk->cpu", x), kLayerElems * (36.0 / 64) * 0.25 / 100);
}

TEST(PolicyCostModel, SparseAttentionCapsTheAttendedContext) {
  TinyCase t;
  t.pol.cpu_attention = true;
  t.pol.sparse_attention_budget = 4;  // below s + n/2 = 10
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, t.pol);
  const Placement x = t.pol.placement;
  // Two layers: both below kSparseFirstLayer, so they attend every key and
  // the disk reads every page.
  EXPECT_REL(term(m.decode_layer, "attention (cpu)", x), 6 * 4 * 10.0 * 64 / 1e3 * 0.5);
  EXPECT_REL(term(m.decode_layer, "disk->cpu", x), (kWl * 0.25 + kKt * 10 * 6 * 0.25) / 100);
  // The KV cache itself is kept whole.
  EXPECT_REL(m.memory[0][1].kv_cache(x), kKt * 12 * 6 * 2 * 0.5);

  // Four layers: the last two read only their 4 selected tokens' pages
  // from disk, the first two all 10; on average 7 per layer.
  t.shape.n_layer = 4;
  const CostModel m4 = build_cost_model(t.shape, t.hw, t.work, t.pol);
  EXPECT_REL(term(m4.decode_layer, "disk->cpu", x), (kWl * 0.25 + kKt * 7 * 6 * 0.25) / 100);
  // Attention: the first two layers all 10 keys, the last two the 4
  // selected plus the selection's min/max reads, 10/16 pages of f32 min and
  // max (8 bytes per K element) counted as f16 keys (4 bytes per K element).
  const double sparse_keys = 4 + 10.0 / 16 * 8 / 4;
  EXPECT_REL(term(m4.decode_layer, "attention (cpu)", x),
             6 * 4 * (2 * 10.0 + 2 * sparse_keys) / 4 * 64 / 1e3 * 0.5);
}

TEST(PolicyCostModel, DeviceMemoryRooflineBoundsSmallBatchDecode) {
  TinyCase t;
  t.hw.device_mem_bandwidth = 1e3;  // slow enough that reading weights dominates
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, t.pol);
  const Placement x = t.pol.placement;
  // k micro-batches each read the layer's weights from device memory.
  EXPECT_REL(term(m.decode_layer, "gemm", x), 3 * std::max(2 * 2 * kLayerElems / 1e5, kWl / 1e3));
}

TEST(PolicyCostModel, CpuDeviceUsesRamInPlace) {
  TinyCase t;
  t.hw = test::tiny_cpu();
  t.pol.cpu_attention = true;  // meaningless on a CPU device: turned off
  const Policy norm = normalize_policy(t.pol, t.hw);
  EXPECT_EQ(norm.placement[Share::kWGpu], 0);
  EXPECT_EQ(norm.placement[Share::kWCpu], 0.75);
  EXPECT_EQ(norm.placement[Share::kKvCpu], 0.75);
  EXPECT_EQ(norm.placement[Share::kActCpu], 1.0);
  EXPECT_FALSE(norm.cpu_attention);
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, t.pol);
  const Placement x = norm.placement;
  for (const CostTerm& term : m.decode_layer.terms) EXPECT_NE(term.name, "cpu->gpu");
  // Only disk streams: double buffer of the disk share of weights, in RAM.
  EXPECT_EQ(m.weight_path(x), WeightPath::kFromDisk);
  EXPECT_REL(m.granule(1, WeightPath::kFromDisk), kStageGranule);
  const Prediction p = evaluate(m, t.pol, budgets_of(t.hw));
  EXPECT_FALSE(p.memory[0].used);
  EXPECT_EQ(p.memory[0].peak, 0);
  const double g = 2, s = 8, n = 4;
  EXPECT_REL(m.memory[1][1].buffers(x),
             2 * kStageSlope * 0.25 + 2 * kKt * (s + n) * g * 0.25 + working(g, 1, s + n));
  EXPECT_REL(m.memory[1][0].buffers(x),
             2 * kStageSlope * 0.25 + kKt * s * g * 0.25 + working(g, s, s));
  EXPECT_REL(m.memory[1][1].weights(x), kWtot * 0.75);
  EXPECT_REL(term(m.decode_layer, "disk->cpu", x), (kWl * 0.25 + kKt * 10 * 6 * 0.25) / 100);
  // One disk reads and writes: a step lasts its reads plus its writes, or
  // its compute.
  for (const StepCost* st : {&m.prefill_layer, &m.decode_layer}) {
    const double io = term(*st, "disk->cpu", x) + term(*st, "cpu->disk", x);
    EXPECT_GT(term(*st, "cpu->disk", x), 0);
    EXPECT_REL(st->seconds(x), std::max(io, term(*st, "gemm", x) + term(*st, "attention", x)));
  }
  // The engine's KV in f32 (it computes in f32): twice the bytes to hold,
  // store and read of the f16 the model assumes by default.
  Workload f32_kv = t.work;
  f32_kv.kv_elem_bytes = 4;
  const CostModel kv4 = build_cost_model(t.shape, t.hw, f32_kv, t.pol);
  EXPECT_REL(term(kv4.decode_layer, "disk->cpu", x), (kWl * 0.25 + 2 * kKt * 10 * 6 * 0.25) / 100);
  EXPECT_REL(kv4.memory[1][1].kv_cache(x), 2 * m.memory[1][1].kv_cache(x));
  // The engine's activations in f32: twice the hidden states it holds.
  Workload f32_act = t.work;
  f32_act.act_elem_bytes = 4;
  const CostModel act4 = build_cost_model(t.shape, t.hw, f32_act, t.pol);
  EXPECT_GT(m.memory[1][1].activations(x), 0);
  EXPECT_REL(act4.memory[1][1].activations(x), 2 * m.memory[1][1].activations(x));
  // With KV read rates by request size, KV pages are read at the rate of
  // their record (K and V of one layer's 16-token page: 2K, in a 4K block).
  t.hw.disk_to_cpu_kv = {{4096, 10}, {16384, 40}};
  const CostModel kv = build_cost_model(t.shape, t.hw, t.work, t.pol);
  EXPECT_REL(term(kv.decode_layer, "disk->cpu", x), kWl * 0.25 / 100 + kKt * 10 * 6 * 0.25 / 10);
  // Longer sequences keep their disk pages in extents of consecutive
  // records: a request reads the disk pages a sequence has on average over
  // the decode (s + n/2 = 228 tokens: 15 pages, of which the policy's KV
  // disk share, a quarter, is 4 records of 4K), here below the 1 MiB extent.
  t.hw.disk_to_cpu_kv = {{4096, 10}, {65536, 40}};
  const CostModel longer = build_cost_model(t.shape, t.hw, {200, 56}, t.pol);
  EXPECT_REL(term(longer.decode_layer, "disk->cpu", x),
             kWl * 0.25 / 100 + kKt * 228 * 6 * 0.25 / 25);  // log2-interpolated at 16K
  // With all of the KV on disk all 15 records are one request.
  Policy kv_on_disk = t.pol;
  kv_on_disk.placement.set(DataKind::kKv, 0, 0);
  const Placement xd = normalize_policy(kv_on_disk, t.hw).placement;
  const CostModel all_disk = build_cost_model(t.shape, t.hw, {200, 56}, kv_on_disk);
  const double rate = 10 + 30 * std::log2(15.0) / 4;  // log2-interpolated at 60K
  EXPECT_REL(term(all_disk.decode_layer, "disk->cpu", xd), kWl * 0.25 / 100 + kKt * 228 * 6 / rate);
  // A policy without KV on disk prices a KV read as if all pages were there
  // (the search's first solve, search.cpp).
  Policy kv_in_ram = t.pol;
  kv_in_ram.placement.set(DataKind::kKv, 0, 1);
  const CostModel in_ram = build_cost_model(t.shape, t.hw, {200, 56}, kv_in_ram);
  EXPECT_REL(term(in_ram.decode_layer, "disk->cpu", x),
             kWl * 0.25 / 100 + kKt * 228 * 6 * 0.25 / rate);
  // A micro-batch's load issues its g = 2 sequences' requests together: at
  // the rate of batches of 2 (here half that of the size table at 64K).
  t.hw.disk_to_cpu_kv_batches = {{1, 10}, {2, 20}, {16, 40}};
  const CostModel batched = build_cost_model(t.shape, t.hw, {200, 56}, t.pol);
  EXPECT_REL(term(batched.decode_layer, "disk->cpu", x),
             kWl * 0.25 / 100 + kKt * 228 * 6 * 0.25 / (25 * 0.5));
  t.hw.disk_to_cpu_kv_batches.clear();
  // With weight read rates by request size, a layer's weights are read at
  // the rate of one layer's bytes (here half way in log2: 4x each side).
  t.hw.disk_to_cpu_kv.clear();
  t.hw.disk_to_cpu_weights = {{kWl / 4, 50}, {kWl * 4, 200}};
  const CostModel w = build_cost_model(t.shape, t.hw, t.work, t.pol);
  EXPECT_REL(term(w.decode_layer, "disk->cpu", x), kWl * 0.25 / 125 + kKt * 10 * 6 * 0.25 / 100);
  EXPECT_REL(term(w.prefill_layer, "disk->cpu", x), kWl * 0.25 / 125);
  // Weight loads measured beside compute: a layer's weights (kWl * 0.25 on
  // disk) at the share of their rate alone at a layer's size (40 of 100);
  // the KV records (4K each; 20 of 100 at that size beside compute: not
  // applied to KV reads) and the prefill's head and embeddings (nothing
  // computes beside them) at the rate alone.
  t.hw.disk_to_cpu_weights.clear();
  t.hw.disk_to_cpu_beside_compute = {{4096, 20}, {kWl, 40}};
  EXPECT_REL(t.hw.disk_share_beside_compute(kWl), 0.4);
  EXPECT_REL(t.hw.disk_share_beside_compute(1024), 0.2);
  const CostModel bs = build_cost_model(t.shape, t.hw, t.work, t.pol);
  EXPECT_REL(term(bs.decode_layer, "disk->cpu", x), kWl * 0.25 / 40 + kKt * 10 * 6 * 0.25 / 100);
  EXPECT_REL(term(bs.prefill_layer, "disk->cpu", x), kWl * 0.25 / 40);
  EXPECT_GT(term(bs.prefill_head, "disk->cpu", x), 0);
  EXPECT_REL(term(bs.prefill_head, "disk->cpu", x), term(m.prefill_head, "disk->cpu", x));
  // Faster beside compute than alone is noise: never above the rate alone.
  t.hw.disk_to_cpu_beside_compute = {{kWl, 400}};
  EXPECT_EQ(t.hw.disk_share_beside_compute(kWl), 1);
  EXPECT_REL(term(build_cost_model(t.shape, t.hw, t.work, t.pol).decode_layer, "disk->cpu", x),
             (kWl * 0.25 + kKt * 10 * 6 * 0.25) / 100);
}

TEST(PolicyCostModel, TiedEmbeddingsAreReadOncePerDecodeStep) {
  TinyCase t;
  t.hw = test::tiny_cpu();
  t.pol.placement.set(DataKind::kWeights, 0, 0);  // all on disk
  const Placement x = normalize_policy(t.pol, t.hw).placement;
  const CostModel untied = build_cost_model(t.shape, t.hw, t.work, t.pol);
  // A decode step begins with the first micro-batch's KV read for the first
  // layer, overlapped by nothing: its g = 2 sequences' disk quarter of their
  // s + n/2 = 10 tokens.
  const double first_kv = kKt * 10 * 2 * 0.25 / 100;
  // Untied: every step reads the embeddings and the head.
  EXPECT_REL(term(untied.prefill_head, "disk->cpu", x), 2 * kWh / 100);
  EXPECT_REL(term(untied.decode_head, "disk->cpu", x), 2 * kWh / 100 + first_kv);
  // Tied: the head is the embedding table, read again by the prefill; a
  // decode step's embeddings are the previous step's head load.
  t.shape.tied_embeddings = true;
  const CostModel tied = build_cost_model(t.shape, t.hw, t.work, t.pol);
  EXPECT_REL(term(tied.prefill_head, "disk->cpu", x), 2 * kWh / 100);
  EXPECT_REL(term(tied.decode_head, "disk->cpu", x), kWh / 100 + first_kv);
}

// The busy seconds the report compares with what the engine measures: each
// link's terms and the compute's over every step of a block, by hand from
// the steps' terms (tiny shape: 2 layers; s = 8, n = 4: 3 decode steps).
TEST(PolicyCostModel, BusySecondsSumEveryStepOfABlock) {
  TinyCase t;
  t.hw = test::tiny_cpu();
  const Placement x = normalize_policy(t.pol, t.hw).placement;
  const CostModel m = build_cost_model(t.shape, t.hw, t.work, t.pol);
  const auto busy = m.busy_seconds(x);
  const double L = 2, steps = 3;
  EXPECT_REL(
      busy.at("disk->cpu"),
      L * term(m.prefill_layer, "disk->cpu", x) + term(m.prefill_head, "disk->cpu", x) +
          steps * (L * term(m.decode_layer, "disk->cpu", x) + term(m.decode_head, "disk->cpu", x)));
  EXPECT_REL(busy.at("cpu->disk"), L * term(m.prefill_layer, "cpu->disk", x) +
                                       steps * L * term(m.decode_layer, "cpu->disk", x));
  const auto compute = [&](const StepCost& st) {
    return term(st, "gemm", x) +
           (&st == &m.prefill_head || &st == &m.decode_head ? 0.0 : term(st, "attention", x));
  };
  EXPECT_REL(busy.at("compute"),
             L * compute(m.prefill_layer) + compute(m.prefill_head) +
                 steps * (L * compute(m.decode_layer) + compute(m.decode_head)));
  EXPECT_EQ(busy.size(), 3u);
  EXPECT_EQ(evaluate(m, t.pol, budgets_of(t.hw)).block_busy_s, busy);
  // All in RAM: nothing crosses a link and the block is its compute.
  Policy ram = t.pol;
  for (DataKind d : {DataKind::kWeights, DataKind::kKv, DataKind::kAct}) ram.placement.set(d, 0, 1);
  const CostModel mr = build_cost_model(t.shape, t.hw, t.work, ram);
  const Prediction pr = evaluate(mr, ram, budgets_of(t.hw));
  EXPECT_EQ(pr.block_busy_s.at("disk->cpu"), 0);
  EXPECT_REL(pr.block_busy_s.at("compute"), pr.total_s);
  // With speculation a block has (n - 1) / tokens-per-step decode steps.
  Workload spec = t.work;
  spec.spec_tokens = 1.5;
  spec.spec_rows = 2;
  const CostModel ms = build_cost_model(t.shape, t.hw, spec, t.pol);
  EXPECT_REL(
      ms.busy_seconds(x).at("disk->cpu"),
      L * term(ms.prefill_layer, "disk->cpu", x) + term(ms.prefill_head, "disk->cpu", x) +
          2 * (L * term(ms.decode_layer, "disk->cpu", x) + term(ms.decode_head, "disk->cpu", x)));
  // Shared prefixes: a prefix step in half the blocks (its layers and head).
  Workload prefix = t.work;
  prefix.shared_tokens = 4;
  prefix.prefix_step_tokens = 6;
  prefix.prefix_steps = 0.5;
  const CostModel mp = build_cost_model(t.shape, t.hw, prefix, t.pol);
  EXPECT_GT(term(mp.prefix_layer, "disk->cpu", x), 0);
  EXPECT_REL(
      mp.busy_seconds(x).at("disk->cpu"),
      0.5 * (L * term(mp.prefix_layer, "disk->cpu", x) + term(mp.prefix_head, "disk->cpu", x)) +
          L * term(mp.prefill_layer, "disk->cpu", x) + term(mp.prefill_head, "disk->cpu", x) +
          steps *
              (L * term(mp.decode_layer, "disk->cpu", x) + term(mp.decode_head, "disk->cpu", x)));
  // Beside a GPU, CPU attention is its own queue.
  TinyCase g;
  g.pol.cpu_attention = true;
  const Placement xg = normalize_policy(g.pol, g.hw).placement;
  const CostModel mg = build_cost_model(g.shape, g.hw, g.work, g.pol);
  EXPECT_REL(mg.busy_seconds(xg).at("cpu attention"),
             steps * L * term(mg.decode_layer, "attention (cpu)", xg));
  EXPECT_GT(mg.busy_seconds(xg).at("cpu->gpu"), 0);
}

// FlexGen's formulas for the terms both models share (experimental/
// cost_model.py: compp, ctogp, ctogg, dtocp weight part), on OPT-30B with
// FlexGen's T4 constants: ours must give the same seconds.
TEST(PolicyCostModel, AgreesWithFlexGenFormulasOnOpt30b) {
  const ModelShape shape = find_model_preset("opt-30b");
  const HardwareProfile hw = find_hardware_profile("t4-flexgen");
  Policy p;
  p.gpu_batch_size = 48;
  p.num_gpu_batches = 3;
  p.placement[Share::kWGpu] = 0.2;
  p.placement[Share::kWCpu] = 0.7;  // 10% on disk to exercise disk->cpu
  p.placement[Share::kKvGpu] = 0;
  p.placement[Share::kKvCpu] = 1;
  p.placement[Share::kActGpu] = 0;
  p.placement[Share::kActCpu] = 1;
  p.cpu_attention = true;
  const CostModel m = build_cost_model(shape, hw, {512, 32}, p);
  const Placement x = p.placement;
  // FlexGen's bandwidths, as the profile stores them (whole bytes per
  // second: 12.89 * 2^30 rounded; checked against FlexGen's numbers in
  // test_yaml.cpp).
  const double ctog = hw.cpu_to_gpu, dtoc = hw.disk_to_cpu, T = 1e12;
  const double s = 512, bls = 144, h1 = 7168, h2 = 4 * 7168;
  const double wi = 8 * h1 * h1 + 4 * h1 * h2;
  const double compp =
      bls * (8 * s * h1 * h1 + 4 * s * h1 * h2) / (21.24 * T) + 4 * bls * s * s * h1 / (9.97 * T);
  const double ctogp = (wi * 0.8 + 2 * s * h1 * bls * 1.0) / ctog;
  const double dtoc_w = wi * 0.1 / dtoc;
  const double ctogg_w = wi * 0.8 / ctog;
  EXPECT_REL(term(m.prefill_layer, "gemm", x) + term(m.prefill_layer, "attention", x), compp);
  EXPECT_REL(term(m.prefill_layer, "cpu->gpu", x), ctogp);
  EXPECT_REL(term(m.prefill_layer, "disk->cpu", x), dtoc_w);
  // Decode cpu->gpu: FlexGen's weights + hidden, plus our q and attention output.
  EXPECT_REL(term(m.decode_layer, "cpu->gpu", x), ctogg_w + (2 * h1 * bls + 2 * h1 * bls) / ctog);
  // CPU attention at FlexGen's fitted rate with its small-batch correction.
  const double lb = std::log2(64.0 / 48);
  const double cpu_flops = 0.0123 * T * (1 - 0.0328 * lb);
  EXPECT_REL(term(m.decode_layer, "attention (cpu)", x), 4 * bls * (s + 16) * h1 / cpu_flops);
}

TEST(PolicyCostModel, RejectsBadWorkloads) {
  TinyCase t;
  EXPECT_THROW(build_cost_model(t.shape, t.hw, {0, 4}, t.pol), Error);
  EXPECT_THROW(build_cost_model(t.shape, t.hw, {8, 0}, t.pol), Error);
  Workload no_kv_bytes = t.work;
  no_kv_bytes.kv_elem_bytes = 0;
  EXPECT_THROW(build_cost_model(t.shape, t.hw, no_kv_bytes, t.pol), Error);
  Workload no_act_bytes = t.work;
  no_act_bytes.act_elem_bytes = 0;
  EXPECT_THROW(build_cost_model(t.shape, t.hw, no_act_bytes, t.pol), Error);
  ModelShape ctx = t.shape;
  ctx.max_context = 10;
  try {
    build_cost_model(ctx, t.hw, {8, 4}, t.pol);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("10 tokens of context"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
