// The batch-job driver: from a prompt file to output records, on top of an
// Engine. In order:
//   1. prepare_jobs: per prompt, the chat template (--chat), tokenization,
//      per-prompt overrides, and the context check. All of it happens before
//      any compute, so a bad prompt fails the run at once.
//   2. plan_blocks: prompts sorted by token count (longest first, then input
//      order) and cut into blocks of engine.block_size(), so the sequences of
//      a block have similar lengths; when the engine shares prompt prefixes,
//      prompts sharing whole pages follow one another
//      (kv/shared_prefix.h: order_for_sharing), so they share a block.
//   3. run_jobs: engine.run_block per block; the StepFn samples each active
//      sequence (SeqSampler, stream (seed, input index)), applies the stop
//      rules (StopChecker), and when a sequence finishes its record goes to
//      the OutputFile at once. At the end OUTPUT is written in input order.
//      With speculation a sequence's step has a row per fed token: the
//      rows are sampled in order while each choice confirms the next draft
//      token, then every sequence that goes on asks the drafter
//      (generate/drafter.h: prompt lookup or a draft model) in one call.
//
// Prompts longer than the context: by default an Error naming the prompt id
// and the lengths; with skip_long a warning, and the prompt's record says
// finish_reason "skipped" with an "error" field (every input line still gets
// exactly one output record). A prompt whose max_new_tokens does not fit the
// context is cut to what fits and ends with finish_reason "length".
//
// An OpenAI batch file (prompt_file.h) is answered line by line: a request
// with a problem, a prompt longer than the context, or a chat request the
// chat template cannot render (none, a syntax error, raise_exception) gets
// an error answer
// (openai_response.h) and the job goes on; chat requests always go through
// the model's chat template (--chat and --system are refused with them).
//
// Sampling sees the first min(model, tokenizer) vocabulary ids: padding
// rows of an embedding beyond the tokenizer have no text and are never drawn.
//
// Output record fields, in this order: id, completion, prompt_tokens,
// completion_tokens, finish_reason, then completion_ids with --ids. OpenAI
// requests are answered in their own shape (openai_response.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "generate/engine.h"
#include "generate/output_file.h"
#include "generate/prompt_file.h"
#include "generate/report.h"
#include "generate/sampler.h"

namespace strata {

class Drafter;
class Model;
class Tokenizer;

// The tokenizer of a loaded model: from its GGUF metadata, or from the
// tokenizer files of its Hugging Face directory.
std::unique_ptr<Tokenizer> tokenizer_for(const Model& model);

// The compute dtype for `requested` ("f32", "bf16", or "" for the default:
// bf16 where the CPU multiplies bf16 natively, f32 elsewhere). Logs the
// reason for a default choice; throws Error for another name.
DType choose_compute_dtype(std::string_view requested, bool native_bf16);

// The model's identity for the resume check: the name, size and
// modification time of each of its files (not the path it was reached by);
// without the times when `with_mtime` is false.
std::string model_identity(const Model& model, bool with_mtime = true);

struct GenerateOptions {
  SamplingParams sampling;
  uint64_t seed = 0;
  int32_t max_new_tokens = 128;
  std::vector<std::string> stop;      // default stop strings (a prompt's "stop" replaces them)
  bool chat = false;                  // render prompts with the model's chat template
  std::optional<std::string> system;  // system message with chat (a prompt's "system" wins)
  bool ids = false;                   // add completion_ids to the records
  bool skip_long = false;             // skip prompts longer than the context with a warning
  bool ignore_eos = false;            // never stop at EOS (bench: exactly max_new_tokens)
  bool progress = false;              // progress line on stderr
  std::string response_model;         // the model's name in OpenAI answers
  std::string chat_template_file;     // --chat-template: overrides the model's template
  // Speculative decoding (run_jobs' drafter; prompt lookup by default): draft
  // tokens proposed per sequence and step, verified by the engine (at most
  // EngineOptions::max_draft_tokens of them); 0: none. The records are the
  // same as without: every token is still the sampler's choice from the
  // target's logits, in order, and a draft token is kept only when that
  // choice equals it (so the random streams are consumed as without).
  int32_t speculate_tokens = 0;
};

// One prompt, ready to run.
struct Job {
  size_t index = 0;  // input order
  nlohmann::json id;
  std::vector<int32_t> tokens;  // the prompt after template and tokenization
  int32_t max_new_tokens = 0;   // after fitting the context
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::string skipped;  // non-empty: why it does not run (its record says so)
  // OpenAI batch requests: where the request went, its own random stream,
  // and the code of the error that answers it instead (with `skipped`).
  Endpoint endpoint = Endpoint::kNone;
  std::optional<uint64_t> seed;
  std::string error_code;
};

// Step 1. `n_ctx`: the context length of the model; `model_name` for messages.
std::vector<Job> prepare_jobs(const PromptFile& prompts, const Tokenizer& tokenizer, int64_t n_ctx,
                              const GenerateOptions& options, const std::string& model_name);

// Step 2: the job indices (positions in `jobs`) of each block. Jobs for which
// `skip(i)` is true (done already, or skipped) are left out. `shared_page`:
// Engine::shared_prefix_page (0: no sharing).
std::vector<std::vector<size_t>> plan_blocks(std::span<const Job> jobs, int64_t block_size,
                                             const std::function<bool(size_t)>& skip,
                                             int64_t shared_page = 0);

// What the blocks of a run of `jobs` (those not skipped, in plan_blocks'
// order) share of their prompts, for each block size: per sequence the
// prompt tokens its prefill does not compute, the tokens of a block's prefix
// step and the share of blocks that run one, as the engine groups a block's
// prompts (kv/shared_prefix.h) and a run measures it (generate/report.h:
// measured_sharing; sequences that finish early aside). The plan's cost
// model takes it (plan/run_plan.h: RunShape::sharing). All 0 when
// `shared_page` is 0. `kept_across_blocks`: the engine keeps a prefix for
// the next block (offload/block_state.h), whose group with it takes it
// instead of a prefix step (the engine's default; it lets the prefix go
// before a block that needs a larger KV file); false counts a prefix step
// in every block that shares. The result reads `jobs`, which must outlive
// it.
std::function<SharingRates(int64_t block_size)> planned_sharing(
    std::span<const Job> jobs, const std::function<bool(size_t)>& skip, int64_t shared_page,
    bool kept_across_blocks = true);

// The record of a job that ran (or was skipped: finish_reason "skipped"),
// in the shape of its input format.
OrderedJson make_record(const Job& job, const std::string& completion,
                        std::span<const int32_t> completion_ids, const char* finish_reason,
                        const GenerateOptions& options);

// What run_jobs measured.
struct RunSummary {
  int64_t n_prompts = 0;    // jobs computed in this run
  int64_t n_sequences = 0;  // sequences handed to the engine
  int64_t generated_tokens = 0;
  double total_s = 0;  // wall time from the first block to the last record
};

// Step 3. Runs every job that `out` has not recorded yet (out may be null:
// bench, nothing is written), then finishes `out`. With
// options.speculate_tokens > 0 the drafts come from `drafter`, or from
// prompt lookup (NgramDrafter) when it is null.
RunSummary run_jobs(Engine& engine, const Tokenizer& tokenizer, std::span<const Job> jobs,
                    const GenerateOptions& options, RecordSink* out, Drafter* drafter = nullptr);

// `n_prompts` synthetic jobs for bench: `prompt_len` token ids each, drawn
// deterministically (fixed seed) from the vocabulary without special tokens,
// every job generating exactly `gen_len` tokens (greedy; run with ignore_eos).
// The first `shared_len` ids are the same in every prompt (a shared prefix).
std::vector<Job> synthetic_jobs(const Tokenizer& tokenizer, int64_t n_vocab, int64_t n_prompts,
                                int64_t prompt_len, int32_t gen_len, int64_t shared_len = 0);

// The hash of everything that changes the records: the resume check.
// `model_identity` names the model (path and file sizes), `compute` the dtype.
uint64_t settings_hash(const GenerateOptions& options, const std::string& model_identity,
                       const std::string& compute);

// The progress line: "prompts 12/100  345.6 tok/s  ETA 1m23s", redrawn in
// place on stderr at most 4 times a second; nothing when disabled. With
// `line_every_s` > 0 it is written as a whole line instead, at most that
// often and once at the end (for a log file, or output an MPI launcher
// forwards).
class Progress {
 public:
  Progress(bool enabled, size_t total, size_t done_before, double line_every_s = 0);
  void update(size_t done, int64_t generated_tokens);
  void finish();

 private:
  void draw(size_t done, int64_t generated_tokens);
  bool enabled_;
  size_t total_;
  size_t done_before_;
  double line_every_s_;
  double start_s_;
  double last_draw_s_ = -1;
  bool drawn_ = false;
};

// True when stderr is a terminal.
bool stderr_is_tty();

}  // namespace strata
