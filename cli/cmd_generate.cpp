// `strata generate`: runs every prompt of a prompt file through the model and
// writes one JSONL record per prompt, in input order (src/generate/driver.h).
// Everything that can be checked before compute is: the prompt file, every
// prompt's length against the context, the chat template, the output and
// report paths. Then the engine is built and the prompts run in blocks;
// records reach OUTPUT.partial as they finish, and OUTPUT appears only when
// all are done. Rerunning an interrupted command resumes it. A progress line
// is drawn on stderr when it is a terminal; the report goes to stdout.
// Placement, budgets, --policy and --trace: cli/offload_flags.h.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
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
#include "generate/prompt_file.h"
#include "generate/report.h"
#include "model/model.h"
#include "offload/device.h"
#include "offload/offload_engine.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

struct Options {
  std::string model, prompts, output, report, compute_dtype, format = "auto";
  std::optional<int64_t> batch_size;
  int threads = 0;
  GenerateOptions gen;
  CompressionFlags compression;
  SpeculationFlags speculation;
  OffloadFlags offload;
  bool no_prefix_sharing = false;
};

int run(const Options& o) {
  GenerateOptions gen = o.gen;
  gen.progress = stderr_is_tty();
  if (o.batch_size && (*o.batch_size < 1 || *o.batch_size > kMaxBatchSize)) {
    fail("--batch-size {} is not allowed; use 1 to {}", *o.batch_size, kMaxBatchSize);
  }
  if (o.batch_size && o.offload.gpu_batch_size) {
    fail(
        "--batch-size {} and --gpu-batch-size {} are the same setting (sequences per micro-batch); "
        "give one",
        *o.batch_size, *o.offload.gpu_batch_size);
  }
  if (!o.report.empty()) check_writable_file(o.report, "--report");
  std::error_code ec;
  if (std::filesystem::equivalent(o.prompts, o.output, ec)) {
    fail("--output {} is the prompt file itself; choose another output path", o.output);
  }

  const auto model = Model::open(o.model);
  const auto tokenizer = tokenizer_for(*model);
  std::optional<PromptFormat> format;
  if (o.format == "text") format = PromptFormat::kText;
  if (o.format == "jsonl") format = PromptFormat::kJsonl;
  if (o.format == "openai") format = PromptFormat::kOpenAi;
  const PromptFile prompts = read_prompt_file(o.prompts, format);
  spdlog::info("{}: {} format", o.prompts, prompt_format_name(prompts.format));
  // OpenAI answers name the model by its file or directory name.
  std::filesystem::path model_path = std::filesystem::path(o.model).lexically_normal();
  if (model_path.filename().empty()) model_path = model_path.parent_path();
  gen.response_model = model_path.filename().string();
  if (gen.response_model.ends_with(".gguf"))
    gen.response_model.resize(gen.response_model.size() - 5);
  const std::vector<Job> jobs =
      prepare_jobs(prompts, *tokenizer, model->config().n_ctx, gen, o.model);

  EngineOptions eo;
  eo.compute_dtype = o.offload.compute_dtype(o.compute_dtype);
  eo.kv_dtype = default_kv_dtype(eo.compute_dtype);
  if (o.batch_size) eo.gpu_batch_size = *o.batch_size;
  eo.threads = o.threads;
  OffloadFlags offload = o.offload;
  if (o.batch_size && !offload.gpu_batch_size) offload.gpu_batch_size = *o.batch_size;
  eo.offload_dir = offload.offload_dir;
  o.compression.apply(eo);
  o.speculation.apply(eo, gen);
  eo.prefix_sharing = !o.no_prefix_sharing;
  // The placement plans for the longest prompt and generation of the file.
  RunShape shape;
  int64_t n_to_run = 0, prompt_sum = 0;
  for (const Job& j : jobs) {
    if (!j.skipped.empty()) continue;
    ++n_to_run;
    prompt_sum += static_cast<int64_t>(j.tokens.size());
    shape.max_prompt = std::max<int64_t>(shape.max_prompt, static_cast<int64_t>(j.tokens.size()));
    shape.gen = std::max<int64_t>(shape.gen, j.max_new_tokens);
  }
  shape.mean_prompt = n_to_run > 0 ? static_cast<double>(prompt_sum) / n_to_run : 0;
  shape.max_block = std::max<int64_t>(1, n_to_run);
  const RunPlan plan = offload.apply(eo, *model, shape);
  const std::string dtype(dtype_name(eo.compute_dtype));
  // Compression changes the completions: a resumed run must use the same.
  std::string numerics = dtype;
  if (is_quantized(eo.kv_dtype)) numerics += fmt::format(" kv {}", dtype_name(eo.kv_dtype));
  if (eo.weight_dtype) numerics += fmt::format(" weights {}", dtype_name(*eo.weight_dtype));
  OutputFile out(o.output, {o.prompts, prompts.content_hash,
                            settings_hash(gen, model_identity(*model), numerics), jobs.size()});
  spdlog::info("{} prompts from {}, {} to run", jobs.size(), o.prompts, jobs.size() - out.n_done());

  const auto engine = make_engine(*model, eo);
  const RunSummary summary = run_jobs(*engine, *tokenizer, jobs, gen, &out);

  RunReport report = plan_report(plan, *model, o.model, eo, shape.mean_prompt, shape.gen,
                                 measured_speculation(engine->stats(), summary.n_sequences));
  report.n_prompts = summary.n_prompts;
  report.n_prompts_resumed = static_cast<int64_t>(out.n_resumed());
  report.n_sequences = summary.n_sequences;
  report.total_s = summary.total_s;
  report.engine = engine->stats();
  report.print(stdout);
  if (!o.report.empty()) report.write_json(o.report);
  offload.finish();
  spdlog::info("wrote {}", o.output);
  return 0;
}

const Command kGenerate{
    "generate", "Generate a completion for every prompt of a file (JSONL out, input order)", 10,
    [](CLI::App& sub) -> Runner {
      auto o = std::make_shared<Options>();
      sub.add_option("--model", o->model, "GGUF file or Hugging Face model directory")->required();
      sub.add_option("--prompts", o->prompts,
                     "Prompt file: one prompt per line, JSONL with \"prompt\" and optional "
                     "\"id\", \"max_new_tokens\", \"temperature\", \"stop\", \"system\", or an "
                     "OpenAI batch file (custom_id, method, url, body), answered in that format")
          ->required();
      sub.add_option("--format", o->format,
                     "Prompt file format: auto (from the file), text, jsonl or openai")
          ->check(CLI::IsMember({"auto", "text", "jsonl", "openai"}))
          ->capture_default_str();
      sub.add_option("-o,--output", o->output,
                     "Output JSONL (one record per prompt, input order); an interrupted run "
                     "leaves OUTPUT.partial and the same command resumes it")
          ->required();
      sub.add_option("--batch-size", o->batch_size,
                     "Sequences per batch (default: the engine's; the same as --gpu-batch-size)");
      sub.add_option("--max-new-tokens", o->gen.max_new_tokens,
                     "Tokens to generate per prompt at most")
          ->capture_default_str();
      sub.add_option("--temperature", o->gen.sampling.temperature, "0 is greedy")
          ->capture_default_str();
      sub.add_option("--top-p", o->gen.sampling.top_p, "Nucleus sampling mass (1 is off)")
          ->capture_default_str();
      sub.add_option("--top-k", o->gen.sampling.top_k, "Keep the k most likely tokens (0 is off)")
          ->capture_default_str();
      sub.add_option("--repetition-penalty", o->gen.sampling.repetition_penalty,
                     "Divide positive / multiply negative logits of tokens already seen (1 is off)")
          ->capture_default_str();
      sub.add_option("--seed", o->gen.seed, "Random seed; each prompt has its own stream")
          ->capture_default_str();
      sub.add_option("--stop", o->gen.stop, "Stop strings (the completion is cut before them)");
      sub.add_flag("--chat", o->gen.chat,
                   "Wrap each prompt in the model's chat template (a user turn after --system)");
      sub.add_option("--system", o->gen.system,
                     "System message for --chat (default: the template's)");
      sub.add_option("--chat-template", o->gen.chat_template_file,
                     "Jinja file to use instead of the model's chat template (--chat and OpenAI "
                     "chat requests)");
      sub.add_flag("--ids", o->gen.ids, "Add completion_ids to every record");
      sub.add_flag("--skip-long", o->gen.skip_long,
                   "Skip prompts longer than the context with a warning instead of failing");
      sub.add_option("--compute-dtype", o->compute_dtype,
                     "f32, bf16 or int8 (default: on the CPU bf16 where it has native bf16, else "
                     "f32; on a GPU f32; int8: integer products with quantized weights, CPU "
                     "only)")
          ->check(CLI::IsMember({"f32", "bf16", "int8"}));
      sub.add_option("--threads", o->threads, "CPU threads (default: all cores)");
      sub.add_option("--report", o->report, "Also write the run report as JSON to this file");
      o->offload.add(sub, true);  // before compression: it owns --offload-dir
      o->compression.add(sub);
      o->speculation.add(sub);
      sub.add_flag("--no-prefix-sharing", o->no_prefix_sharing,
                   "Compute and store every prompt's KV in full, also the whole pages it shares "
                   "with other prompts of its block (by default computed once)");
      return [o]() { return run(*o); };
    }};

}  // namespace
}  // namespace strata::cli
