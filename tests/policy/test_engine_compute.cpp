// The engine's measured compute (policy/engine_compute.h): interpolation,
// validation, JSON, and the cost model's compute terms on a CPU device when
// it is given, against formulas written out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "policy/cost_model.h"
#include "policy/engine_compute.h"
#include "policy/policy_fixtures.h"

namespace strata {
namespace {

constexpr double kRel = 1e-12;
#define EXPECT_REL(actual, expected) \
  EXPECT_NEAR((actual), (expected), kRel* std::max(1e-9, std::fabs(expected))) << #actual

EngineCompute table() {
  EngineCompute c;
  c.key = "test";
  c.decode_rows = {1, 2, 4, 8};
  c.decode_layer_s = {1e-3, 1.5e-3, 2e-3, 4e-3};
  c.decode_layer_cold_s = {1.2e-3, 2e-3, 2.5e-3, 4e-3};
  c.decode_ctx = 16;
  c.decode_key_s = 1e-7;
  c.decode_shared_key_s = 3e-8;
  c.prefill_tokens = {16, 64, 256};
  c.prefill_layer_s = {2e-3, 5e-3, 17e-3};
  c.prefill_seq = 16;
  c.prefill_pair_s = 1e-8;
  c.head_rows = {1, 2, 4, 8};
  c.head_s = {3e-3, 3.2e-3, 3.6e-3, 4.4e-3};
  c.head_cold_s = {4e-3, 4.4e-3, 5e-3, 6e-3};
  return c;
}

double term(const StepCost& st, const std::string& name, const Placement& x) {
  for (const CostTerm& t : st.terms) {
    if (t.name == name) return t.seconds(x);
  }
  ADD_FAILURE() << "no term " << name;
  return -1;
}

TEST(EngineCompute, InterpolatesThroughThePointsAndExtendsTheEndSegments) {
  const std::vector<double> x{1, 2, 4, 8}, y{1, 1.5, 2, 4};
  for (size_t i = 0; i < x.size(); ++i) EXPECT_REL(interpolate(x, y, x[i]), y[i]);
  EXPECT_REL(interpolate(x, y, 3), 1.75);
  EXPECT_REL(interpolate(x, y, 6), 3);
  EXPECT_REL(interpolate(x, y, 16), 8);  // along the last segment (slope 0.5)
  // Below the first point along the first segment (slope 0.5), but never
  // below the proportional share of the first point.
  const std::vector<double> px{16, 64}, py{2, 5};
  EXPECT_REL(interpolate(px, py, 8), 2 - 8 * (3.0 / 48));
  EXPECT_REL(interpolate({16, 64}, {2, 100}, 8), 1);  // the proportional floor
  EXPECT_REL(interpolate({4}, {2}, 2), 1);            // one point: proportional
}

TEST(EngineCompute, LayerAndHeadFollowTheModelOfTheHeader) {
  const EngineCompute c = table();
  EXPECT_REL(c.decode_layer(4, 16), 2e-3);
  EXPECT_REL(c.decode_layer(4, 8), 2e-3);  // shorter context: not below the point
  EXPECT_REL(c.decode_layer(6, 1016), 3e-3 + 6 * 1000 * 1e-7);
  EXPECT_REL(c.prefill_layer(2, 32), 5e-3 + 2 * 32 * 32 * 1e-8);
  EXPECT_REL(c.head(3), 3.4e-3);
  // k micro-batches: the first out of the caches, the others in them.
  EXPECT_REL(c.decode_layers(4, 1), 2.5e-3);
  EXPECT_REL(c.decode_layers(3, 3), 2.25e-3 + 2 * 1.75e-3);
  EXPECT_REL(c.heads(2, 4), 4.4e-3 + 3 * 3.2e-3);
  EXPECT_REL(c.heads(2, 0), 0);
}

TEST(EngineCompute, JsonRoundTripsAndBadTablesAreRefused) {
  const EngineCompute c = table();
  const EngineCompute back = engine_compute_from_json(to_json(c), "t.json");
  EXPECT_EQ(back.key, c.key);
  EXPECT_EQ(back.decode_layer_s, c.decode_layer_s);
  EXPECT_EQ(back.prefill_tokens, c.prefill_tokens);
  EXPECT_EQ(back.head_s, c.head_s);
  EXPECT_EQ(back.decode_layer_cold_s, c.decode_layer_cold_s);
  EXPECT_EQ(back.head_cold_s, c.head_cold_s);
  EXPECT_EQ(back.decode_key_s, c.decode_key_s);
  EXPECT_EQ(back.decode_shared_key_s, c.decode_shared_key_s);
  EXPECT_EQ(back.prefill_pair_s, c.prefill_pair_s);

  nlohmann::json j = to_json(c);
  j.erase("head_s");
  EXPECT_THROW(engine_compute_from_json(j, "t.json"), Error);
  j = to_json(c);
  j["head_cold_s"] = {4e-3, 4.4e-3, 5e-3};
  EXPECT_THROW(engine_compute_from_json(j, "t.json"), Error);
  j = to_json(c);
  j["decode_rows"] = {1, 4, 2, 8};
  try {
    engine_compute_from_json(j, "t.json");
    FAIL() << "unordered points accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.json: decode"), std::string::npos) << e.what();
  }
  j = to_json(c);
  j["prefill_layer_s"] = {2e-3, -1.0, 17e-3};
  EXPECT_THROW(engine_compute_from_json(j, "t.json"), Error);
  j = to_json(c);
  j["decode_key_s"] = -1e-9;
  EXPECT_THROW(engine_compute_from_json(j, "t.json"), Error);
  j = to_json(c);
  j["decode_shared_key_s"] = -1e-9;
  EXPECT_THROW(engine_compute_from_json(j, "t.json"), Error);
  j.erase("decode_shared_key_s");
  EXPECT_THROW(engine_compute_from_json(j, "t.json"), Error);

  // The measurements beside a weight load are optional; when there, whole.
  EXPECT_FALSE(to_json(c).contains("decode_layer_streamed_s"));
  EngineCompute loaded = c;
  loaded.decode_layer_streamed_s = {1.5e-3, 2.4e-3, 3e-3, 5e-3};
  const EngineCompute lb = engine_compute_from_json(to_json(loaded), "t.json");
  EXPECT_EQ(lb.decode_layer_streamed_s, loaded.decode_layer_streamed_s);
  j = to_json(loaded);
  j["decode_layer_streamed_s"] = {1.5e-3, 2.4e-3, 3e-3};
  EXPECT_THROW(engine_compute_from_json(j, "t.json"), Error);
}

// tiny_shape (policy_fixtures.h) on the CPU device, 2 x 3 sequences, prompt
// 40, 8 new tokens: every compute term from the table.
TEST(EngineCompute, CostModelOnTheCpuDeviceUsesTheMeasuredTimes) {
  const EngineCompute c = table();
  const ModelShape shape = test::tiny_shape();
  const HardwareProfile hw = test::tiny_cpu();
  const Workload work{40, 8};
  Policy pol;
  pol.gpu_batch_size = 2;
  pol.num_gpu_batches = 3;
  pol.placement = Placement{};
  const CostModel m = build_cost_model(shape, hw, work, pol, &c);
  EXPECT_TRUE(m.compute_measured);
  const Placement x = normalize_policy(pol, hw).placement;
  const double k = 3, B = 6, s = 40, ctx = 40 + 8 / 2.0;
  // Prefill: P(g s) per micro-batch, the square part per sequence.
  EXPECT_REL(term(m.prefill_layer, "layer", x), k * (5e-3 + (80 - 64) * (12e-3 / 192)));
  EXPECT_REL(term(m.prefill_layer, "attention", x), B * s * s * 1e-8);
  // Decode: D_cold(g) for the first micro-batch, D(g) for the others, the
  // keys beyond 16 per sequence.
  EXPECT_REL(term(m.decode_layer, "layer", x), 2e-3 + (k - 1) * 1.5e-3);
  EXPECT_REL(term(m.decode_layer, "attention", x), B * (ctx - 16) * 1e-7);
  // The head step waits for its weights' disk share, then computes (no
  // overlap): the sum.
  EXPECT_REL(term(m.decode_head, "layer", x), 4.4e-3 + (k - 1) * 3.2e-3);
  EXPECT_REL(term(m.prefill_head, "layer", x), 4.4e-3 + (k - 1) * 3.2e-3);
  Placement on_disk = x;
  on_disk[Share::kWCpu] = 0.5;  // 1 - 0.5 exactly on disk
  EXPECT_GT(term(m.decode_head, "disk->cpu", on_disk), 0);
  EXPECT_REL(m.decode_head.seconds(on_disk),
             term(m.decode_head, "disk->cpu", on_disk) + term(m.decode_head, "layer", on_disk));
  // Everything in RAM: the step is its compute.
  EXPECT_REL(m.decode_layer.seconds(x), 2e-3 + (k - 1) * 1.5e-3 + B * (ctx - 16) * 1e-7);
  EXPECT_EQ(m.decode_layer.bound_label(m.decode_layer.binding(x), x), "compute");

  // Without the table the same run uses the profile's rates.
  const CostModel rates = build_cost_model(shape, hw, work, pol);
  EXPECT_FALSE(rates.compute_measured);
  EXPECT_GT(term(rates.decode_layer, "gemm", x), 0);
}

// Shared prompt prefixes: decode attends a sequence's shared keys at the
// measured shared rate, its own beyond decode_ctx at the other; with a
// micro-batch of one sequence, or sparse attention, nothing is shared.
TEST(EngineCompute, SharedKeysAreAttendedAtTheirOwnRate) {
  const EngineCompute c = table();
  const ModelShape shape = test::tiny_shape();
  const HardwareProfile hw = test::tiny_cpu();
  Workload work{40, 8};
  work.shared_tokens = 16;
  Policy pol;
  pol.gpu_batch_size = 2;
  pol.num_gpu_batches = 3;
  pol.placement = Placement{};
  const Placement x = normalize_policy(pol, hw).placement;
  const double B = 6, ctx = 40 + 8 / 2.0;
  const CostModel m = build_cost_model(shape, hw, work, pol, &c);
  EXPECT_REL(term(m.decode_layer, "attention", x), B * ((ctx - 16 - 16) * 1e-7 + 16 * 3e-8));
  pol.gpu_batch_size = 1;
  pol.num_gpu_batches = 6;
  const CostModel alone = build_cost_model(shape, hw, work, pol, &c);
  EXPECT_REL(term(alone.decode_layer, "attention", normalize_policy(pol, hw).placement),
             B * (ctx - 16) * 1e-7);
}

// Decode beside a weight load: the compute it slows is added for a layer's
// disk share.
TEST(EngineCompute, TheComputeAWeightLoadSlowsIsAddedForTheDiskShare) {
  EngineCompute c = table();
  c.decode_layer_streamed_s = {1.5e-3, 2.4e-3, 3e-3, 5e-3};
  EXPECT_REL(c.decode_stream_extra(2), 0.4e-3);
  EXPECT_REL(c.decode_stream_extra(6), 0.75e-3);  // half way to 8: 4e-3 against 3.25e-3
  EXPECT_REL(table().decode_stream_extra(2), 0);  // not measured

  const ModelShape shape = test::tiny_shape();
  const HardwareProfile hw = test::tiny_cpu();
  Policy pol;
  pol.gpu_batch_size = 2;
  pol.num_gpu_batches = 3;
  pol.placement = Placement{};
  const CostModel m = build_cost_model(shape, hw, {40, 8}, pol, &c);
  Placement x = normalize_policy(pol, hw).placement;
  x[Share::kWCpu] = 0.5;  // half the weights on disk
  EXPECT_REL(term(m.decode_layer, "layer", x), 2e-3 + 2 * 1.5e-3 + 0.5 * 0.4e-3);
  // All in RAM: nothing loads, nothing slows.
  x[Share::kWCpu] = 1;
  EXPECT_REL(term(m.decode_layer, "layer", x), 2e-3 + 2 * 1.5e-3);
  // Not measured: no slowdown.
  const EngineCompute plain_table = table();
  const CostModel plain = build_cost_model(shape, hw, {40, 8}, pol, &plain_table);
  x[Share::kWCpu] = 0.5;
  EXPECT_REL(term(plain.decode_layer, "layer", x), 2e-3 + 2 * 1.5e-3);
}

TEST(EngineCompute, ADeviceWithMemoryOfItsOwnKeepsTheProfileRates) {
  const EngineCompute c = table();
  Policy pol;
  pol.gpu_batch_size = 2;
  const CostModel with = build_cost_model(test::tiny_shape(), test::tiny_gpu(), {8, 4}, pol, &c);
  const CostModel without = build_cost_model(test::tiny_shape(), test::tiny_gpu(), {8, 4}, pol);
  EXPECT_FALSE(with.compute_measured);
  const Placement x = pol.placement;
  EXPECT_EQ(with.decode_layer.seconds(x), without.decode_layer.seconds(x));
  EXPECT_EQ(with.prefill_layer.seconds(x), without.prefill_layer.seconds(x));
}

}  // namespace
}  // namespace strata
