// `strata bench`: throughput on synthetic prompts. BATCH x NUM_BATCHES
// prompts of PROMPT_LEN token ids drawn deterministically from the
// vocabulary (special tokens excluded) each generate exactly GEN_LEN tokens
// (greedy, EOS ignored). After WARMUP unmeasured runs, REPEATS runs are
// measured; the report is the median run (by total tokens/s), with every
// run's throughput and the spread in the JSON ("repeats", "spread").
// Placement and batch sizes may come from --percent or --policy FILE|auto
// (cli/offload_flags.h); then the block is the policy's.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/compression_flags.h"
#include "cli/offload_flags.h"
#include "cli/speculation_flags.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "generate/driver.h"
#include "generate/output_file.h"
#include "generate/report.h"
#include "model/model.h"
#include "offload/device.h"
#include "offload/offload_engine.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

struct Options {
  std::string model, report, compute_dtype;
  int64_t prompt_len = 0, gen_len = 0, batch = 0, num_batches = 0;  // 0: not given
  int64_t max_block = RunShape{}.max_block;
  int warmup = 1, repeats = 3, threads = 0;
  CompressionFlags compression;
  SpeculationFlags speculation;
  OffloadFlags offload;
  bool no_prefix_sharing = false;
  int64_t shared_prefix = 0;
};

int run(const Options& o) {
  if (o.prompt_len < 1) fail("--prompt-len {} is not allowed; use 1 or more", o.prompt_len);
  if (o.gen_len < 1 || o.gen_len > (1 << 30))
    fail("--gen-len {} is not allowed; use 1 or more", o.gen_len);
  if (o.batch < 0 || (o.batch == 0 && o.offload.policy.empty())) {
    fail("--batch {} is not allowed; use 1 or more (or --policy, which sets it)", o.batch);
  }
  if (o.batch > 0 && o.offload.gpu_batch_size) {
    fail(
        "--batch {} and --gpu-batch-size {} are the same setting (sequences per micro-batch); give "
        "one",
        o.batch, *o.offload.gpu_batch_size);
  }
  if (o.num_batches > 0 && o.offload.num_gpu_batches) {
    fail(
        "--num-batches {} and --num-gpu-batches {} are the same setting (micro-batches per block); "
        "give one",
        o.num_batches, *o.offload.num_gpu_batches);
  }
  if (o.num_batches < 0) fail("--num-batches {} is not allowed; use 1 or more", o.num_batches);
  if (o.shared_prefix < 0 || o.shared_prefix > o.prompt_len) {
    fail("--shared-prefix {} is not allowed; use 0 to --prompt-len ({})", o.shared_prefix,
         o.prompt_len);
  }
  if (o.max_block < 1) fail("--max-block {} is not allowed; use 1 or more", o.max_block);
  if (o.warmup < 0) fail("--warmup {} is not allowed; use 0 or more", o.warmup);
  if (o.repeats < 1) fail("--repeats {} is not allowed; use 1 or more", o.repeats);
  if (!o.report.empty()) check_writable_file(o.report, "--report");

  const auto model = Model::open(o.model);
  const int64_t n_ctx = model->config().n_ctx;
  if (o.prompt_len + o.gen_len > n_ctx) {
    fail(
        "--prompt-len {} + --gen-len {} exceeds the context of {} ({} tokens); use shorter lengths",
        o.prompt_len, o.gen_len, o.model, n_ctx);
  }
  const auto tokenizer = tokenizer_for(*model);
  EngineOptions eo;
  eo.compute_dtype = o.offload.compute_dtype(o.compute_dtype);
  eo.kv_dtype = default_kv_dtype(eo.compute_dtype);
  eo.gpu_batch_size = o.batch > 0 ? o.batch : 1;
  eo.num_gpu_batches = o.num_batches > 0 ? o.num_batches : 1;
  eo.threads = o.threads;
  OffloadFlags offload = o.offload;
  if (o.batch > 0) offload.gpu_batch_size = o.batch;
  if (o.num_batches > 0) offload.num_gpu_batches = o.num_batches;
  eo.offload_dir = offload.offload_dir;
  o.compression.apply(eo);
  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int32_t>(o.gen_len);
  gen.ignore_eos = true;
  o.speculation.apply(eo, gen);
  const DraftSetup draft = o.speculation.make_drafter(eo, *tokenizer);
  eo.prefix_sharing = !o.no_prefix_sharing;
  RunShape shape;
  shape.max_prompt = o.prompt_len;
  shape.mean_prompt = static_cast<double>(o.prompt_len);
  shape.gen = o.gen_len;
  shape.max_block = o.max_block;
  // Every prompt of a block begins with the same shared_prefix tokens: a
  // block of any size from two shares what two such prompts do, and all
  // but one of its sequences take the shared pages' KV from that one.
  const std::vector<Job> pair = synthetic_jobs(*tokenizer, model->config().n_vocab, 2, o.prompt_len,
                                               static_cast<int32_t>(o.gen_len), o.shared_prefix);
  const auto pair_sharing = planned_sharing(
      pair, [](size_t) { return false; }, eo.prefix_sharing ? eo.page_size : 0);
  shape.sharing = [&](int64_t block_size) {
    if (block_size < 2) return SharingRates{};
    SharingRates r = pair_sharing(2);
    if (r.kv.pages > 0) r.kv.seqs = block_size - 1;
    return r;
  };
  o.speculation.apply_to_plan(shape, offload.policy, /*pilot_ok=*/false);
  const RunPlan plan = offload.apply(eo, *model, shape);
  SpeculationFlags::after_plan(eo, gen);
  const auto engine = make_engine(*model, eo);

  const std::vector<Job> jobs =
      synthetic_jobs(*tokenizer, model->config().n_vocab, engine->block_size(), o.prompt_len,
                     static_cast<int32_t>(o.gen_len), o.shared_prefix);
  // Each run starts as a run of its own would: a shared prefix kept from
  // the run before would spare its prefix step.
  for (int w = 0; w < o.warmup; ++w) {
    spdlog::info("bench: warm-up run {}/{}", w + 1, o.warmup);
    engine->forget_kept_prefix();
    run_jobs(*engine, *tokenizer, jobs, gen, nullptr, draft.drafter.get());
  }

  std::vector<RunReport> runs;
  for (int r = 0; r < o.repeats; ++r) {
    engine->forget_kept_prefix();
    const EngineStats before = engine->stats();
    const double draft_before = draft.seconds();
    const RunSummary s = run_jobs(*engine, *tokenizer, jobs, gen, nullptr, draft.drafter.get());
    const EngineStats measured = stats_since(engine->stats(), before);
    RunReport rep =
        plan_report(plan, *model, o.model, eo, static_cast<double>(o.prompt_len), o.gen_len,
                    measured_speculation(measured, s.n_sequences, draft.seconds() - draft_before),
                    measured_sharing(measured, s.n_sequences));
    rep.n_prompts = s.n_prompts;
    rep.n_sequences = s.n_sequences;
    rep.total_s = s.total_s;
    rep.engine = measured;
    rep.draft_s = draft.seconds() - draft_before;
    spdlog::info("bench: run {}/{}: {:.1f} tokens/s", r + 1, o.repeats,
                 rep.to_json().value("total_tokens_per_s", 0.0));
    runs.push_back(std::move(rep));
  }
  draft.log_stats();
  auto total_rate = [](const RunReport& r) { return r.to_json().value("total_tokens_per_s", 0.0); };
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return total_rate(runs[a]) < total_rate(runs[b]); });
  RunReport report = runs[order[order.size() / 2]];

  nlohmann::ordered_json repeats = nlohmann::ordered_json::array();
  for (const RunReport& r : runs) {
    const auto j = r.to_json();
    nlohmann::ordered_json e;
    for (const char* k :
         {"total_s", "prefill_tokens_per_s", "decode_tokens_per_s", "total_tokens_per_s"}) {
      if (j.contains(k)) e[k] = j[k];
    }
    repeats.push_back(e);
  }
  report.extra = {
      {"workload",
       {{"prompt_len", o.prompt_len}, {"gen_len", o.gen_len}, {"n_prompts", jobs.size()}}},
      {"warmup", o.warmup},
      {"repeats", repeats},
      {"spread",
       {{"total_tokens_per_s_min", total_rate(runs[order.front()])},
        {"total_tokens_per_s_max", total_rate(runs[order.back()])}}}};
  report.print(stdout);
  if (runs.size() > 1) {
    std::printf("  %-22s %.1f .. %.1f tok/s over %zu runs (median shown)\n", "total spread",
                total_rate(runs[order.front()]), total_rate(runs[order.back()]), runs.size());
  }
  if (!o.report.empty()) report.write_json(o.report);
  offload.finish();
  return 0;
}

const Command kBench{
    "bench", "Measure throughput on synthetic prompts (exactly --gen-len tokens each)", 30,
    [](CLI::App& sub) -> Runner {
      auto o = std::make_shared<Options>();
      sub.add_option("--model", o->model, "GGUF file or Hugging Face model directory")->required();
      sub.add_option("--prompt-len", o->prompt_len, "Tokens per prompt")->required();
      sub.add_option("--gen-len", o->gen_len, "Tokens generated per prompt")->required();
      sub.add_option("--shared-prefix", o->shared_prefix,
                     "Leading tokens every prompt has in common (a shared system prompt or "
                     "preamble)")
          ->capture_default_str();
      sub.add_option("--batch", o->batch,
                     "Sequences per batch (and prompts per block); required unless --policy sets "
                     "it");
      sub.add_option("--num-batches", o->num_batches,
                     "Batches per block (prompts = batch x this; default 1, or the policy's)");
      sub.add_option("--max-block", o->max_block,
                     "With --policy auto: the most sequences per block the search considers")
          ->capture_default_str();
      sub.add_option("--warmup", o->warmup, "Unmeasured runs first")->capture_default_str();
      sub.add_option("--repeats", o->repeats, "Measured runs; the median is reported")
          ->capture_default_str();
      sub.add_option("--compute-dtype", o->compute_dtype,
                     "f32, bf16 or int8 (default: on the CPU bf16 where it has native bf16, else "
                     "f32; on a GPU f32; int8: integer products with quantized weights, CPU "
                     "only)")
          ->check(CLI::IsMember({"f32", "bf16", "int8"}));
      sub.add_option("--threads", o->threads, "CPU threads (default: all cores)");
      sub.add_option("--report", o->report, "Also write the report as JSON to this file");
      o->offload.add(sub, false);  // before compression: it owns --offload-dir
      o->compression.add(sub);
      o->speculation.add(sub);
      sub.add_flag("--no-prefix-sharing", o->no_prefix_sharing,
                   "Compute and store every prompt's KV in full, also the whole pages it shares "
                   "with other prompts of its block (by default computed once)");
      return [o]() { return run(*o); };
    }};

}  // namespace
}  // namespace strata::cli
