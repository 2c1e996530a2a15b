// `strata perplexity`: the perplexity of the model on a text file, by the
// procedure of the golden files (src/generate/perplexity.h): the text's
// tokens (no BOS) in non-overlapping chunks of --ctx tokens, each scored
// alone, the incomplete tail dropped. Prints "ppl <value>", then the number
// of scored tokens and of chunks. The compute dtype defaults to f32 here (the
// golden values are f32); --compute-dtype bf16 measures the bf16 path.
// --decode-from N scores through the decode path (perplexity.h), a block of
// up to 8 chunks at a time, so that --sparse-budget applies.
#include <algorithm>
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
  int64_t decode_from = 0;
  bool bos = false;
  int threads = 0;
  CompressionFlags compression;
  OffloadFlags offload;
};

int run(const Options& o) {
  if (o.offload.sparse_budget.value_or(0) > 0 && o.decode_from == 0) {
    fail(
        "--sparse-budget {}: applies to decode, and perplexity scores each chunk in one "
        "prefill; add --decode-from N to feed the tokens after the first N one at a time",
        *o.offload.sparse_budget);
  }
  if (o.decode_from < 0 || o.decode_from >= o.ctx) {
    fail("--decode-from {}: must be from 1 to --ctx - 1 = {} (0: score by prefill)", o.decode_from,
         o.ctx - 1);
  }
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
  const int64_t n_chunks = perplexity_chunks(ids.size(), o.ctx, o.bos);
  eo.gpu_batch_size = o.decode_from > 0 ? std::clamp<int64_t>(n_chunks, 1, 8) : 1;
  eo.threads = o.threads;
  eo.offload_dir = o.offload.offload_dir;
  o.compression.apply(eo);
  // One sequence of up to --ctx tokens scored at a time (decode mode: a
  // block of chunks).
  RunShape shape;
  shape.max_prompt = o.decode_from > 0 ? o.decode_from : o.ctx;
  shape.mean_prompt = static_cast<double>(shape.max_prompt);
  shape.gen = o.decode_from > 0 ? o.ctx - o.decode_from : 1;
  shape.max_block = eo.gpu_batch_size;
  OffloadFlags offload = o.offload;
  offload.apply(eo, *model, shape);
  spdlog::info("perplexity: KV {}, weights {}", dtype_name(eo.kv_dtype),
               eo.weight_dtype ? dtype_name(*eo.weight_dtype) : "as stored");
  const auto engine = make_engine(*model, eo);
  const PerplexityResult r = perplexity(*engine, ids, o.ctx, bos, o.decode_from);
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
      sub.add_option("--decode-from", o->decode_from,
                     "Score through the decode path: the first N tokens of each chunk as a "
                     "prompt, the rest fed one at a time (the positions from N on are scored; "
                     "--sparse-budget applies); 0: every position in one prefill")
          ->capture_default_str();
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
