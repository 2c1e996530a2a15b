// A policy: where weights, KV cache and activations live, the batch sizes,
// and the compression and attention choices. Plain data, produced by the
// search (or written by hand) and consumed unchanged by the offload engine,
// the dry run and the reports.
//
// Invariant (checked by validate_policy): every fraction is in [0, 1], the
// gpu and cpu fractions of a kind sum to at most 1 (disk holds the rest),
// both batch sizes are at least 1, compression formats exist in core/dtype.h.
//
// YAML schema (save_policy writes it, load_policy reads it):
//   gpu_batch_size: 48           # sequences per micro-batch on the device
//   num_gpu_batches: 3           # micro-batches per block (block = 48 * 3)
//   weights:     {gpu: 0.2, cpu: 0.8, disk: 0}   # fractions; disk optional (= 1 - gpu - cpu)
//   kv_cache:    {gpu: 0, cpu: 1}
//   activations: {gpu: 0, cpu: 1}
//   cpu_attention: true          # decode attention over CPU-held KV runs on the CPU
//   compress_weight: none        # none | q4 | q8 | {bits: 4, group_size: 64, symmetric: false}
//   compress_kv: none
//   sparse_attention_budget: 0   # KV tokens attended per sequence in decode; 0 = dense
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/placement.h"

namespace strata {

// Group-wise quantization of weights or KV (docs/DESIGN.md §6): q4 or q8, groups of
// 32, 64 or 128, asymmetric (scale and minimum) unless symmetric.
struct Compression {
  int bits = 0;  // 0 = none, 4 or 8
  int group_size = 64;
  bool symmetric = false;

  bool enabled() const { return bits != 0; }
  // Bytes per element in the compressed form; `uncompressed` when off.
  double bytes_per_elem(double uncompressed) const;
  // Bytes per element of a KV cache compressed this way, pages of 16 tokens
  // (core/kv_layout.h: keys per channel, values in this format's blocks, K
  // and V pages of one size).
  double kv_bytes_per_elem(double uncompressed) const;
  // "none", "q4 (group 64)", "q8s (group 32)".
  std::string to_string() const;
  bool operator==(const Compression&) const = default;
};

// Parses "none", "q4", "q8", "q4:128", "q8s:32" (s = symmetric); throws Error
// naming `what` and the text when there is no such format.
Compression parse_compression(std::string_view text, std::string_view what);

struct Policy {
  int64_t gpu_batch_size = 1;
  int64_t num_gpu_batches = 1;
  Placement placement;  // default: everything on the gpu tier
  bool cpu_attention = false;
  Compression compress_weight;
  Compression compress_kv;
  int64_t sparse_attention_budget = 0;

  int64_t block_size() const { return gpu_batch_size * num_gpu_batches; }
  bool operator==(const Policy&) const = default;
};

// Throws Error naming `source` and the field when the policy breaks the
// invariant above.
void validate_policy(const Policy& p, const std::string& source);

Policy parse_policy(const std::string& yaml_text, const std::string& source);
Policy load_policy(const std::string& path);
// The YAML text; `header` lines (without '#') are written first as comments.
std::string policy_to_yaml(const Policy& p, const std::string& header = {});
// Writes the YAML to `path` through a temporary file and a rename, so a
// failed write never leaves a half-written policy.
void save_policy(const Policy& p, const std::string& path, const std::string& header = {});

}  // namespace strata
