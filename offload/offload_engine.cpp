// The offload engine (offload_engine.h): its parts put together, the loop
// over the block schedule and its step verbs.
#include "offload/offload_engine.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "kv/kv_cache.h"
#include "kv/shared_prefix.h"
#include "model/forward.h"
#include "model/layer_weights.h"
#include "model/model.h"
#include "offload/block_budget.h"
#include "offload/block_state.h"
#include "offload/cpu_attention.h"
#include "offload/device.h"
#include "offload/device_support.h"
#include "offload/disk_io.h"
#include "offload/engine_options.h"
#include "offload/executor.h"
#include "offload/kv_staging.h"
#include "offload/pack_build.h"
#include "offload/pack_weights.h"
#include "offload/plan_fit.h"
#include "offload/schedule.h"
#include "offload/tier_budgets.h"
#include "offload/weight_placement.h"
#include "offload/weight_staging.h"
#include "offload/weight_store.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

std::string mb(uint64_t bytes) {
  return format_bytes(static_cast<double>(bytes));
}

// Makes `b` a buffer of `bytes` of the backend's memory (contents not kept),
// reallocating only when its size differs.
void resize_exact(Backend& be, DeviceBuffer& b, size_t bytes) {
  if (b.size() == bytes) return;
  b = DeviceBuffer();
  if (bytes > 0) b = be.alloc(bytes);
}

class OffloadEngine final : public Engine {
 public:
  OffloadEngine(const Model& model, const EngineOptions& options, ComputeDevice device);
  ~OffloadEngine() override;

  const ModelConfig& config() const override { return model_.config(); }
  int64_t block_size() const override { return opt_.gpu_batch_size * opt_.num_gpu_batches; }
  void forget_kept_prefix() override { block_->forget_kept_prefix(); }
  int64_t shared_prefix_page() const override { return opt_.prefix_sharing ? opt_.page_size : 0; }
  void run_block(std::span<const SeqInput> seqs, const StepFn& on_step) override {
    run(seqs, on_step, false);
  }
  std::vector<float> score(std::span<const int32_t> tokens) override;
  EngineStats stats() const override;

 private:
  void run(std::span<const SeqInput> seqs, const StepFn& on_step, bool all_rows);
  // The block's shape after checking every sequence (ids, context,
  // window), its prompts grouped for prefix sharing (BlockState::group).
  BlockShape check_sequences(std::span<const SeqInput> seqs, bool all_rows, int64_t* n_steps,
                             int64_t* longest);
  // Groups the block's prompts (BlockState::group) and sets the pages each
  // takes from another into `shape` (BlockShape::shared).
  void group_block(std::span<const SeqInput> seqs, bool all_rows, BlockShape* shape);
  void check_block(const BlockMemory& m, int64_t n_seqs, int64_t longest) const;
  void prepare_block(const BlockMemory& m);
  void check_ids(std::span<const int32_t> ids, const char* what, size_t index) const;
  void check_window(int64_t positions, const char* what, size_t index) const;
  int64_t pos_offset() const { return config().learned_pos ? config().pos_offset : -1; }
  KvGeometry kv_geometry() const;

  // ---- the step verbs ----
  bool begin_step(int32_t step);
  void store(const Transfer& t);
  void load(const Transfer& t);
  void compute(const ScheduleStep& s);
  void compute_embed(const ScheduleStep& s, BlockState::MicroState& m);
  void compute_layer(const ScheduleStep& s, BlockState::MicroState& m);
  void compute_head(BlockState::MicroState& m);
  void end_step(const StepFn& on_step, bool all_rows);

  const Model& model_;
  EngineOptions opt_;
  ComputeDevice dev_;
  Backend& backend_;
  MemoryMode mode_;
  Placement placement_;  // folded for the device
  Forward fwd_;
  std::unique_ptr<TierBudgets> tiers_;
  WeightPlacement wplace_;
  std::optional<Pack> pack_;
  std::unique_ptr<PackMatrices> pack_map_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<WeightStaging> wstage_;
  std::unique_ptr<DiskIo> disk_io_;
  std::unique_ptr<CpuAttention> attention_;  // MemoryMode::kCpuAttention only
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvStaging> kv_stage_;
  std::unique_ptr<Executor> exec_;
  std::unique_ptr<BlockState> block_;
  TransferPlan transfer_plan_;
  Reservation res_weights_, res_block_, res_block_host_, res_disk_weights_, res_disk_kv_;
  DeviceBuffer logits_;
  std::vector<float> logits_host_;
  std::vector<SeqAction> actions_;
  // The views of the step about to compute (set by compute before its span).
  GlobalWeights step_global_;
  LayerWeights step_layer_;
  Clock::time_point t_step_;
  EngineStats stats_;
};

KvGeometry OffloadEngine::kv_geometry() const {
  return kv_geometry_of(config(), opt_);
}

OffloadEngine::OffloadEngine(const Model& model, const EngineOptions& options, ComputeDevice device)
    : model_(model),
      opt_(options),
      dev_(std::move(device)),
      backend_(*dev_.backend),
      fwd_(backend_, model.config(), opt_.compute_dtype) {
  const ModelConfig& c = model.config();
  // ---- what runs on this device: decided once ----
  const PlanLayout layout = lay_out_plan(model, opt_, device_caps(backend_));
  placement_ = layout.placement;
  mode_ = layout.mode;
  wplace_ = layout.weights;
  const PackOptions& po = layout.pack;
  const KvGeometry geo = kv_geometry();
  const bool kv_disk = layout.kv_on_disk;
  const bool need_dir = layout.need_dir;

  // ---- budgets: the weights, and a planned block, before anything is built ----
  TierBudgets::Options to;
  static_cast<BudgetRequest&>(to) = layout.budget_request(opt_, dev_.default_device_bytes);
  to.device_name = backend_.name();
  tiers_ = std::make_unique<TierBudgets>(to, mode_, std::move(dev_.host_allocator));
  tiers_->check_weights(wplace_, opt_.draft_memory.fixed);
  if (opt_.plan_prompt_tokens > 0 && opt_.plan_new_tokens > 0) {
    const BlockShape full =
        BlockShape::full(opt_.gpu_batch_size, opt_.num_gpu_batches, opt_.plan_prompt_tokens,
                         opt_.plan_new_tokens, 1 + opt_.max_draft_tokens, opt_.plan_sharing);
    check_block(block_memory(c, geo, placement_, full, opt_.draft_memory), block_size(),
                opt_.plan_prompt_tokens + opt_.plan_new_tokens - 1);
  }

  // ---- build: pack, weights, staging, disk I/O, KV, executor ----
  TierPool& ram = tiers_->ram();
  if (wplace_.any_on_disk() || opt_.weight_dtype) {
    pack_ = open_or_build_pack(model, opt_.offload_dir, po);
    if (opt_.weight_dtype) pack_map_ = std::make_unique<PackMatrices>(*pack_);
  }
  weights_ = std::make_unique<WeightStore>(model, backend_, wplace_, pack_ ? &*pack_ : nullptr,
                                           pack_map_.get(), &ram);
  if (mode_ == MemoryMode::kHostMemory) {
    res_weights_ = ram.reserve(weights_->resident_matrix_bytes() + weights_->vector_bytes(),
                               "weights in RAM (matrices in place, f32 vectors)");
  } else {
    res_weights_ = tiers_->gpu()->reserve(weights_->device_bytes(),
                                          "weights kept on the device (matrices, f32 vectors)");
  }
  res_disk_weights_ = tiers_->disk().reserve(wplace_.bytes(Tier::kDisk), "weights on disk");
  wstage_ =
      std::make_unique<WeightStaging>(*weights_, pack_ ? &*pack_ : nullptr, mode_, backend_, ram);
  if (need_dir && (wplace_.any_on_disk() || kv_disk)) {
    DiskIoOptions dio;
    dio.fixed_buffers = wstage_->host_buffers();
    disk_io_ = std::make_unique<DiskIo>(dio);
  }
  if (mode_ == MemoryMode::kCpuAttention) {
    attention_ = std::make_unique<CpuAttention>(fwd_, backend_, dev_.copies.get(), opt_.threads,
                                                c.n_layer, opt_.num_gpu_batches, opt_.trace.get());
  }
  // The KV cache's pool: in RAM of the CPU attention's backend, else where
  // the device computes.
  Backend& kv_backend = attention_ ? attention_->host_backend() : backend_;
  kv_ = std::make_unique<KvCache>(kv_backend, geo,
                                  std::max(opt_.kv_budget_bytes, geo.bytes_per_page()), placement_);
  kv_stage_ = std::make_unique<KvStaging>(*kv_, mode_, backend_, ram, opt_.num_gpu_batches,
                                          attention_.get());
  exec_ = std::make_unique<Executor>(backend_, disk_io_.get(), opt_.trace, dev_.copies.get());
  block_ =
      std::make_unique<BlockState>(*kv_, opt_.gpu_batch_size, opt_.num_gpu_batches, pos_offset());
  block_->set_sparse(opt_.sparse_budget / opt_.page_size, opt_.sparse_keep_first);
  block_->set_max_draft(opt_.max_draft_tokens);
  block_->set_prefix_sharing(opt_.prefix_sharing);
  if (attention_) attention_->attach(*kv_, *block_);
  // What the weights hold now: in place and vectors (host memory), or the
  // cpu share's copies (otherwise), and the staging buffers.
  tiers_->set_fixed(
      opt_.draft_memory.fixed + (mode_ == MemoryMode::kHostMemory
                                     ? res_weights_.bytes() + wstage_->host_bytes()
                                     : ram.used()),
      mode_ == MemoryMode::kHostMemory ? 0 : weights_->device_bytes() + wstage_->device_bytes());

  transfer_plan_.weights_off.assign(static_cast<size_t>(c.n_layer + 2), false);
  for (int64_t col = 0; col < c.n_layer + 2; ++col) {
    transfer_plan_.weights_off[static_cast<size_t>(col)] = weights_->streams(col);
  }
  transfer_plan_.kv_off = kv_disk;
  // Tied: the embed column computes from the head's load (one unit for both).
  transfer_plan_.tied_embeddings = weights_->tied();
  STRATA_ASSERT(!weights_->tied() || weights_->disk_unit(0) == weights_->disk_unit(c.n_layer + 1));

  spdlog::info(
      "engine: {} on {}, compute {}, weights {}, KV {} in pages of {} tokens, block {} x {}",
      model.desc().path, backend_.name(), dtype_name(opt_.compute_dtype),
      opt_.weight_dtype ? dtype_name(*opt_.weight_dtype) : "as stored", dtype_name(opt_.kv_dtype),
      opt_.page_size, opt_.gpu_batch_size, opt_.num_gpu_batches);
  const bool host = mode_ == MemoryMode::kHostMemory;
  spdlog::info("engine: placement {}{}; RAM budget {} ({}), weights {} in RAM, {} on disk{}",
               placement_.describe(), host ? " (the CPU device: gpu and cpu are RAM)" : "",
               mb(ram.budget()), tiers_->ram_flags(),
               mb(wplace_.bytes(Tier::kGpu) + wplace_.bytes(Tier::kCpu)),
               mb(wplace_.bytes(Tier::kDisk)),
               need_dir ? fmt::format(" (offload dir {}, disk budget {})", opt_.offload_dir,
                                      mb(tiers_->disk().budget()))
                        : std::string());
  if (opt_.cpu_attention && host) {
    spdlog::info(
        "engine: --cpu-attention has no effect on the CPU device: attention runs where "
        "the KV is");
  }
}

OffloadEngine::~OffloadEngine() {
  try {
    if (exec_) exec_->drain();
    if (attention_) attention_->drain();
  } catch (const std::exception& e) {
    spdlog::debug("engine: a transfer failed while shutting down: {}", e.what());
  }
}

void OffloadEngine::check_ids(std::span<const int32_t> ids, const char* what, size_t index) const {
  const int64_t V = config().n_vocab;
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < 0 || ids[t] >= V) {
      fail(
          "{} {}: token {} has id {}, outside the vocabulary of {} ({} ids); check the tokenizer "
          "matches the model",
          what, index, t, ids[t], model_.desc().path, V);
    }
  }
}

void OffloadEngine::check_window(int64_t positions, const char* what, size_t index) const {
  const int64_t w = config().sliding_window;
  if (w > 0 && positions > w) {
    fail(
        "{} {} needs {} positions, but {} attends within a sliding window of {} tokens, which "
        "this engine does not implement; keep prompt + new tokens within {}",
        what, index, positions, model_.desc().path, w, w);
  }
}

void OffloadEngine::check_block(const BlockMemory& m, int64_t n_seqs, int64_t longest) const {
  const KvGeometry g = kv_geometry();
  tiers_->check_block(m, n_seqs, longest, opt_.kv_budget_bytes, g.bytes_per_page(), g.page_size,
                      wplace_.bytes(Tier::kDisk));
}

void OffloadEngine::prepare_block(const BlockMemory& m) {
  const ModelConfig& c = config();
  // The block's buffers, sized for it exactly (the KV pool's storage and the
  // forward's scratch only grow); one reservation covers what the backend
  // allocates, the staging buffers count themselves.
  res_block_.release();
  res_block_host_.release();
  kv_stage_->release();
  PagePool& pool = kv_->pool();
  pool.set_budget(std::max(m.kv_pages, kv_->geometry().bytes_per_page()));
  const uint64_t kv_pages = std::max(pool.storage_bytes(), m.kv_pages);
  uint64_t hidden = 0, host_attn = 0;
  for (int64_t k = 0; k < block_->n_micro_batches(); ++k) {
    const int64_t tokens = m.hidden_tokens[static_cast<size_t>(k)];
    const size_t want = static_cast<size_t>(tokens * c.n_embd) * sizeof(float);
    resize_exact(backend_, block_->micro_batch(k).hidden, want);
    hidden += want;
    host_attn += static_cast<uint64_t>(tokens * fwd_.q_dim()) * sizeof(float);
  }
  fwd_.reserve(m.group_tokens);
  resize_exact(backend_, logits_, m.logits);
  const uint64_t kv_stage =
      static_cast<uint64_t>(m.kv.stage_records) * kv_stage_->file().record_bytes();
  const uint64_t block = kv_pages + hidden + fwd_.workspace_bytes() + logits_.size();
  switch (mode_) {
    case MemoryMode::kHostMemory:
      res_block_ =
          tiers_->ram().reserve(block, "the block's KV cache, activations and working memory");
      break;
    case MemoryMode::kCpuAttention:
      // The KV cache in RAM, activations on the device, and each
      // micro-batch's q/k/v and attention rows on both.
      attention_->prepare(m.hidden_tokens, tiers_->ram());
      res_block_ =
          tiers_->gpu()->reserve(block - kv_pages + m.attention_rows,
                                 "the block's activations, working memory and attention rows");
      res_block_host_ = tiers_->ram().reserve(
          kv_pages + host_attn, "the block's KV cache and attention rows (CPU attention)");
      break;
    case MemoryMode::kDeviceMemory:
      res_block_ = tiers_->gpu()->reserve(block + 2 * kv_stage,
                                          "the block's KV cache and its staging, activations and "
                                          "working memory");
      break;
  }
  const uint64_t kv_file = kv_stage_->prepare(m.kv, opt_.offload_dir);
  wstage_->reset();
  res_disk_kv_.release();
  if (m.kv.disk_pages > 0) res_disk_kv_ = tiers_->disk().reserve(kv_file, "KV cache pages on disk");
}

BlockShape OffloadEngine::check_sequences(std::span<const SeqInput> seqs, bool all_rows,
                                          int64_t* n_steps, int64_t* longest) {
  const ModelConfig& c = config();
  const char* what = all_rows ? "scored sequence" : "prompt";
  BlockShape shape;
  shape.all_rows = all_rows;
  shape.decode_tokens = 1 + opt_.max_draft_tokens;
  shape.stored.resize(static_cast<size_t>(opt_.num_gpu_batches));
  shape.prompt.resize(static_cast<size_t>(opt_.num_gpu_batches));
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqInput& s = seqs[i];
    const int64_t p = static_cast<int64_t>(s.prompt.size());
    if (p == 0) fail("prompt {} is empty; every prompt needs at least one token", i);
    if (s.max_new_tokens < 1) {
      fail("prompt {} asks for {} new tokens; use 1 or more", i, s.max_new_tokens);
    }
    if (!all_rows && p + s.max_new_tokens > c.n_ctx) {
      fail(
          "prompt {} has {} tokens + {} new tokens = {}, more than the context of {} ({} "
          "tokens); shorten the prompt or lower the number of new tokens",
          i, p, s.max_new_tokens, p + s.max_new_tokens, model_.desc().path, c.n_ctx);
    }
    check_ids(s.prompt, what, i);
    // The last sampled token is never fed back: p + max_new - 1 positions.
    const int64_t stored = p + s.max_new_tokens - 1;
    check_window(stored, what, i);
    *n_steps = std::max<int64_t>(*n_steps, s.max_new_tokens);
    *longest = std::max(*longest, stored);
    // Sequences fill the micro-batches in order, gpu_batch_size each.
    const size_t k = i / static_cast<size_t>(opt_.gpu_batch_size);
    shape.stored[k].push_back(stored);
    shape.prompt[k].push_back(p);
  }
  group_block(seqs, all_rows, &shape);
  return shape;
}

void OffloadEngine::group_block(std::span<const SeqInput> seqs, bool all_rows, BlockShape* shape) {
  // The block's prefix groups (a prefix kept from the last block that this
  // one does not take goes now, before the check; what it takes counts as
  // its group's leader's), and the pages each prompt takes from another's.
  block_->group(seqs, all_rows);
  const std::vector<int64_t> refs = referenced_pages(block_->groups(), seqs.size(), opt_.page_size);
  shape->shared.clear();
  if (std::any_of(refs.begin(), refs.end(), [](int64_t r) { return r > 0; })) {
    shape->shared.resize(shape->stored.size());
    for (size_t i = 0; i < refs.size(); ++i) {
      shape->shared[i / static_cast<size_t>(opt_.gpu_batch_size)].push_back(refs[i]);
    }
  }
}

// ---- the block: the loop over the schedule ----

void OffloadEngine::run(std::span<const SeqInput> seqs, const StepFn& on_step, bool all_rows) {
  const int64_t n = static_cast<int64_t>(seqs.size());
  if (n == 0) return;
  if (n > block_size()) {
    fail("a block of {} sequences exceeds the engine's block size {} ({} x {})", n, block_size(),
         opt_.gpu_batch_size, opt_.num_gpu_batches);
  }
  STRATA_ASSERT(!all_rows || n == 1);
  int64_t n_steps = 0, longest = 0;
  BlockShape shape = check_sequences(seqs, all_rows, &n_steps, &longest);
  BlockMemory mem = block_memory(config(), kv_->geometry(), placement_, shape, opt_.draft_memory);
  if (block_->has_kept_prefix() && !kv_->disk_layout_holds(mem.kv)) {
    // The prefix kept from the last block holds records in the KV file:
    // this block takes the file's extents as they are, or if it needs more
    // slots than the file has, the prefix goes and is computed again.
    shape.disk_extent = kv_->disk_extent();
    mem = block_memory(config(), kv_->geometry(), placement_, shape, opt_.draft_memory);
  }
  if (block_->has_kept_prefix() && !kv_->disk_layout_holds(mem.kv)) {
    block_->forget_kept_prefix();
    shape.disk_extent = 0;
    group_block(seqs, all_rows, &shape);
    mem = block_memory(config(), kv_->geometry(), placement_, shape, opt_.draft_memory);
  }
  check_block(mem, n, longest);
  prepare_block(mem);
  block_->start(seqs, all_rows);
  const BlockState::Reused& kept = block_->taken_from_kept();
  stats_.reused_prompt_tokens += kept.tokens;
  stats_.kv_shared_bytes += static_cast<uint64_t>(kept.pages) * kv_->geometry().bytes_per_page();
  for (const SeqInput& s : seqs) stats_.prompt_tokens += static_cast<int64_t>(s.prompt.size());
  ++stats_.blocks;
  // However the block ends: transfers and CPU attention finish before the
  // pages and buffers they use are given back.
  struct Cleanup {
    OffloadEngine& e;
    ~Cleanup() {
      try {
        e.exec_->drain();
        if (e.attention_) e.attention_->drain();
      } catch (const std::exception& ex) {
        spdlog::debug("engine: a transfer failed while ending a block: {}", ex.what());
      }
      e.block_->clear();
    }
  } cleanup{*this};

  // A prefix step (shared prompt prefixes) comes before the prefill.
  TransferPlan transfers = transfer_plan_;
  if (kept.pages > 0) transfers.kv_first_load_step = 0;  // pages kept from the last block
  const std::vector<ScheduleStep> schedule = make_block_schedule(
      {n_steps + block_->prefill_step(), config().n_layer, opt_.num_gpu_batches}, transfers);
  for (size_t i = 0; i < schedule.size(); ++i) {
    const ScheduleStep& s = schedule[i];
    if ((i == 0 || s.step != schedule[i - 1].step) && !begin_step(s.step)) break;
    if (attention_) attention_->leave(s);
    for (const Transfer& t : s.stores) store(t);
    for (const Transfer& t : s.loads) load(t);
    compute(s);
    if (i + 1 == schedule.size() || schedule[i + 1].step != s.step) end_step(on_step, all_rows);
  }
  exec_->drain();
}

// ---- the step verbs ----

// Before the first compute of generation step `step`: the live sequences'
// KV slots and groups, and the KV to stage, before any transfer of the step
// is issued. False when every sequence has finished.
bool OffloadEngine::begin_step(int32_t step) {
  if (block_->n_live() == 0) return false;
  t_step_ = Clock::now();
  kv_stage_->retire(*exec_);  // disk pages completed in the last step leave RAM
  block_->begin_step(step);
  for (int64_t k = 0; k < block_->n_micro_batches(); ++k) {
    if (block_->micro_batch(k).live()) {
      kv_stage_->plan(k, block_->kv_sequences(k), block_->sparse_members(k), step);
    }
  }
  return true;
}

void OffloadEngine::store(const Transfer& t) {
  if (t.what == Transfer::What::kKv && block_->micro_batch(t.micro_batch).live()) {
    kv_stage_->store(t.column - 1, t.micro_batch, t.step, *exec_);
  }
}

void OffloadEngine::load(const Transfer& t) {
  if (t.what == Transfer::What::kWeights) {
    wstage_->load(t.column, t.step, *exec_);
  } else if (t.what == Transfer::What::kKv && block_->micro_batch(t.micro_batch).live()) {
    kv_stage_->load(t.column - 1, t.micro_batch, t.step, *exec_);
  }
}

// Waits for what the step's compute needs and points its views there (not
// timed), then computes it as one span of the compute queue.
void OffloadEngine::compute(const ScheduleStep& s) {
  BlockState::MicroState& m = block_->micro_batch(s.micro_batch);
  const int32_t step = block_->step();
  if (m.live()) {
    STRATA_ASSERT(static_cast<size_t>(m.n_tokens() * config().n_embd) * sizeof(float) <=
                  m.hidden.size());
    switch (s.kind) {
      case StageKind::kEmbed:
        // Tied embeddings: the head's buffer of the step before (the schedule's say).
        step_global_ = weights_->embed(wstage_->staged(s.weights_column, s.weights_step, *exec_));
        break;
      case StageKind::kLayer:
        kv_stage_->stage(s.layer, s.micro_batch, step, *exec_);
        step_layer_ =
            weights_->layer(s.layer, wstage_->staged(s.weights_column, s.weights_step, *exec_));
        break;
      case StageKind::kHead:
        step_global_ = weights_->head(wstage_->staged(s.weights_column, s.weights_step, *exec_));
        break;
    }
  }
  exec_->compute(s, [&] {
    if (!m.live()) return;
    switch (s.kind) {
      case StageKind::kEmbed:
        return compute_embed(s, m);
      case StageKind::kLayer:
        return compute_layer(s, m);
      case StageKind::kHead:
        return compute_head(m);
    }
  });
}

void OffloadEngine::compute_embed(const ScheduleStep& s, BlockState::MicroState& m) {
  const int64_t E = config().n_embd;
  for (int64_t gi = 0; gi < m.n_groups; ++gi) {
    BlockState::Group& gr = m.groups[static_cast<size_t>(gi)];
    gr.dev = upload_micro_batch(backend_, gr.host, gr.meta);
    gr.dev.on_selected = kv_stage_->listener(s.micro_batch);  // sparse layers' disk reads
    fwd_.embed(step_global_, gr.dev, m.hidden.as<float>() + gr.token0 * E);
  }
}

void OffloadEngine::compute_layer(const ScheduleStep& s, BlockState::MicroState& m) {
  if (attention_) return attention_->start(s, step_layer_);
  const int64_t E = config().n_embd;
  const KvLayer kv = kv_->pool().layer(s.layer);
  for (int64_t gi = 0; gi < m.n_groups; ++gi) {
    BlockState::Group& gr = m.groups[static_cast<size_t>(gi)];
    fwd_.layer(s.layer, step_layer_, kv, gr.dev, m.hidden.as<float>() + gr.token0 * E);
  }
}

void OffloadEngine::compute_head(BlockState::MicroState& m) {
  const int64_t E = config().n_embd, V = config().n_vocab;
  for (int64_t gi = 0; gi < m.n_groups; ++gi) {
    const BlockState::Group& gr = m.groups[static_cast<size_t>(gi)];
    fwd_.head(step_global_, gr.dev, m.hidden.as<float>() + gr.token0 * E,
              logits_.as<float>() + gr.row0 * V);
  }
}

// After the last compute of a step (outside its compute span): the logits
// to the caller, then finished sequences leave the block.
void OffloadEngine::end_step(const StepFn& on_step, bool all_rows) {
  if (attention_) attention_->flush();
  const int32_t step = block_->step(), prefill = block_->prefill_step();
  const double dt = std::chrono::duration<double>(Clock::now() - t_step_).count();
  (step <= prefill ? stats_.prefill_s : stats_.decode_s) += dt;
  if (step < prefill) {  // a prefix step: no logits for the caller
    const BlockState::Reused reused = block_->end_prefix_step();
    stats_.reused_prompt_tokens += reused.tokens;
    ++stats_.prefix_steps;
    stats_.prefix_step_tokens += reused.computed;
    stats_.kv_shared_bytes +=
        static_cast<uint64_t>(reused.pages) * kv_->geometry().bytes_per_page();
    return;
  }
  const int64_t V = config().n_vocab;
  const float* logits = logits_.as<float>();
  if (!backend_.memory_is_host()) {
    logits_host_.resize(static_cast<size_t>(block_->n_rows() * V));
    backend_.copy_to_host(logits_host_.data(), logits, logits_host_.size() * sizeof(float));
    logits = logits_host_.data();
  }
  const std::vector<int32_t>& active = block_->active();
  actions_.assign(active.size(), SeqAction{});
  on_step(step - prefill, active, logits, actions_);
  // A finished sequence's pages may still be read by their stores.
  if (block_->finishes_any(actions_)) kv_stage_->wait_retiring(*exec_);
  const BlockState::Kept kept = block_->end_step(actions_, V);
  if (all_rows) return;
  stats_.generated_tokens += kept.tokens;
  stats_.drafted_tokens += kept.drafted;
  stats_.accepted_tokens += kept.accepted;
  if (step > prefill) ++stats_.decode_steps;
}

std::vector<float> OffloadEngine::score(std::span<const int32_t> tokens) {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail("nothing to score: the token sequence is empty");
  if (n > c.n_ctx) {
    fail("scoring {} tokens exceeds the context of {} ({} tokens); use shorter chunks", n,
         model_.desc().path, c.n_ctx);
  }
  std::vector<SeqInput> in(1);
  in[0].prompt.assign(tokens.begin(), tokens.end());
  in[0].max_new_tokens = 1;
  std::vector<float> out;
  run(
      in,
      [&](int, std::span<const int32_t>, const float* logits, std::span<SeqAction> a) {
        out.assign(logits, logits + n * c.n_vocab);
        a[0].finished = true;
      },
      true);
  return out;
}

EngineStats OffloadEngine::stats() const {
  EngineStats s = stats_;
  exec_->add_stats(s);
  if (attention_) attention_->add_stats(s);
  s.kv_attended_bytes += block_->kv_attended_bytes();
  s.kv_skipped_bytes += block_->kv_skipped_bytes();
  const KvStaging::SparseReads& sr = kv_stage_->sparse_reads();
  s.sparse_hits += sr.hits;
  s.sparse_misses += sr.misses;
  s.sparse_unused += sr.unused;
  s.sparse_stall_s += sr.stall_s;
  s.peak_bytes["cpu"] = tiers_->ram().peak();
  if (tiers_->gpu()) s.peak_bytes["gpu"] = tiers_->gpu()->peak();
  if (tiers_->disk().peak() > 0) s.peak_bytes["disk"] = tiers_->disk().peak();
  return s;
}

}  // namespace

std::unique_ptr<Engine> make_engine(const Model& model, const EngineOptions& options) {
  const EngineOptions v = validated_options(options);
  return std::make_unique<OffloadEngine>(model, v, open_device(v.device, v.threads));
}

std::unique_ptr<Engine> make_engine(const Model& model, const EngineOptions& options,
                                    ComputeDevice device) {
  STRATA_ASSERT(device.backend != nullptr);
  return std::make_unique<OffloadEngine>(model, validated_options(options), std::move(device));
}

}  // namespace strata
