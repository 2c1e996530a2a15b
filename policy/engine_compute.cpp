// The engine's measured compute (engine_compute.h).
#include "policy/engine_compute.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata {

double interpolate(const std::vector<double>& x, const std::vector<double>& y, double at) {
  STRATA_ASSERT(!x.empty() && x.size() == y.size());
  if (x.size() == 1) return y[0] * at / x[0];
  size_t i = 0;  // the segment [x[i], x[i+1]] used
  if (at >= x.back()) {
    i = x.size() - 2;
  } else if (at > x[0]) {
    while (x[i + 1] < at) ++i;
  }
  const double slope = (y[i + 1] - y[i]) / (x[i + 1] - x[i]);
  const double v = y[i] + slope * (at - x[i]);
  if (at < x[0]) return std::clamp(v, y[0] * at / x[0], y[0]);
  return std::max(v, 0.0);
}

double EngineCompute::decode_layer(double g, double ctx) const {
  return interpolate(decode_rows, decode_layer_s, g) +
         g * std::max(0.0, ctx - decode_ctx) * decode_key_s;
}

double EngineCompute::prefill_layer(double g, double s) const {
  return interpolate(prefill_tokens, prefill_layer_s, g * s) + g * s * s * prefill_pair_s;
}

double EngineCompute::head(double g) const {
  return interpolate(head_rows, head_s, g);
}

namespace {
double one_cold_then_warm(const std::vector<double>& x, const std::vector<double>& cold,
                          const std::vector<double>& warm, double g, double k) {
  if (k <= 0) return 0;
  return interpolate(x, cold, g) + (k - 1) * interpolate(x, warm, g);
}
}  // namespace

double EngineCompute::decode_layers(double g, double k) const {
  return one_cold_then_warm(decode_rows, decode_layer_cold_s, decode_layer_s, g, k);
}

double EngineCompute::decode_stream_extra(double g) const {
  if (decode_layer_streamed_s.empty()) return 0;
  return std::max(0.0, interpolate(decode_rows, decode_layer_streamed_s, g) -
                           interpolate(decode_rows, decode_layer_cold_s, g));
}

double EngineCompute::heads(double g, double k) const {
  return one_cold_then_warm(head_rows, head_cold_s, head_s, g, k);
}

void EngineCompute::validate(const std::string& source) const {
  auto table = [&](const char* what, const std::vector<double>& x, const std::vector<double>& y) {
    if (x.empty() || x.size() != y.size()) {
      fail("{}: {}: {} points against {} times; measure again", source, what, x.size(), y.size());
    }
    for (size_t i = 0; i < x.size(); ++i) {
      if (!(x[i] > 0) || !std::isfinite(x[i]) || (i > 0 && !(x[i] > x[i - 1]))) {
        fail("{}: {}: point {} is {}; points must be positive and increasing", source, what, i,
             x[i]);
      }
      if (!(y[i] > 0) || !std::isfinite(y[i])) {
        fail("{}: {}: time {} is {}; times must be positive", source, what, i, y[i]);
      }
    }
  };
  table("decode", decode_rows, decode_layer_s);
  table("decode out of the caches", decode_rows, decode_layer_cold_s);
  if (!decode_layer_streamed_s.empty()) {
    table("decode beside a weight load", decode_rows, decode_layer_streamed_s);
  }
  table("prefill", prefill_tokens, prefill_layer_s);
  table("head", head_rows, head_s);
  table("head out of the caches", head_rows, head_cold_s);
  for (const auto& [what, v] : {std::pair{"decode_ctx", decode_ctx},
                                {"decode_key_s", decode_key_s},
                                {"decode_shared_key_s", decode_shared_key_s},
                                {"prefill_seq", prefill_seq},
                                {"prefill_pair_s", prefill_pair_s}}) {
    if (!(v >= 0) || !std::isfinite(v)) fail("{}: {} is {}; it must be 0 or more", source, what, v);
  }
}

nlohmann::json to_json(const EngineCompute& c) {
  nlohmann::json j = {{"key", c.key},
                      {"decode_rows", c.decode_rows},
                      {"decode_layer_s", c.decode_layer_s},
                      {"decode_layer_cold_s", c.decode_layer_cold_s},
                      {"decode_ctx", c.decode_ctx},
                      {"decode_key_s", c.decode_key_s},
                      {"decode_shared_key_s", c.decode_shared_key_s},
                      {"prefill_tokens", c.prefill_tokens},
                      {"prefill_layer_s", c.prefill_layer_s},
                      {"prefill_seq", c.prefill_seq},
                      {"prefill_pair_s", c.prefill_pair_s},
                      {"head_rows", c.head_rows},
                      {"head_s", c.head_s},
                      {"head_cold_s", c.head_cold_s}};
  if (!c.decode_layer_streamed_s.empty()) j["decode_layer_streamed_s"] = c.decode_layer_streamed_s;
  return j;
}

EngineCompute engine_compute_from_json(const nlohmann::json& j, const std::string& source) {
  EngineCompute c;
  try {
    j.at("key").get_to(c.key);
    j.at("decode_rows").get_to(c.decode_rows);
    j.at("decode_layer_s").get_to(c.decode_layer_s);
    j.at("decode_layer_cold_s").get_to(c.decode_layer_cold_s);
    j.at("decode_ctx").get_to(c.decode_ctx);
    j.at("decode_key_s").get_to(c.decode_key_s);
    j.at("decode_shared_key_s").get_to(c.decode_shared_key_s);
    j.at("prefill_tokens").get_to(c.prefill_tokens);
    j.at("prefill_layer_s").get_to(c.prefill_layer_s);
    j.at("prefill_seq").get_to(c.prefill_seq);
    j.at("prefill_pair_s").get_to(c.prefill_pair_s);
    j.at("head_rows").get_to(c.head_rows);
    j.at("head_s").get_to(c.head_s);
    j.at("head_cold_s").get_to(c.head_cold_s);
    if (j.contains("decode_layer_streamed_s")) {
      j.at("decode_layer_streamed_s").get_to(c.decode_layer_streamed_s);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a measurement of the engine's compute: {}", source, e.what());
  }
  c.validate(source);
  return c;
}

}  // namespace strata
