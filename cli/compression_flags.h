// The compression flags shared by generate, bench and perplexity:
//   --compress-kv none|q4|q8 [--kv-group 32|64|128]
//   --compress-weight none|q4|q8 [--weight-group 32|64|128] (needs --offload-dir)
// and how they set EngineOptions. KV values are quantized per token along
// head_dim (the group must divide the model's head_dim), keys per channel over
// each page (kernels/cpu/attention_quant.h); weights are requantized once
// into a weight pack in --offload-dir. "q4" and "q8" are asymmetric (scale
// and minimum, Q4A/Q8A); "q4s"/"q8s" name the symmetric formats (values only:
// keys are always asymmetric per channel). KV groups default to 32, the most
// accurate for values (demo model perplexity against f32 KV: q8 about 0%,
// q4 +2.8% at 32 and +3.9% at 64; scripts/accuracy_compression.sh).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "generate/engine.h"

namespace strata::cli {

struct CompressionFlags {
  std::string kv = "none";
  int kv_group = 32;
  std::string weight = "none";
  int weight_group = 64;
  std::string offload_dir;
  CLI::Option* offload_option = nullptr;

  // The format a flag value names, nullopt for "none"; Error naming the flag.
  static std::optional<DType> format(const std::string& value, int group, const char* flag,
                                     const char* group_flag) {
    if (value == "none") return std::nullopt;
    if (value == "f16") return DType::kF16;  // KV only: the uncompressed 16-bit baseline
    int bits = 0;
    bool symmetric = false;
    if (value == "q4") {
      bits = 4;
    } else if (value == "q8") {
      bits = 8;
    } else if (value == "q4s") {
      bits = 4, symmetric = true;
    } else if (value == "q8s") {
      bits = 8, symmetric = true;
    } else {
      fail("{} {}: expected none, q4 or q8 (q4s, q8s: symmetric)", flag, value);
    }
    const std::optional<DType> t = quant_dtype(bits, symmetric, group);
    if (!t) {
      fail("{} {} {} {}: no such format; groups are 32, 64 or 128 (q4s: 32 only)", flag, value,
           group_flag, group);
    }
    return t;
  }

  void add(CLI::App& sub) {
    sub.add_option("--compress-kv", kv,
                   "Store the KV cache quantized (values per token in groups along head_dim, "
                   "keys per channel over each page): none, q4 or q8 (asymmetric; q4s, q8s: "
                   "symmetric values), or f16")
        ->capture_default_str();
    sub.add_option("--kv-group", kv_group,
                   "KV quantization group: 32, 64 or 128 values (must divide head_dim)")
        ->capture_default_str();
    sub.add_option("--compress-weight", weight,
                   "Requantize the weight matrices once into a pack in --offload-dir: none, q4 "
                   "or q8 (asymmetric; q4s, q8s symmetric)")
        ->capture_default_str();
    sub.add_option("--weight-group", weight_group, "Weight quantization group: 32, 64 or 128")
        ->capture_default_str();
    offload_option = sub.get_option_no_throw("--offload-dir");
    if (offload_option == nullptr) {
      offload_option = sub.add_option("--offload-dir", offload_dir,
                                      "Directory for the weight pack (and data on the disk tier)");
    }
  }

  // Sets kv_dtype (when KV compression is on), weight_dtype and offload_dir.
  void apply(EngineOptions& eo) const {
    if (const auto t = format(kv, kv_group, "--compress-kv", "--kv-group")) eo.kv_dtype = *t;
    eo.weight_dtype = format(weight, weight_group, "--compress-weight", "--weight-group");
    if (eo.weight_dtype && !is_quantized(*eo.weight_dtype)) {
      fail("--compress-weight {}: expected none, q4 or q8 (q4s, q8s: symmetric)", weight);
    }
    if (offload_option != nullptr && offload_option->count() > 0) {
      eo.offload_dir = offload_option->as<std::string>();
    }
    if (eo.weight_dtype && eo.offload_dir.empty()) {
      fail(
          "--compress-weight {} needs --offload-dir DIR, where the requantized weight pack is "
          "written (about {:.0f}% of the f16 weights' size)",
          weight,
          100.0 * dtype_info(*eo.weight_dtype).block_bytes /
              (2.0 * dtype_info(*eo.weight_dtype).block_elems));
    }
  }

  // "q4a64" or "none", for reports.
  static std::string name(const std::optional<DType>& t) {
    return t ? std::string(dtype_name(*t)) : std::string("none");
  }
};

}  // namespace strata::cli
