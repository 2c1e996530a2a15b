// A model config as JSON (config_json.h).
#include "model/config_json.h"

namespace strata {

nlohmann::json config_to_json(const ModelConfig& c) {
  nlohmann::json j;
  j["architecture"] = c.architecture;
  j["family"] = family_name(c.family);
  j["n_layer"] = c.n_layer;
  j["n_embd"] = c.n_embd;
  j["n_head"] = c.n_head;
  j["n_kv_head"] = c.n_kv_head;
  j["head_dim"] = c.head_dim;
  j["n_ff"] = c.n_ff;
  j["n_vocab"] = c.n_vocab;
  j["n_ctx"] = c.n_ctx;
  j["norm"] = norm_name(c.norm);
  j["norm_eps"] = c.norm_eps;
  j["activation"] = activation_name(c.act);
  j["gated_ffn"] = c.gated_ffn;
  j["attn_qkv_bias"] = c.attn_qkv_bias;
  j["attn_out_bias"] = c.attn_out_bias;
  j["ffn_bias"] = c.ffn_bias;
  j["norm_bias"] = c.norm_bias;
  j["tie_embeddings"] = c.tie_embeddings;
  j["learned_pos"] = c.learned_pos;
  j["pos_offset"] = c.pos_offset;
  j["rope_layout"] = rope_layout_name(c.rope_layout);
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = {{"type", rope_scaling_name(c.rope_scaling.type)},
                       {"factor", c.rope_scaling.factor},
                       {"low_freq_factor", c.rope_scaling.low_freq_factor},
                       {"high_freq_factor", c.rope_scaling.high_freq_factor},
                       {"original_max_position", c.rope_scaling.original_max_position}};
  j["rope_freq_factors"] = c.rope_freq_factors;
  j["sliding_window"] = c.sliding_window;
  j["bos_id"] = c.bos_id;
  j["eos_ids"] = c.eos_ids;
  j["source_dtype"] = c.source_dtype;
  return j;
}

}  // namespace strata
