// The end-of-run report of generate and bench: what ran, how many tokens,
// how long, how fast, and what the engine measured about data movement and
// memory. Printed as a table on stdout and written as JSON (--report) with
// the stable top-level names of docs/DESIGN.md §8:
//   model, policy, hardware, n_prompts, prompt_tokens, generated_tokens,
//   prefill_s, decode_s (with draft_s, a draft model's share, when one ran),
//   total_s, prefill_tokens_per_s, decode_tokens_per_s,
//   total_tokens_per_s, decode_steps, prefill_tokens_computed,
//   prefix_reused_tokens, kv_shared_bytes, drafted_tokens, accepted_tokens,
//   links {name: {bytes, busy_s, gb_per_s}},
//   peak_bytes {tier: bytes}, queue_busy {queue: share}, predicted {...}
//   (with total_error, measured over predicted total less 1, and
//   block_busy_s {link or queue: seconds busy per block}).
// Throughputs follow FlexGen: prefill = prompt tokens / prefill time (with
// shared prefixes, tokens submitted: those computed are counted apart); decode =
// tokens sampled after decode steps (generated minus the one token per
// sequence sampled from the prefill logits) / decode time; total = generated
// tokens / total wall time of the generation. A rate whose time is zero, and
// anything the engine did not measure, is left out rather than invented.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "generate/engine.h"

namespace strata {

// The cost model's prediction for the same run, when a policy was planned:
// the throughputs, and what the model says about one block (seconds of
// prefill and decode, the binding term, the seconds of each term of one
// layer step) for the workload it was given.
struct PredictedThroughput {
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
  double total_tokens_per_s = 0;
  std::string bound;                   // "decode: disk->cpu"
  double prefill_s = 0, decode_s = 0;  // one block
  std::map<std::string, double> prefill_layer_terms, decode_layer_terms;
  // Seconds each link and queue ("disk->cpu", "compute", ...) is busy in one
  // block (policy/cost_model.h: CostModel::busy_seconds).
  std::map<std::string, double> block_busy_s;
  nlohmann::ordered_json workload;  // prompt_len, gen_len, block_size, hardware
};

struct RunReport {
  std::string model;              // the model path
  nlohmann::ordered_json policy;  // placement / batch sizes / dtypes in use (object)
  std::string hardware;           // the machine, in words ("" when unknown)
  int64_t n_prompts = 0;          // prompts computed in this run
  int64_t n_prompts_resumed = 0;  // prompts taken from a previous, interrupted run
  int64_t n_sequences = 0;        // sequences prefilled (one first token each)
  double total_s = 0;             // wall time of the generation loop
  EngineStats engine;             // measured by the engine
  // Speculation with a draft model: the seconds it computed, between the
  // engine's decode steps; counted in the decode time (decode_s()).
  double draft_s = 0;
  std::optional<PredictedThroughput> predicted;
  nlohmann::ordered_json
      extra;  // further top-level fields, after the stable ones (bench: workload, repeats)

  // Measured total throughput over the predicted one, less 1 (+0.3: 30%
  // faster than predicted); empty without a prediction or a measured total.
  std::optional<double> prediction_error() const;
  // One line when |prediction_error()| exceeds kPredictionTolerance, naming
  // both rates, the busy time that missed its prediction most (busy_miss)
  // and suggesting a new profile; empty otherwise.
  std::string prediction_warning() const;
  // " (disk->cpu was busy 2.96 s, 2.14x the 1.38 s predicted)": of the
  // links and queues the prediction gives busy times for (block_busy_s,
  // times the blocks run), the one whose measured time is the most seconds
  // off its prediction in the total's direction (longer when `faster` is
  // false) among those off by more than kPredictionTolerance and busy for
  // at least kPaceShare of the run (measured; predicted when `faster`);
  // empty when none is.
  std::string busy_miss(bool faster) const;
  static constexpr double kPredictionTolerance = 0.25;
  static constexpr double kPaceShare = 0.5;
  // The decode time: the engine's decode steps and the draft model's work.
  double decode_s() const { return engine.decode_s + draft_s; }

  nlohmann::ordered_json to_json() const;
  // The readable table.
  void print(std::FILE* out) const;
  // Writes to_json() to `path` (tmp + rename); throws Error naming the path.
  void write_json(const std::string& path) const;
};

// Speculative decoding as measured, per sequence and decode step: the rows
// computed (1 + draft tokens fed) and the tokens kept (1 + those accepted);
// 1 and 1 without. `n_sequences`: sequences prefilled (a first token each).
// With a draft model, `draft_s` (its seconds) gives its seconds per decode
// step of a block.
struct SpeculationRates {
  double rows = 1, tokens = 1;
  double draft_step_s = 0;
};
SpeculationRates measured_speculation(const EngineStats& s, int64_t n_sequences,
                                      double draft_s = 0);

// Shared prompt prefixes as measured, in the cost model's terms
// (policy/cost_model.h, Workload): per sequence the prompt tokens its
// prefill did not compute, the tokens of one prefix step, and the prefix
// steps per block; all 0 without sharing. `kv`: the KV pages every block
// stores once (planned; not measured).
struct SharingRates {
  double shared_tokens = 0, prefix_step_tokens = 0, prefix_steps = 0;
  PlanSharing kv;
};
SharingRates measured_sharing(const EngineStats& s, int64_t n_sequences);

// The work done between two stats() snapshots (peak_bytes: the later peaks).
EngineStats stats_since(const EngineStats& now, const EngineStats& before);

// "AMD EPYC 9R14 (2 threads)" from /proc/cpuinfo, or "" when unknown.
std::string describe_cpu(int threads);

}  // namespace strata
