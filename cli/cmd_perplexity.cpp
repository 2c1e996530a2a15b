// `strata perplexity`: the perplexity of the model on a text file, by the
// procedure of the golden files (src/generate/perplexity.h): the text's
// tokens (no BOS) in non-overlapping chunks of --ctx tokens, each scored
// alone, the incomplete tail dropped. Prints "ppl <value>", then the number
// of scored tokens and of chunks. The compute dtype defaults to f32 here (the
// golden values are f32); --compute-dtype bf16 measures the bf16 path.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "cli/compression_flags.h"
#include "cli/offload_flags.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "generate/driver.h"
#include "generate/perplexity.h"
#include "model/model.h"
#include "offload/offload_engine.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

struct Options {
  std::string model, text, compute_dtype = "f32";
  int64_t ctx = 256;
  bool bos = false;
  int threads = 0;
  CompressionFlags compression;
  OffloadFlags offload;
};

int run(const Options& o) {
  std::ifstream in(o.text, std::ios::binary);
  if (!in) fail("--text {}: cannot open the file; check the path", o.text);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto model = Model::open(o.model);
  const auto tokenizer = tokenizer_for(*model);
  int32_t bos = -1;
  if (o.bos) {
    bos = tokenizer->bos_id();
    if (bos < 0) fail("--bos: the model {} has no BOS token; run without --bos", o.model);
  }
  const std::vector<int32_t> ids = tokenizer->encode(ss.str(), /*add_bos=*/false);
  spdlog::info("perplexity: {} tokens in {}, chunks of {}", ids.size(), o.text, o.ctx);

  EngineOptions eo;
  eo.compute_dtype = choose_compute_dtype(o.compute_dtype, false);
  eo.kv_dtype = default_kv_dtype(eo.compute_dtype);
  eo.gpu_batch_size = 1;
  eo.threads = o.threads;
  eo.offload_dir = o.offload.offload_dir;
  o.compression.apply(eo);
  // One sequence of up to --ctx tokens scored at a time.
  RunShape shape;
  shape.max_prompt = o.ctx;
  shape.mean_prompt = static_cast<double>(o.ctx);
  shape.gen = 1;
  shape.max_block = 1;
  OffloadFlags offload = o.offload;
  offload.apply(eo, *model, shape);
  spdlog::info("perplexity: KV {}, weights {}", dtype_name(eo.kv_dtype),
               eo.weight_dtype ? dtype_name(*eo.weight_dtype) : "as stored");
  const auto engine = make_engine(*model, eo);
  const PerplexityResult r = perplexity(*engine, ids, o.ctx, bos);
  std::printf("ppl %.6f\n", r.ppl);
  std::printf("n_scored %lld\n", static_cast<long long>(r.n_scored));
  std::printf("n_chunks %lld\n", static_cast<long long>(r.n_chunks));
  offload.finish();
  return 0;
}

const Command kPerplexity{
    "perplexity", "Perplexity of the model on a text file (non-overlapping chunks)", 40,
    [](CLI::App& sub) -> Runner {
      auto o = std::make_shared<Options>();
      sub.add_option("--model", o->model, "GGUF file or Hugging Face model directory")->required();
      sub.add_option("--text", o->text, "The text file to score")->required();
      sub.add_option("--ctx", o->ctx, "Tokens per chunk")->capture_default_str();
      sub.add_flag("--bos", o->bos,
                   "Start every chunk with BOS (then ctx - 1 text tokens per chunk)");
      sub.add_option("--compute-dtype", o->compute_dtype, "f32, bf16 or int8")
          ->check(CLI::IsMember({"f32", "bf16", "int8"}))
          ->capture_default_str();
      sub.add_option("--threads", o->threads, "CPU threads (default: all cores)");
      o->offload.add(sub, false);  // before compression: it owns --offload-dir
      o->compression.add(sub);
      return [o]() { return run(*o); };
    }};

}  // namespace
}  // namespace strata::cli
