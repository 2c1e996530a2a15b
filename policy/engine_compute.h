// What the engine's compute costs for one model on one machine, measured by
// running the engine's own forward (plan/compute_profile.h measures it): the
// seconds of one transformer layer and of the output head as functions of
// the micro-batch, in the dtypes the run uses (weights as the engine holds
// them, compute, KV). With it the cost model's compute terms on a CPU device
// are these times instead of FLOPs over a profile's GEMM and attention rates,
// which were measured on other shapes and dtypes and miss the per-layer work
// a FLOP count does not see (norms, RoPE, activations, KV appends, the
// threads' start and join per op).
//
// The model of a layer, fitted to the measured points:
//   decode, g sequences at ctx keys each (one new token):
//     layer(g, ctx) = D(g) + g * (ctx - decode_ctx) * decode_key_s
//   of which `shared` keys are on pages the micro-batch's sequences share
//   (attended as one product for them, kernels/cpu/shared_pages.h):
//     layer(g, ctx) = D(g) + g * ((ctx - shared - decode_ctx) * decode_key_s
//                                 + shared * decode_shared_key_s)
//   prefill, g sequences of s new tokens each:
//     layer(g, s)   = P(g * s) + g * s * s * prefill_pair_s
//   head (the embeddings of the new tokens and the logits of one row per
//   sequence):   head(g) = H(g)
// D and H are measured twice: with the weights in the caches (the same
// layer run again) and out of them (the caches evicted before each run,
// as the other layers evict them in the engine). The engine runs a layer's
// k micro-batches one after the other: the first finds the weights out of
// the caches, the others in them (when they fit):
//   decode_layers(g, k) = D_cold(g) + (k - 1) * D(g), heads(g, k) alike.
// The slope per key is measured cold: each micro-batch has KV of its own.
// P is measured cold too: the engine's prefill runs a layer after every
// other layer has passed through the caches (the demo model, Q4_1 weights
// as q4a32: P(16) 2.08 ms cold against 1.70 warm, P(1024) 84.1 against
// 81.3; a prefill of 8 x 256 tokens predicted 306 tok/s against 322 warm,
// measured 290-295).
// D_stream(g) is D_cold(g) with a read of one layer's weights from disk in
// flight, as the next layer's load is in the engine when weights stream
// from disk: on a machine with few cores the disk I/O layer's thread and
// the kernel's completions take time from the compute threads. The cost
// model adds decode_stream_extra(g) = D_stream(g) - D_cold(g) to a layer's
// compute for the share of its weights read from disk.
// D, P and H are piecewise linear through the measured points (beyond the
// last point along the last segment; below the first along the first
// segment, but never below the proportional share of the first point).
//
// Invariant (validate()): the tables are non-empty, of equal lengths where
// paired, with increasing positive abscissae and positive finite times; the
// slopes are finite and not negative.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

struct EngineCompute {
  // What was measured: model shape, dtypes and threads, as one string; a
  // cached measurement is used only for the same key.
  std::string key;

  std::vector<double> decode_rows;          // g
  std::vector<double> decode_layer_s;       // D(g): one layer, g sequences at decode_ctx keys
  std::vector<double> decode_layer_cold_s;  // D_cold(g): the same out of the caches
  // D_stream(g): cold, beside a layer's weight load (empty: not measured)
  std::vector<double> decode_layer_streamed_s;
  double decode_ctx = 0;
  double decode_key_s = 0;  // per sequence and key beyond decode_ctx
  // per sequence and key on pages shared with the micro-batch's others
  // (measured with kSlopeRows sequences sharing all but decode_ctx keys)
  double decode_shared_key_s = 0;

  std::vector<double> prefill_tokens;   // g * s, measured in sequences of prefill_seq tokens
  std::vector<double> prefill_layer_s;  // P: the quadratic part taken out
  double prefill_seq = 0;
  double prefill_pair_s = 0;  // per sequence and (new token, key) pair

  std::vector<double> head_rows;    // g
  std::vector<double> head_s;       // H(g)
  std::vector<double> head_cold_s;  // H_cold(g)

  double decode_layer(double g, double ctx) const;
  double prefill_layer(double g, double s) const;
  double head(double g) const;
  // k micro-batches of g sequences one after the other (above), at
  // decode_ctx keys.
  double decode_layers(double g, double k) const;
  double heads(double g, double k) const;
  // Seconds a weight load from disk adds to a decode layer of g sequences
  // (0 when not measured).
  double decode_stream_extra(double g) const;

  // Throws Error naming `source` when an invariant above does not hold.
  void validate(const std::string& source) const;
};

// Piecewise linear through (x[i], y[i]) (x increasing), extended as above.
double interpolate(const std::vector<double>& x, const std::vector<double>& y, double at);

nlohmann::json to_json(const EngineCompute& c);
// Throws Error naming `source` for a missing or bad field.
EngineCompute engine_compute_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace strata
