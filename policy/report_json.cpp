// JSON forms of policies and predictions; see report_json.h.
#include "policy/report_json.h"

namespace strata {

namespace {

nlohmann::json compression_json(const Compression& c) {
  if (!c.enabled()) return "none";
  return {{"bits", c.bits}, {"group_size", c.group_size}, {"symmetric", c.symmetric}};
}

}  // namespace

nlohmann::json policy_to_json(const Policy& p) {
  return {{"gpu_batch_size", p.gpu_batch_size},
          {"num_gpu_batches", p.num_gpu_batches},
          {"block_size", p.block_size()},
          {"weights", tier_shares<nlohmann::json>(p.placement, DataKind::kWeights)},
          {"kv_cache", tier_shares<nlohmann::json>(p.placement, DataKind::kKv)},
          {"activations", tier_shares<nlohmann::json>(p.placement, DataKind::kAct)},
          {"cpu_attention", p.cpu_attention},
          {"compress_weight", compression_json(p.compress_weight)},
          {"compress_kv", compression_json(p.compress_kv)},
          {"sparse_attention_budget", p.sparse_attention_budget}};
}

nlohmann::json predicted_to_json(const Prediction& p) {
  return {{"prefill_tokens_per_s", p.prefill_tokens_per_s},
          {"decode_tokens_per_s", p.decode_tokens_per_s},
          {"total_tokens_per_s", p.total_tokens_per_s},
          {"prefill_s", p.prefill_s},
          {"decode_s", p.decode_s},
          {"total_s", p.total_s},
          {"block_size", p.block_size}};
}

nlohmann::json memory_to_json(const Prediction& p) {
  nlohmann::json out = nlohmann::json::object();
  for (int t = 0; t < kNumTiers; ++t) {
    const TierUse& u = p.memory[t];
    if (!u.used) continue;
    out[std::string(tier_name(static_cast<Tier>(t)))] = {
        {"budget", u.budget},           {"peak", u.peak},       {"prefill", u.prefill},
        {"decode", u.decode},           {"weights", u.weights}, {"kv_cache", u.kv_cache},
        {"activations", u.activations}, {"buffers", u.buffers}, {"over_budget", u.over()}};
  }
  return out;
}

nlohmann::json bound_to_json(const Prediction& p) {
  return {{"phase", std::string(phase_name(p.bound_phase))},
          {"term", p.bound_phase == Phase::kPrefill ? p.bound_prefill : p.bound_decode},
          {"prefill", p.bound_prefill},
          {"decode", p.bound_decode}};
}

nlohmann::json terms_to_json(const Prediction& p) {
  nlohmann::json pre = nlohmann::json::object();
  nlohmann::json dec = nlohmann::json::object();
  for (const auto& [name, s] : p.prefill_terms) pre[name] = s;
  for (const auto& [name, s] : p.decode_terms) dec[name] = s;
  pre["step"] = p.prefill_layer_s;
  dec["step"] = p.decode_layer_s;
  return {{"prefill_layer_s", pre}, {"decode_layer_s", dec}};
}

}  // namespace strata
