// The boundary between what generates text (driver, sampling, stopping,
// output) and what computes logits (forward, KV cache, placement, schedule).
// An Engine runs one *block* of sequences at a time to completion: prefill of
// every prompt, then decode steps, handing the logits of each step to the
// caller, which samples and decides which sequences stop. The engine never
// samples and never sees text.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/placement.h"
#include "model/config.h"

namespace strata {

class Trace;  // offload/trace.h

// What the caller decides for one sequence after a step.
//
// Speculative decoding: besides its next token the caller may propose
// `draft` tokens to follow it. The next decode step then feeds the sequence
// its next token and as many of the draft tokens as the engine takes (at
// most EngineOptions::max_draft_tokens, fewer near the sequence's end or
// where a draft token would complete a KV page that lives on disk), and
// hands out one logits row per fed token: row i predicts the token after
// fed token i. The caller keeps the first `accepted` draft tokens (those its
// own choice from the rows before confirms); the engine drops the KV rows of
// the rest before any of them reaches a slower tier.
struct SeqAction {
  int32_t next_token = -1;     // fed to the next decode step unless `finished`
  bool finished = false;       // the sequence leaves the block; its KV pages are freed
  int32_t accepted = 0;        // draft tokens of this step kept, 0 .. rows - 1
  std::vector<int32_t> draft;  // proposed tokens after next_token (speculation)
};

// Called after the prefill (step 0) and after every decode step.
//   active: indices into the block's sequences, one per logits row; a
//           sequence fed draft tokens has one row per fed token, consecutive
//   logits: [active.size(), n_vocab] f32, row r belongs to active[r]
//   out:    [active.size()], filled by the callee: one action per sequence,
//           in the entry of its first row (the others are ignored)
using StepFn = std::function<void(int step, std::span<const int32_t> active, const float* logits,
                                  std::span<SeqAction> out)>;

struct SeqInput {
  std::vector<int32_t> prompt;  // non-empty; prompt.size() + max_new_tokens <= n_ctx
  int32_t max_new_tokens = 0;   // upper bound; the caller may finish a sequence earlier
};

// Measured facts of the work an engine did, summed over blocks.
struct EngineStats {
  double prefill_s = 0;  // wall time of prefill steps
  double decode_s = 0;   // wall time of decode steps
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // tokens the caller kept: one per sequence and step, plus
                                 // its accepted draft tokens
  int64_t decode_steps = 0;      // decode steps (passes over the weights), summed over blocks
  // Prefix sharing: prompt tokens sequences took from a shared prefix
  // instead of computing them (the prefill computed prompt_tokens minus
  // these), and the KV bytes (every layer) of the pages they shared.
  int64_t reused_prompt_tokens = 0;
  uint64_t kv_shared_bytes = 0;
  // Blocks run, the prefix steps among them (a block's first pass computing
  // its shared prefixes once) and the tokens those computed.
  int64_t blocks = 0, prefix_steps = 0, prefix_step_tokens = 0;
  // Speculative decoding: draft tokens fed to decode steps (verified) and
  // those the caller accepted.
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  struct LinkPart {
    uint64_t bytes = 0;
    double busy_s = 0;
  };
  struct Link : LinkPart {
    // The same by what moved: "weights", "kv", "activations" (a link's
    // weights and KV can run at very different rates: a disk's small KV
    // reads wait behind the weight reads issued with them).
    std::map<std::string, LinkPart> by_kind;
  };
  std::map<std::string, Link> links;           // "disk->cpu", "cpu->gpu", ...
  std::map<std::string, double> queue_busy_s;  // "compute", "load", "store", ...
  std::map<std::string, uint64_t> peak_bytes;  // per tier: "gpu", "cpu", "disk"
  // Decode attention: KV bytes (K and V pages, every layer) attended, and
  // those sparse attention's page selection skipped (0 when dense).
  uint64_t kv_attended_bytes = 0, kv_skipped_bytes = 0;
  // Sparse attention over KV on disk: selected pages (one layer's K and V)
  // the previous step's selection had prefetched (hits) and those read
  // after the selection (misses), prefetched pages no selection took, and
  // the time compute waited for the misses.
  uint64_t sparse_hits = 0, sparse_misses = 0, sparse_unused = 0;
  double sparse_stall_s = 0;
};

// The largest batch (sequences per micro-batch) an engine accepts.
inline constexpr int64_t kMaxBatchSize = int64_t{1} << 20;

// The RAM a draft model of speculative decoding takes beside the engine
// (draft/draft_model.h: DraftModel::memory), which the engine counts in its
// RAM budget (offload/block_budget.h: draft_block_bytes).
struct DraftMemory {
  uint64_t fixed = 0;       // its weights, vectors and working memory, for the run
  uint64_t page_bytes = 0;  // one f32 KV page of all its layers; 0: no draft model
  int64_t page_size = 16;
  int64_t n_ctx = 0;       // its context length
  uint64_t row_bytes = 0;  // one logits row
  int64_t max_rows = 0;    // logits rows of one of its passes at most
};

// The KV pages each block of a run stores once (shared prompt prefixes), as
// the plan guarantees them for every block it hands over: at least `seqs`
// sequences of each block (counting those a short last block lacks) take
// their first `pages` pages or more from another sequence of the block
// (kv/shared_prefix.h: referenced_pages). The engine sizes a full block with
// it (offload/block_budget.h).
struct PlanSharing {
  int64_t seqs = 0;
  int64_t pages = 0;
};

struct EngineOptions {
  // The compute device: "cpu", or "cuda" / "cuda:N" (offload/device.h).
  std::string device = "cpu";
  DType compute_dtype = DType::kF32;  // f32, bf16 or i8 (int8 products with quantized
                                      // weights, CPU; kernels/cpu/matmul_int8.h)
  DType kv_dtype = DType::kF32;       // storage of the KV cache: f32, f16, bf16 or a q4/q8
                                      // format (values per token along head_dim, keys per
                                      // channel over each page: kernels/cpu/attention_quant.h)
  int64_t gpu_batch_size = 8;         // sequences per micro-batch
  int64_t num_gpu_batches = 1;        // micro-batches per block
  int64_t page_size = 16;             // tokens per KV page
  int threads = 0;                    // 0: all cores
  uint64_t kv_budget_bytes = 0;       // KV cache byte budget; 0: half of the RAM available at start
  // Weight matrices requantized into this q4/q8 format, read from a weight
  // pack in offload_dir (built there, or reused when current), so disk and
  // RAM hold the small form; nullopt: as the model stores them.
  std::optional<DType> weight_dtype;
  std::string offload_dir;  // directory of weight packs (and of data on the disk tier)

  // The shares of weights, KV cache and activations on the gpu and cpu
  // tiers, disk the rest (core/placement.h; default: everything where the
  // device computes). On a device that computes on host RAM (the CPU) gpu
  // and cpu are the same RAM.
  Placement placement;
  bool cpu_attention = false;  // decode attention over CPU-held KV on the CPU (a GPU device)
  // Sparse decode attention (QUEST; lossy, opt-in): from layer
  // kSparseFirstLayer on, a decode token of a sequence longer than this many
  // tokens attends, per kv head, over the pages its query bounds highest,
  // this many tokens' worth of pages (model/forward.h); 0: dense. At least
  // one page.
  int64_t sparse_budget = 0;
  bool sparse_keep_first = true;  // the first page (the attention sink) always kept
  // Speculative decoding: the most draft tokens (SeqAction::draft) a decode
  // step verifies per sequence; 0: none (a draft is ignored). Sizes the
  // block's activations for 1 + this many tokens per sequence. With sparse
  // attention each fed token selects its own pages (model/forward.h, the row
  // view). Not with a quantized KV cache (refused when the engine is made):
  // verification appends several keys per sequence at once.
  int64_t max_draft_tokens = 0;
  // The draft model's RAM (none without one), counted in the RAM budget.
  DraftMemory draft_memory;
  // Prefix sharing: prompts of a block that begin with the same whole KV
  // pages compute and store those pages once (kv/shared_prefix.h);
  // the others point their page tables at them.
  bool prefix_sharing = true;
  // Byte budgets of the tiers (--gpu-mem, --cpu-mem, --disk-mem); 0: the
  // default (cpu: the RAM available at start; disk: the free space in
  // offload_dir). On the CPU device the RAM budget is gpu_mem + cpu_mem.
  uint64_t gpu_mem = 0, cpu_mem = 0, disk_mem = 0;
  // The largest block the run will hand over (prompt tokens and new tokens
  // per sequence, at most); when set, every tier's budget is checked for a
  // full block of them when the engine is made, before any work.
  int64_t plan_prompt_tokens = 0, plan_new_tokens = 0;
  // The KV pages every such block stores once (only with prefix_sharing).
  PlanSharing plan_sharing;
  // Records a span per compute step, load and store when set.
  std::shared_ptr<Trace> trace;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const ModelConfig& config() const = 0;
  // Sequences per block (gpu_batch_size x num_gpu_batches).
  virtual int64_t block_size() const = 0;
  // The page size (tokens) whose whole pages of a shared prompt prefix a
  // block computes once (EngineOptions::prefix_sharing); 0: none shared.
  // The driver puts prompts with shared prefixes in the same blocks.
  virtual int64_t shared_prefix_page() const = 0;

  // Runs `seqs` (at most block_size()) to completion. Throws Error for a prompt
  // that does not fit the context or a KV budget that cannot hold the block.
  virtual void run_block(std::span<const SeqInput> seqs, const StepFn& on_step) = 0;

  // Logits at every position of one sequence ([tokens.size(), n_vocab] f32,
  // row t predicts token t+1), for perplexity. Uses no cached state.
  virtual std::vector<float> score(std::span<const int32_t> tokens) = 0;

  virtual EngineStats stats() const = 0;
  // Lets go of a shared prefix kept from the last block (prefix sharing
  // across blocks), so that the next block starts as a run's first would.
  virtual void forget_kept_prefix() {}
};

// The implementation (forward, KV cache, placement, schedule) lives in
// offload/ (offload/engine.h: make_engine), which depends on this header, not
// the other way round.

}  // namespace strata
