// The run report: its JSON names and table, the warning when the measured
// total misses the prediction, speculation's measured rates and a draft
// model's time.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "generate/generate_test_util.h"
#include "generate/report.h"

namespace strata {
namespace {

using test::read_text;
using test::ScratchDir;

std::string printed(const RunReport& r) {
  std::FILE* f = std::tmpfile();
  r.print(f);
  std::rewind(f);
  char buf[4096] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  return std::string(buf, n);
}

TEST(Report, JsonHasTheStableNames) {
  RunReport r;
  r.model = "m.gguf";
  r.policy = {{"gpu_batch_size", 8}};
  r.hardware = "cpu";
  r.n_prompts = 4;
  r.n_sequences = 4;
  r.total_s = 2.0;
  r.engine.prompt_tokens = 100;
  r.engine.generated_tokens = 44;
  r.engine.prefill_s = 0.5;
  r.engine.decode_s = 1.0;
  r.engine.links["disk->cpu"] = {{2'000'000'000, 0.5}, {}};
  r.engine.links["cpu->gpu"] = {{0, 0.0}, {}};
  r.engine.peak_bytes["cpu"] = 1 << 20;
  r.engine.queue_busy_s["compute"] = 1.2;
  const auto j = r.to_json();
  for (const char* k :
       {"model", "policy", "hardware", "n_prompts", "prompt_tokens", "generated_tokens",
        "prefill_s", "decode_s", "total_s", "prefill_tokens_per_s", "decode_tokens_per_s",
        "total_tokens_per_s", "links", "peak_bytes", "queue_busy"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_FALSE(j.contains("predicted"));  // not known: left out
  EXPECT_DOUBLE_EQ(j["prefill_tokens_per_s"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(j["decode_tokens_per_s"].get<double>(), 40.0);  // (44 - 4) / 1.0
  EXPECT_DOUBLE_EQ(j["total_tokens_per_s"].get<double>(), 22.0);
  EXPECT_DOUBLE_EQ(j["links"]["disk->cpu"]["gb_per_s"].get<double>(), 4.0);
  EXPECT_FALSE(j["links"]["cpu->gpu"].contains("gb_per_s"));  // no time: no rate
  EXPECT_DOUBLE_EQ(j["queue_busy"]["compute"].get<double>(), 0.8);
  EXPECT_EQ(j["peak_bytes"]["cpu"], 1 << 20);
  PredictedThroughput pred;
  pred.prefill_tokens_per_s = 1;
  pred.decode_tokens_per_s = 2;
  pred.total_tokens_per_s = 3;
  r.predicted = pred;
  EXPECT_DOUBLE_EQ(r.to_json()["predicted"]["decode_tokens_per_s"].get<double>(), 2.0);

  ScratchDir dir;
  r.write_json(dir.file("r.json"));
  EXPECT_EQ(nlohmann::ordered_json::parse(read_text(dir.file("r.json"))), r.to_json());
  const std::string table = printed(r);
  EXPECT_NE(table.find("decode"), std::string::npos);
  EXPECT_NE(table.find("40.0 tok/s"), std::string::npos) << table;
  EXPECT_NE(table.find("4.00 GB/s"), std::string::npos) << table;
}

// A link's bytes and busy time by what moved on it: in the JSON, and as rows
// under the link's when more than one kind did; a block's share (the stats
// since an earlier snapshot) subtracts them too.
TEST(Report, LinksByKind) {
  RunReport r;
  r.total_s = 2.0;
  EngineStats::Link& disk = r.engine.links["disk->cpu"];
  disk.bytes = 3'000'000'000;
  disk.busy_s = 2.0;
  disk.by_kind["weights"] = {2'000'000'000, 0.5};
  disk.by_kind["kv"] = {1'000'000'000, 1.5};
  EngineStats::Link& store = r.engine.links["cpu->disk"];
  store.bytes = 1000;
  store.busy_s = 0.1;
  store.by_kind["kv"] = {1000, 0.1};
  const auto j = r.to_json();
  EXPECT_DOUBLE_EQ(j["links"]["disk->cpu"]["by_kind"]["weights"]["gb_per_s"].get<double>(), 4.0);
  EXPECT_EQ(j["links"]["disk->cpu"]["by_kind"]["kv"]["bytes"].get<uint64_t>(), 1'000'000'000u);
  EXPECT_DOUBLE_EQ(j["links"]["disk->cpu"]["by_kind"]["kv"]["busy_s"].get<double>(), 1.5);
  const std::string table = printed(r);
  EXPECT_NE(table.find("    weights "), std::string::npos) << table;
  EXPECT_NE(table.find("    kv "), std::string::npos) << table;
  EXPECT_NE(table.find("0.67 GB/s"), std::string::npos) << table;  // the KV's rate
  // One kind on a link (cpu->disk): no rows of its own; disk->cpu's kv row only.
  const size_t kv_row = table.find("    kv ");
  EXPECT_EQ(table.find("    kv ", kv_row + 1), std::string::npos) << table;
  EXPECT_GT(kv_row, table.find("link disk->cpu")) << table;

  EngineStats before;
  before.links["disk->cpu"].bytes = 1'000'000'000;
  before.links["disk->cpu"].busy_s = 1.0;
  before.links["disk->cpu"].by_kind["kv"] = {400'000'000, 0.9};
  const EngineStats d = stats_since(r.engine, before);
  EXPECT_EQ(d.links.at("disk->cpu").by_kind.at("kv").bytes, 600'000'000u);
  EXPECT_NEAR(d.links.at("disk->cpu").by_kind.at("kv").busy_s, 0.6, 1e-12);
  EXPECT_EQ(d.links.at("disk->cpu").by_kind.at("weights").bytes, 2'000'000'000u);
}

TEST(Report, SaysSoWhenTheMeasuredTotalMissesThePredictionByMoreThanAQuarter) {
  RunReport r;
  r.engine.generated_tokens = 100;
  r.total_s = 2.0;  // 50 tok/s measured
  PredictedThroughput pred;
  pred.workload = {{"hardware", "this-machine"}};
  r.predicted = pred;
  for (const auto& [predicted, warns] :
       {std::pair{40.0, false}, {62.5, false}, {67.0, true}, {39.0, true}, {100.0, true}}) {
    r.predicted->total_tokens_per_s = predicted;
    const double error = 50.0 / predicted - 1;
    EXPECT_DOUBLE_EQ(*r.prediction_error(), error);
    EXPECT_DOUBLE_EQ(r.to_json()["predicted"]["total_error"].get<double>(), error);
    const std::string table = printed(r);
    EXPECT_EQ(table.find("  prediction ") != std::string::npos, warns) << predicted << "\n"
                                                                       << table;
    if (warns) {
      EXPECT_NE(table.find(error > 0 ? "above" : "below"), std::string::npos) << table;
      EXPECT_NE(table.find("(this-machine)"), std::string::npos) << table;
    }
  }
  r.total_s = 0;  // nothing measured: no error, no line
  EXPECT_FALSE(r.prediction_error());
  EXPECT_EQ(printed(r).find("  prediction "), std::string::npos);
}

// The warning names the link or queue whose busy time missed its
// prediction by the most seconds, in the total's direction and beyond the
// same tolerance, among those busy for at least half the run.
TEST(Report, NamesTheBusyTimeThatMissedItsPredictionMost) {
  RunReport r;
  r.engine.generated_tokens = 100;
  r.total_s = 2.0;  // 50 tok/s measured
  r.engine.blocks = 2;
  PredictedThroughput pred;
  pred.total_tokens_per_s = 100;  // measured 50 % below
  pred.block_busy_s = {{"disk->cpu", 0.5}, {"compute", 0.6}, {"cpu->disk", 0.01}, {"cpu->gpu", 1}};
  r.predicted = pred;
  r.engine.links["disk->cpu"] = {{1'000'000, 1.6}, {}};  // 1.0 s predicted: 0.6 s more
  r.engine.links["cpu->disk"] = {{1'000, 0.5}, {}};      // 0.02 s predicted: 25x, 0.48 s more
  r.engine.queue_busy_s["compute"] = 1.3;          // 1.2 s predicted: within a quarter
  // ("cpu->gpu" is not measured in this run: left out.)
  EXPECT_EQ(r.busy_miss(false), " (disk->cpu was busy 1.60 s, 1.60x the 1.00 s predicted)");
  EXPECT_NE(r.prediction_warning().find("50% below the predicted 100.0 (disk->cpu was busy"),
            std::string::npos)
      << r.prediction_warning();
  r.engine.links["disk->cpu"].busy_s = 1.2;  // within a quarter
  // cpu->disk: 25x its prediction, but busy a quarter of the 2 s run.
  EXPECT_EQ(r.busy_miss(false), "");
  r.engine.links["cpu->disk"].busy_s = 1.0;  // half the run: it counts
  EXPECT_EQ(r.busy_miss(false), " (cpu->disk was busy 1.00 s, 50.00x the 0.02 s predicted)");
  r.engine.links["cpu->disk"].busy_s = 0.02;
  EXPECT_EQ(r.busy_miss(false), "");  // none beyond the tolerance
  EXPECT_NE(r.prediction_warning().find("50% below the predicted 100.0: if the hardware"),
            std::string::npos)
      << r.prediction_warning();
  // Faster than predicted (3.33 s): the time that fell short most, among
  // those predicted busy for half of it.
  r.predicted->total_tokens_per_s = 30;
  r.engine.queue_busy_s["compute"] = 0.5;
  EXPECT_EQ(r.busy_miss(true), "");  // compute: 1.2 s predicted
  r.predicted->block_busy_s["compute"] = 1.0;
  EXPECT_EQ(r.busy_miss(true), " (compute was busy 0.50 s, 0.25x the 2.00 s predicted)");
  EXPECT_NE(r.prediction_warning().find("above the predicted 30.0 (compute was busy 0.50 s"),
            std::string::npos)
      << r.prediction_warning();
  r.engine.blocks = 0;  // no block run: nothing to compare
  EXPECT_EQ(r.busy_miss(true), "");
  EXPECT_DOUBLE_EQ(r.to_json()["predicted"]["block_busy_s"]["disk->cpu"].get<double>(), 0.5);
}

// The rates the cost model is given for a speculative run: per sequence
// and decode step, rows computed and tokens kept.
TEST(Report, MeasuredSpeculationRates) {
  EngineStats s;
  s.generated_tokens = 4 + 40;  // 4 sequences: a first token each, then 40 in decode
  s.drafted_tokens = 30;
  s.accepted_tokens = 20;  // 20 sequence-steps kept 40 tokens, fed 20 + 30 rows
  const SpeculationRates r = measured_speculation(s, 4);
  EXPECT_DOUBLE_EQ(r.rows, 50.0 / 20);
  EXPECT_DOUBLE_EQ(r.tokens, 40.0 / 20);
  EXPECT_EQ(r.draft_step_s, 0);
  s.decode_steps = 8;  // a draft model's 2 s over 8 decode steps
  EXPECT_DOUBLE_EQ(measured_speculation(s, 4, 2.0).draft_step_s, 0.25);
  s.drafted_tokens = s.accepted_tokens = 0;
  EXPECT_EQ(measured_speculation(s, 4).rows, 1);
  EXPECT_EQ(measured_speculation(s, 4).tokens, 1);
}

// The rates the cost model is given for shared prompt prefixes: per
// sequence the tokens its prefill did not compute (taken from a shared
// prefix, or computed by the prefix step), the tokens of one prefix step,
// the prefix steps per block.
TEST(Report, MeasuredSharingRates) {
  EngineStats s;
  s.blocks = 4;
  EXPECT_EQ(measured_sharing(s, 16).prefix_steps, 0);  // no prefix step: nothing shared
  s.prefix_steps = 2;
  s.prefix_step_tokens = 64;     // two prefixes of 32, one per prefix step
  s.reused_prompt_tokens = 192;  // six other members took 32 each
  const SharingRates r = measured_sharing(s, 16);
  EXPECT_DOUBLE_EQ(r.shared_tokens, (192.0 + 64) / 16);
  EXPECT_DOUBLE_EQ(r.prefix_step_tokens, 32);
  EXPECT_DOUBLE_EQ(r.prefix_steps, 0.5);
}

// A draft model's seconds count in the decode time and its rate.
TEST(Report, DraftModelTimeIsDecodeTime) {
  RunReport r;
  r.n_sequences = 4;
  r.engine.generated_tokens = 4 + 60;
  r.engine.decode_s = 2.0;
  r.total_s = 4.0;
  const auto without = r.to_json();
  EXPECT_DOUBLE_EQ(without["decode_tokens_per_s"].get<double>(), 30.0);
  EXPECT_FALSE(without.contains("draft_s"));
  r.draft_s = 1.0;
  const auto with = r.to_json();
  EXPECT_DOUBLE_EQ(with["decode_s"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(with["draft_s"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(with["decode_tokens_per_s"].get<double>(), 20.0);
}

}  // namespace
}  // namespace strata
