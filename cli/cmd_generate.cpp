// `strata generate`: runs every prompt of a prompt file through the model and
// writes one JSONL record per prompt, in input order (src/generate/driver.h).
// Everything that can be checked before compute is: the prompt file, every
// prompt's length against the context, the chat template, the output and
// report paths. Then the engine is built and the prompts run in blocks;
// records reach OUTPUT.partial as they finish, and OUTPUT appears only when
// all are done. Rerunning an interrupted command resumes it. A progress line
// is drawn on stderr when it is a terminal; the report goes to stdout.
// Placement, budgets, --policy and --trace: cli/offload_flags.h. Started by
// mpirun or srun, the ranks split the prompts and rank 0 writes the output
// (src/cluster/rank_job.h).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/compression_flags.h"
#include "cli/offload_flags.h"
#include "cli/speculation_flags.h"
#include "cluster/job_report.h"
#include "cluster/mpi_world.h"
#include "cluster/rank_job.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "generate/driver.h"
#include "generate/output_file.h"
#include "generate/prompt_file.h"
#include "generate/report.h"
#include "io/atomic_file.h"
#include "kernels/cuda/cuda_device.h"
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

// The hash every rank of an MPI job must agree on: the prompt file, the
// settings and the model's file names and sizes (not their times: a copy on
// each node's own disk is the same model).
uint64_t rank_job_hash(const PromptFile& prompts, const GenerateOptions& gen, const Model& model,
                       const std::string& numerics, size_t n_jobs) {
  const std::string what =
      fmt::format("{:016x}|{:016x}|{}", prompts.content_hash,
                  settings_hash(gen, model_identity(model, false), numerics), n_jobs);
  return fnv1a64(what);
}

int run(const Options& o, MpiWorld& world) {
  GenerateOptions gen = o.gen;
  gen.progress = stderr_is_tty() && world.size() == 1;
  if (o.batch_size && (*o.batch_size < 1 || *o.batch_size > kMaxBatchSize)) {
    fail("--batch-size {} is not allowed; use 1 to {}", *o.batch_size, kMaxBatchSize);
  }
  if (o.batch_size && o.offload.gpu_batch_size) {
    fail(
        "--batch-size {} and --gpu-batch-size {} are the same setting (sequences per micro-batch); "
        "give one",
        *o.batch_size, *o.offload.gpu_batch_size);
  }
  if (!o.report.empty() && world.rank() == 0) check_writable_file(o.report, "--report");
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
  // Ranks on one host share its cores.
  eo.threads =
      o.threads > 0 || world.size() == 1
          ? o.threads
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world.local_size());
  OffloadFlags offload = o.offload;
  if (o.batch_size && !offload.gpu_batch_size) offload.gpu_batch_size = *o.batch_size;
  // `--device cuda` under MPI: each rank of a host its own GPU.
  if (world.size() > 1 && offload.device == "cuda" && cuda_device_count() > 0) {
    offload.device = fmt::format("cuda:{}", world.local_rank() % cuda_device_count());
  }
  eo.offload_dir = offload.offload_dir;
  o.compression.apply(eo);
  o.speculation.apply(eo, gen);
  const DraftSetup draft = o.speculation.make_drafter(eo, *tokenizer);
  eo.prefix_sharing = !o.no_prefix_sharing;
  // Compression changes the completions: a resumed run must use the same.
  const std::string dtype(dtype_name(eo.compute_dtype));
  std::string numerics = dtype;
  if (is_quantized(eo.kv_dtype)) numerics += fmt::format(" kv {}", dtype_name(eo.kv_dtype));
  if (eo.weight_dtype) numerics += fmt::format(" weights {}", dtype_name(*eo.weight_dtype));
  const OutputIdentity identity{o.prompts, prompts.content_hash,
                                settings_hash(gen, model_identity(*model), numerics), jobs.size()};

  // One process writes its own output; the ranks of an MPI job split the
  // prompts and send their records to rank 0 (cluster/rank_job.h).
  std::unique_ptr<OutputFile> single_out;
  std::unique_ptr<RankJob> rank_job;
  std::function<bool(size_t)> not_here;
  if (world.size() == 1) {
    single_out = std::make_unique<OutputFile>(o.output, identity);
    not_here = [](size_t) { return false; };  // plans for the whole file, as on resume
  } else {
    rank_job = std::make_unique<RankJob>(
        world, jobs, rank_job_hash(prompts, gen, *model, numerics, jobs.size()),
        [&] { return std::make_unique<OutputFile>(o.output, identity); }, stderr_is_tty());
    not_here = [&](size_t i) { return rank_job->owners()[i] != world.rank(); };
    // Over several hosts the offload directory may be one shared path (a
    // relative default in a shared working directory): each host gets its
    // own subdirectory, so no two hosts write one weight pack or KV file.
    if (rank_job->n_hosts() > 1 && !eo.offload_dir.empty()) {
      eo.offload_dir = (std::filesystem::path(eo.offload_dir) / world.host()).string();
      offload.offload_dir = eo.offload_dir;
    }
  }
  // The placement plans for the longest prompt and generation of the file
  // (under MPI: of this rank's share).
  // The jobs the plan leaves out (by position in `jobs`).
  const auto not_planned = [&](size_t i) {
    return !jobs[i].skipped.empty() || not_here(jobs[i].index);
  };
  RunShape shape;
  int64_t n_to_run = 0, prompt_sum = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (not_planned(i)) continue;
    const Job& j = jobs[i];
    ++n_to_run;
    prompt_sum += static_cast<int64_t>(j.tokens.size());
    shape.max_prompt = std::max<int64_t>(shape.max_prompt, static_cast<int64_t>(j.tokens.size()));
    shape.gen = std::max<int64_t>(shape.gen, j.max_new_tokens);
  }
  shape.mean_prompt = n_to_run > 0 ? static_cast<double>(prompt_sum) / n_to_run : 0;
  shape.max_block = std::max<int64_t>(1, n_to_run);
  shape.sharing = planned_sharing(jobs, not_planned, eo.prefix_sharing ? eo.page_size : 0);
  o.speculation.apply_to_plan(shape, offload.policy, /*pilot_ok=*/true);
  if (rank_job) {
    spdlog::log(world.rank() == 0 ? spdlog::level::info : spdlog::level::debug,
                "{}: {} of {} prompts to run", world.where(), n_to_run, jobs.size());
  } else {
    spdlog::info("{} prompts from {}, {} to run", jobs.size(), o.prompts,
                 jobs.size() - single_out->n_done());
  }
  RunPlan plan;
  std::unique_ptr<Engine> engine;
  double pilot_draft_s = 0;  // the draft model's seconds in the pilot
  auto plan_and_build = [&] {
    if (o.speculation.pilot()) {
      // The acceptance the plan needs, measured: the plan without it, a
      // block of the first prompts, then the plan with it.
      EngineOptions pe = eo;
      OffloadFlags pilot_flags = offload;
      pilot_flags.trace_path.clear();
      pilot_flags.apply(pe, *model, shape);
      SpeculationFlags::after_plan(pe, gen);
      const std::unique_ptr<Engine> pilot = make_engine(*model, pe);
      shape.draft_accepted =
          pilot_acceptance(*pilot, *tokenizer, jobs, not_planned, gen, draft.drafter.get());
      pilot_draft_s = draft.seconds();
    }
    plan = offload.apply(eo, *model, shape);
    SpeculationFlags::after_plan(eo, gen);
    engine = make_engine(*model, eo);
  };
  if (rank_job) {
    rank_job->first_on_host_then_others(plan_and_build);
  } else {
    plan_and_build();
  }
  RecordSink& sink = rank_job ? rank_job->sink() : *single_out;
  const RunSummary summary = run_jobs(*engine, *tokenizer, jobs, gen, &sink, draft.drafter.get());
  draft.log_stats();

  RunReport report = plan_report(
      plan, *model, o.model, eo, shape.mean_prompt, shape.gen,
      measured_speculation(engine->stats(), summary.n_sequences, draft.seconds() - pilot_draft_s),
      measured_sharing(engine->stats(), summary.n_sequences));
  report.n_prompts = summary.n_prompts;
  OutputFile* out = rank_job ? rank_job->output() : single_out.get();
  if (out) report.n_prompts_resumed = static_cast<int64_t>(out->n_resumed());
  report.n_sequences = summary.n_sequences;
  report.total_s = summary.total_s;
  report.engine = engine->stats();
  report.draft_s = draft.seconds() - pilot_draft_s;
  if (rank_job) {
    nlohmann::ordered_json mine = report.to_json();
    mine["rank"] = world.rank();
    mine["host"] = world.host();
    const auto ranks = rank_job->finish_ranks(mine);
    if (world.rank() == 0) {
      const nlohmann::ordered_json job = job_report(ranks);
      print_job_report(job, stdout);
      if (!o.report.empty()) {
        write_file_atomically(
            o.report,
            job.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n",
            "the report");
      }
    }
  } else {
    report.print(stdout);
    if (!o.report.empty()) report.write_json(o.report);
  }
  offload.finish();
  if (world.rank() == 0) spdlog::info("wrote {}", o.output);
  return 0;
}

// Runs the command; under MPI, an error on any rank is printed with the
// rank and host and ends the whole job (no rank is left waiting).
int run_in_world(const Options& o) {
  MpiWorld world;
  if (world.size() == 1) return run(o, world);
  if (world.rank() != 0 && spdlog::get_level() < spdlog::level::warn) {
    spdlog::set_level(spdlog::level::warn);  // rank 0 speaks for the job
  }
  std::string error;
  try {
    return run(o, world);
  } catch (const Error& e) {
    error = e.what();
  } catch (const std::bad_alloc&) {
    error = "out of memory; lower the batch size or the memory budgets";
  } catch (const std::exception& e) {
    error = fmt::format("internal error: {}", e.what());
  }
  std::fflush(stdout);
  std::fprintf(stderr, "strata: error: %s: %s\n", world.where().c_str(), error.c_str());
  std::fflush(stderr);
  world.abort(1);
}

const Command kGenerate{
    "generate",
    "Generate a completion for every prompt of a file (JSONL out, input order); under mpirun or "
    "srun the ranks split the prompts and rank 0 writes the output",
    10, [](CLI::App& sub) -> Runner {
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
      sub.add_option("--threads", o->threads,
                     "CPU threads (default: all cores; under MPI the host's cores shared by its "
                     "ranks)");
      sub.add_option("--report", o->report, "Also write the run report as JSON to this file");
      o->offload.add(sub, true);  // before compression: it owns --offload-dir
      o->compression.add(sub);
      o->speculation.add(sub);
      sub.add_flag("--no-prefix-sharing", o->no_prefix_sharing,
                   "Compute and store every prompt's KV in full, also the whole pages it shares "
                   "with other prompts of its block (by default computed once)");
      return [o]() { return run_in_world(*o); };
    }};

}  // namespace
}  // namespace strata::cli
