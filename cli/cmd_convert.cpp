// `strata convert --model PATH --out DIR [--weights q4|q8] [--group N]`: writes
// the weight pack (offload/pack.h) of a model into DIR: every layer contiguous
// and page-aligned so the engine streams it from disk with large O_DIRECT
// reads, optionally requantized to q4 or q8. A pack that is already current
// is left as it is unless --force.
#include <chrono>
#include <cstdio>

#include "cli/command.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/units.h"
#include "model/model.h"
#include "offload/pack.h"
#include "offload/pack_build.h"

namespace strata::cli {
namespace {

struct ConvertOptions {
  std::string model;
  std::string out;
  std::string weights = "source";
  int group = 64;
  bool force = false;
  bool verify = false;
};

// "source" (or "none"): as stored; "q4"/"q8": asymmetric; "q4s"/"q8s": symmetric.
PackOptions pack_options(const ConvertOptions& o) {
  PackOptions p;
  if (o.weights == "source" || o.weights == "none") return p;
  int bits = 0;
  bool symmetric = false;
  if (o.weights == "q4")
    bits = 4;
  else if (o.weights == "q8")
    bits = 8;
  else if (o.weights == "q4s")
    bits = 4, symmetric = true;
  else if (o.weights == "q8s")
    bits = 8, symmetric = true;
  else
    fail("--weights {}: expected source, q4, q8, q4s or q8s", o.weights);
  auto t = quant_dtype(bits, symmetric, o.group);
  if (!t) {
    fail("--weights {} --group {}: no such format; groups are 32, 64 or 128 (q4s: 32 only)",
         o.weights, o.group);
  }
  p.weight_dtype = *t;
  return p;
}

int run_convert(const ConvertOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const PackOptions popt = pack_options(o);
  const auto model = Model::open(o.model);
  const std::string why = o.force ? "--force" : pack_stale_reason(*model, o.out, popt);
  if (why.empty() && !o.verify) {
    const Pack p = Pack::open(o.out, model.get());
    std::printf("%s: the pack is current (%zu units, %s, weights %s); nothing to do\n",
                o.out.c_str(), p.units().size(),
                format_bytes(static_cast<double>(p.weights_bytes())).c_str(),
                popt.to_string().c_str());
    return 0;
  }
  const Pack p = why.empty() ? Pack::open(o.out, model.get()) : build_pack(*model, o.out, popt);
  if (o.verify) p.verify();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %s %zu units (%lld layers), %s in %s, weights %s, in %.2f s%s\n", o.out.c_str(),
              why.empty() ? "checked" : "wrote", p.units().size(),
              static_cast<long long>(model->config().n_layer),
              format_bytes(static_cast<double>(p.weights_bytes())).c_str(), kPackWeightsName.data(),
              popt.to_string().c_str(), s, o.verify ? ", checksums verified" : "");
  return 0;
}

const Command kConvert(
    "convert", "Write a model's weight pack: layers contiguous and aligned for streaming from disk",
    35, [](CLI::App& sub) -> Runner {
      auto o = std::make_shared<ConvertOptions>();
      sub.add_option("--model", o->model, "Hugging Face model directory or .gguf file")->required();
      sub.add_option("--out", o->out, "Pack directory (created; an old pack there is replaced)")
          ->required();
      sub.add_option("--weights", o->weights,
                     "source (as stored), q4 or q8 (asymmetric), q4s or q8s (symmetric): "
                     "requantize the matrices")
          ->capture_default_str();
      sub.add_option("--group", o->group, "Quantization group size: 32, 64 or 128")
          ->capture_default_str();
      sub.add_flag("--force", o->force, "Rebuild even when the pack is current");
      sub.add_flag("--verify", o->verify, "Read the pack back and check every unit's checksum");
      return [o] { return run_convert(*o); };
    });

}  // namespace
}  // namespace strata::cli
