// The offload engine (offload_engine.h): placement, budgets, and the block
// run as hooks of the executor.
#include "offload/offload_engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/forward.h"
#include "model/layer_weights.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "offload/aligned_buffer.h"
#include "offload/device.h"
#include "offload/disk_io.h"
#include "offload/engine.h"
#include "offload/executor.h"
#include "offload/kv_file.h"
#include "offload/measure.h"
#include "offload/pack_build.h"
#include "offload/pack_weights.h"
#include "offload/weight_placement.h"
#include "offload/schedule.h"
#include "offload/tier_pool.h"
#include "offload/trace.h"
#include "offload/weight_store.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

std::string mb(uint64_t bytes) {
  return format_bytes(static_cast<double>(bytes));
}

KvGeometry kv_geometry(const ModelConfig& c, const EngineOptions& o) {
  KvGeometry g;
  g.n_layer = c.n_layer;
  g.n_kv_head = c.n_kv_head;
  g.head_dim = c.head_dim;
  g.dtype = o.kv_dtype;
  g.page_size = o.page_size;
  return g;
}

// Tokens the forward computes at once: a micro-batch's sequences are cut
// into groups of at most this many tokens (a longer prompt is a group of its
// own), which bounds the forward's scratch; matmuls are as efficient at this
// height as at any larger one.
constexpr int64_t kMaxGroupTokens = 4096;

// Makes `b` a buffer of `bytes` of the backend's memory (contents not kept),
// reallocating only when its size differs.
void resize_exact(Backend& be, DeviceBuffer& b, size_t bytes) {
  if (b.size() == bytes) return;
  b = DeviceBuffer();
  if (bytes > 0) b = be.alloc(bytes);
}

// The largest group the cut above makes of sequences with these new-token
// counts.
int64_t largest_group(const std::vector<int64_t>& n_new) {
  int64_t best = 0, cur = 0;
  bool open = false;
  for (int64_t n : n_new) {
    if (!open || cur + n > kMaxGroupTokens) {
      cur = 0;
      open = true;
    }
    cur += n;
    best = std::max(best, cur);
  }
  return best;
}

// Scratch the forward holds for micro-batches of up to t tokens
// (Forward::reserve).
uint64_t forward_scratch_bytes(const ModelConfig& c, int64_t t) {
  const int64_t q = c.n_head * c.head_dim, kv = c.n_kv_head * c.head_dim;
  const int64_t per_token = 2 * c.n_embd + (q + 2 * kv) + q + 2 * c.n_ff;
  return static_cast<uint64_t>(t * per_token + 5 * 16) * sizeof(float);
}

// RAM a block needs beyond the weights, by what it is for.
struct BlockMemory {
  KvNeeds kv;
  uint64_t kv_pages = 0;     // backed pages
  uint64_t kv_staging = 0;   // both staging buffers
  uint64_t hidden = 0;       // activations of every micro-batch
  uint64_t scratch = 0;      // the forward's working memory
  uint64_t logits = 0;
  uint64_t kv_disk = 0;      // bytes of the KV file
  int64_t group_tokens = 0;  // largest group
  std::vector<int64_t> hidden_tokens;  // [n_mb] tokens of each micro-batch's largest step
  // Activations, the forward's scratch and the logits: always where the
  // device computes.
  uint64_t working() const { return hidden + scratch + logits; }
  // Bytes of the compute device's memory with the KV cache there too (all
  // of a block on the CPU device).
  uint64_t device() const { return kv_pages + kv_staging + working(); }
};

class OffloadEngine final : public Engine {
 public:
  OffloadEngine(const Model& model, const EngineOptions& options, ComputeDevice device);
  ~OffloadEngine() override;

  const ModelConfig& config() const override { return model_.config(); }
  int64_t block_size() const override { return opt_.gpu_batch_size * opt_.num_gpu_batches; }
  void run_block(std::span<const SeqInput> seqs, const StepFn& on_step) override {
    run(seqs, on_step, false);
  }
  std::vector<float> score(std::span<const int32_t> tokens) override;
  EngineStats stats() const override;

 private:
  struct Group {
    MicroBatchHost host;
    MicroBatch dev;
    DeviceBuffer meta;   // device copy of `host` (unused when memory is host memory)
    int64_t token0 = 0;  // its first row in the micro-batch's hidden
    int64_t row0 = 0;    // its first row in the step's logits
  };
  // The staged KV of one micro-batch in a generation step: the unbacked
  // pages of its sequences, each with a record in a staging buffer (those not
  // fresh are loaded from disk for each layer; fresh ones are written by the
  // layer and stored), and the backed disk pages completed in this step
  // (stored from RAM after each layer).
  struct KvStage {
    std::vector<int32_t> pages;  // [n_records] in record order
    std::vector<uint8_t> fresh;  // [n_records]
    std::vector<int32_t> completed_backed;
  };
  struct MicroState {
    std::vector<int32_t> members;  // block indices of its live sequences, ascending
    int64_t row0 = 0;              // its first row in the step's logits
    std::vector<Group> groups;     // [n_groups] this step's groups (the vector only grows)
    int64_t n_groups = 0;
    DeviceBuffer hidden;  // [n_tokens, n_embd] f32, kept between columns
    KvStage stage;
  };
  struct SeqState {
    int32_t kv = -1;       // KV sequence, -1 once finished
    int32_t next = -1;     // token fed to the next decode step
    int32_t produced = 0;  // logits rows handed out so far
  };
  // A weight staging buffer and the column load it holds.
  struct WeightSlot {
    PoolBlock mem;
    int64_t column = -1;
    int32_t step = -1;
    uint64_t load = 0;  // its number on the load queue
  };
  // A KV staging buffer: which layer compute it serves, the load that fills
  // it, and the last store reading from it.
  struct KvSlot {
    int64_t layer = -1, micro_batch = -1;
    int32_t step = -1;
    uint64_t load = 0, last_store = 0;
  };

  void run(std::span<const SeqInput> seqs, const StepFn& on_step, bool all_rows);
  BlockMemory block_memory(const std::vector<std::vector<int64_t>>& stored,
                           const std::vector<std::vector<int64_t>>& prompt, bool all_rows) const;
  // Memory that stays for the whole run (weights, vectors, staging): in RAM,
  // and in device memory (0 on a device computing on RAM).
  uint64_t fixed_ram() const { return fixed_ram_; }
  uint64_t fixed_device() const { return fixed_device_; }
  void check_block(const BlockMemory& m, int64_t n_seqs, int64_t longest) const;
  void prepare_block(const BlockMemory& m);
  std::string ram_flags() const;
  // The backend whose memory holds the KV pages and runs attention.
  Backend& kv_backend() { return host_be_ ? *host_be_ : backend_; }
  // CPU attention (cpu_attention_), pipelined over the micro-batches of a
  // layer: start() queues the layer's first half (q, k, v) of micro-batch
  // k on the device, their copy down, and the KV append and attention on
  // the attention queue's thread; then finishes the previous micro-batch
  // (waits for its attention, copies the rows up, queues the layer's second
  // half). So while the CPU attends micro-batch k the device works on k-1's
  // second half and k+1's first. flush() finishes the one still pending.
  void start_cpu_attention(const ScheduleStep& ss, const LayerWeights& w);
  void finish_cpu_attention(int64_t k);
  void flush_cpu_attention();
  // Waits until the CPU attention of (layer, k) has written its KV.
  void wait_cpu_attention(int64_t layer, int64_t k);
  void check_ids(std::span<const int32_t> ids, const char* what, size_t index) const;
  void check_window(int64_t positions, const char* what, size_t index) const;
  int64_t pos_offset() const { return config().learned_pos ? config().pos_offset : -1; }

  // Transfers and compute of the executor's hooks.
  void load_weights(int64_t column, int32_t step);
  const std::byte* staged_weights(int64_t column, int32_t step);
  void verify_disk_share(int64_t column, const std::byte* host);
  void load_kv(int64_t layer, int64_t k, int32_t step);
  void store_kv(int64_t layer, int64_t k, int32_t step);
  KvSlot& kv_slot_for(int64_t layer, int64_t k, int32_t step);
  void stage_kv(int64_t layer, int64_t k, int32_t step);
  std::byte* kv_record(const KvSlot& s, size_t r);
  // KV pages and staging records are host memory.
  bool kv_host() const { return unified_ || cpu_attention_; }
  // Where KV pages and records are, for the mover.
  Place kv_place(void* p) const { return Place::memory(kv_host() ? Tier::kCpu : Tier::kGpu, p); }
  // The host relay of record r (null when the records are host memory).
  std::byte* kv_relay(const KvSlot& s, size_t r);

  const Model& model_;
  EngineOptions opt_;
  ComputeDevice dev_;
  Backend& backend_;
  bool unified_;             // the device computes on host RAM
  // Attention on the CPU beside a device with memory of its own
  // (--cpu-attention): the KV cache lives in RAM, in a pool of host_be_,
  // and each layer's KV append and attention run there.
  bool cpu_attention_ = false;
  std::unique_ptr<Backend> host_be_;
  // The CPU attention of one micro-batch in one layer.
  struct AttnJob {
    int64_t layer = -1;
    int32_t step = -1;
    uint64_t n = 0;         // its number on attn_q_
    bool finished = true;   // its second half is queued
    LayerWeights w;         // the views the second half reads
    DeviceBuffer qkv_dev;   // [tokens, qkv_dim]
    DeviceBuffer attn_dev;  // [tokens, q_dim]
    PoolBlock qkv;          // [tokens, qkv_dim] in RAM (pinned on a GPU: the copy down is DMA)
    std::vector<float> attn;  // [tokens, q_dim]
    size_t qkv_bytes = 0;   // of this job
    double down_s = 0;  // time of the copy down (written by the job)
  };
  std::vector<AttnJob> attn_jobs_;        // [n_mb]
  std::unique_ptr<TransferQueue> attn_q_;  // "cpu attention": one thread, jobs in order
  std::vector<uint64_t> attn_job_of_;      // [n_layer * n_mb] last job of each (layer, k)
  int64_t attn_pending_ = -1;              // micro-batch whose second half is not queued
  Placement frac_;  // folded for the device
  std::unique_ptr<TierPool> ram_, disk_;
  std::unique_ptr<TierPool> gpu_;  // device memory (accounting only); null when unified_
  WeightPlacement wplace_;
  std::optional<Pack> pack_;
  std::unique_ptr<PackMatrices> pack_map_;
  // Columns whose disk share has had its checksums checked (on first read).
  std::vector<uint8_t> column_verified_;
  DiskFile pack_file_;
  std::unique_ptr<DiskIo> disk_io_;
  std::unique_ptr<WeightStore> weights_;
  Forward fwd_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvFile> kv_file_;  // the pages homed on disk
  std::unique_ptr<Executor> exec_;
  TransferPlan transfer_plan_;
  uint64_t kv_cap_bytes_ = 0;  // the KV pool's own cap (kv_budget_bytes)

  Reservation res_weights_, res_block_, res_block_host_, res_disk_weights_, res_disk_kv_;
  uint64_t fixed_ram_ = 0, fixed_device_ = 0;
  // Weight staging: host buffers for disk reads; on a device whose memory
  // is not RAM also a device buffer per slot that streamed columns land in.
  std::array<WeightSlot, 2> wslots_;
  std::array<DeviceBuffer, 2> wdev_;
  uint64_t n_weight_loads_ = 0;
  // KV staging records: in RAM (kv_host()), else in device memory with a
  // host mirror of each (pinned on a GPU) that relays their disk reads and
  // writes at the same offsets.
  std::array<PoolBlock, 2> kv_mem_;
  std::array<DeviceBuffer, 2> kv_dev_;
  std::array<KvSlot, 2> kv_slots_;
  // [n_layer * n_mb] the last store of each layer's KV of each micro-batch:
  // a load of those records waits for it (the queues are separate).
  std::vector<uint64_t> kv_last_store_;
  std::vector<MicroState> mbs_;
  DeviceBuffer logits_;
  std::vector<float> logits_host_;
  EngineStats stats_;
};

OffloadEngine::OffloadEngine(const Model& model, const EngineOptions& options,
                             ComputeDevice device)
    : model_(model),
      opt_(options),
      dev_(std::move(device)),
      backend_(*dev_.backend),
      unified_(backend_.memory_is_host()),
      fwd_(backend_, model.config(), opt_.compute_dtype) {
  const ModelConfig& c = model.config();
  const bool unified = unified_;
  opt_.placement.validate("placement");
  frac_ = opt_.placement.folded(unified);
  if (frac_.disk(DataKind::kAct) > 1e-12) {
    fail(
        "placement puts {:.4g}% of the activations on disk, which this engine does not support; "
        "keep them in RAM (--percent ... ACT_GPU ACT_CPU summing to 100)",
        100 * frac_.disk(DataKind::kAct));
  }
  if (!unified) {
    // On a device with memory of its own, activations and the KV pages the
    // ops read are in device memory; the off-device home of KV pages is the
    // disk (read into device staging per layer).
    if (frac_[Share::kActCpu] > 1e-12) {
      fail(
          "placement keeps {:.4g}% of the activations in CPU RAM; on {} this engine keeps them in "
          "device memory: use ACT_GPU 100 ACT_CPU 0 (--percent W_GPU W_CPU KV_GPU KV_CPU 100 0)",
          100 * frac_[Share::kActCpu], backend_.name());
    }
    cpu_attention_ = opt_.cpu_attention;
    if (cpu_attention_ && frac_[Share::kKvGpu] > 1e-12) {
      fail(
          "--cpu-attention runs attention on the CPU over a KV cache in RAM and on disk, but the "
          "placement keeps {:.4g}% of it on {}: use KV_GPU 0 (--percent W_GPU W_CPU 0 KV_CPU "
          "ACT_GPU ACT_CPU)",
          100 * frac_[Share::kKvGpu], backend_.name());
    }
    if (!cpu_attention_ && frac_[Share::kKvCpu] > 1e-12) {
      fail(
          "placement keeps {:.4g}% of the KV cache in CPU RAM; on {} attention then runs on the "
          "CPU: add --cpu-attention (with KV_GPU 0), or use KV_CPU 0 to keep KV pages in device "
          "memory and on disk",
          100 * frac_[Share::kKvCpu], backend_.name());
    }
    if (cpu_attention_) {
      host_be_ = std::make_unique<CpuBackend>(opt_.threads);
      attn_q_ = std::make_unique<TransferQueue>("cpu attention", opt_.trace.get());
      attn_jobs_.resize(static_cast<size_t>(opt_.num_gpu_batches));
      attn_job_of_.assign(static_cast<size_t>(c.n_layer * opt_.num_gpu_batches), 0);
    }
  }

  // ---- budgets ----
  const uint64_t ram_default = available_ram_bytes();
  uint64_t ram_budget = opt_.cpu_mem > 0 ? opt_.cpu_mem : ram_default;
  if (unified) ram_budget += opt_.gpu_mem;  // both tiers are this RAM
  ram_ = std::make_unique<TierPool>(
      Tier::kCpu, ram_budget,
      dev_.host_allocator ? std::move(dev_.host_allocator) : make_host_allocator());
  if (!unified) {
    const uint64_t gpu_budget = opt_.gpu_mem > 0 ? opt_.gpu_mem : dev_.default_device_bytes;
    if (gpu_budget == 0) {
      fail("{} reports no free device memory; pass --gpu-mem to say how much to use",
           backend_.name());
    }
    gpu_ = std::make_unique<TierPool>(Tier::kGpu, gpu_budget);
  }

  PackOptions po;
  po.weight_dtype = opt_.weight_dtype;
  wplace_ = place_weights(model.desc(), po, frac_);
  const KvGeometry geo = kv_geometry(c, opt_);
  const bool kv_disk = frac_.disk(DataKind::kKv) > 1e-12;
  const bool need_dir = wplace_.any_on_disk() || kv_disk || opt_.weight_dtype.has_value();
  if (need_dir && opt_.offload_dir.empty()) {
    fail("this placement keeps {} on disk but no offload directory was given; pass --offload-dir DIR",
         wplace_.any_on_disk() ? "weights" : kv_disk ? "KV cache pages" : "the weight pack");
  }
  uint64_t disk_budget = opt_.disk_mem;
  if (disk_budget == 0 && need_dir) {
    std::error_code ec;
    std::filesystem::create_directories(opt_.offload_dir, ec);
    if (ec) {
      fail("--offload-dir {}: cannot create the directory: {}; choose a directory you can write to",
           opt_.offload_dir, ec.message());
    }
    disk_budget = free_disk_bytes(opt_.offload_dir);
  }
  disk_ = std::make_unique<TierPool>(Tier::kDisk, disk_budget);

  // ---- the fixed part, checked before anything is built ----
  const uint64_t staging = align_up(wplace_.largest_disk_read(), kDiskAlign);
  if (!unified) {
    // Device: the gpu share, the vectors and two staging buffers for the
    // largest streamed column (its cpu matrices and disk tail, each matrix
    // aligned to 256 bytes).
    uint64_t streamed = 0;
    for (const UnitPlacement& u : wplace_.units) {
      streamed = std::max<uint64_t>(streamed, u.matrix_bytes[static_cast<size_t>(Tier::kCpu)] +
                                                  u.disk_read_bytes + 256 * (u.n_tensors + 1));
    }
    fixed_device_ = wplace_.bytes(Tier::kGpu) + wplace_.vector_bytes() + 2 * streamed;
    fixed_ram_ = wplace_.bytes(Tier::kCpu) + 2 * staging;
    if (fixed_device_ > gpu_->budget()) {
      fail(
          "device memory budget {} (--gpu-mem) of {} is below the {} the weights need: {} of "
          "matrices kept on the device, {} of vectors, {} of staging for the streamed share; "
          "raise --gpu-mem or keep fewer weights on the gpu (--percent)",
          mb(gpu_->budget()), backend_.name(), mb(fixed_device_), mb(wplace_.bytes(Tier::kGpu)),
          mb(wplace_.vector_bytes()), mb(2 * streamed));
    }
  } else {
    fixed_ram_ = wplace_.bytes(Tier::kGpu) + wplace_.bytes(Tier::kCpu) + wplace_.vector_bytes() +
                 2 * staging;
  }
  const uint64_t fixed = fixed_ram_;
  if (fixed > ram_budget) {
    fail(
        "RAM budget {} ({}) is below the {} the weights need: {} of matrices in RAM, {} of "
        "vectors, {} of staging for the disk share; raise {} or put more weights on disk "
        "(--percent)",
        mb(ram_budget), ram_flags(), mb(fixed),
        mb((unified ? wplace_.bytes(Tier::kGpu) : 0) + wplace_.bytes(Tier::kCpu)),
        mb(unified ? wplace_.vector_bytes() : 0), mb(2 * staging), ram_flags());
  }
  if (wplace_.bytes(Tier::kDisk) > disk_budget) {
    fail("disk budget {} (--disk-mem, in {}) is below the {} of weights this placement puts on "
         "disk; raise --disk-mem or keep more weights in RAM (--percent)",
         mb(disk_budget), opt_.offload_dir, mb(wplace_.bytes(Tier::kDisk)));
  }
  kv_cap_bytes_ = opt_.kv_budget_bytes;  // make_engine gave it its default
  if (opt_.plan_prompt_tokens > 0 && opt_.plan_new_tokens > 0) {
    // A full block of the longest sequences the run will see.
    const int64_t stored = opt_.plan_prompt_tokens + opt_.plan_new_tokens - 1;
    std::vector<std::vector<int64_t>> lens(static_cast<size_t>(opt_.num_gpu_batches)),
        prompts(static_cast<size_t>(opt_.num_gpu_batches));
    for (auto& v : lens) v.assign(static_cast<size_t>(opt_.gpu_batch_size), stored);
    for (auto& v : prompts) v.assign(static_cast<size_t>(opt_.gpu_batch_size), opt_.plan_prompt_tokens);
    const uint64_t record = KvFile::record_bytes_for(geo);
    BlockMemory m;
    m.kv = kv_block_needs(geo, frac_, lens);
    m.kv_pages = static_cast<uint64_t>(m.kv.backed_pages) * geo.bytes_per_page();
    m.kv_staging = 2 * static_cast<uint64_t>(m.kv.stage_records) * record;
    m.kv_disk = static_cast<uint64_t>(c.n_layer) * static_cast<uint64_t>(m.kv.disk_pages) * record;
    m.hidden = static_cast<uint64_t>(block_size() * opt_.plan_prompt_tokens * c.n_embd) * 4;
    m.group_tokens = largest_group(prompts[0]);
    m.scratch = forward_scratch_bytes(c, m.group_tokens);
    m.logits = static_cast<uint64_t>(block_size() * c.n_vocab) * 4;
    check_block(m, block_size(), stored);
  }

  // ---- build: pack, weights, KV, executor ----
  if (wplace_.any_on_disk() || opt_.weight_dtype) {
    pack_ = open_or_build_pack(model, opt_.offload_dir, po);
    if (opt_.weight_dtype) pack_map_ = std::make_unique<PackMatrices>(*pack_);
  }
  weights_ = std::make_unique<WeightStore>(model, backend_, wplace_, pack_ ? &*pack_ : nullptr,
                                           pack_map_.get(), ram_.get());
  if (unified) {
    res_weights_ = ram_->reserve(weights_->resident_matrix_bytes() + weights_->vector_bytes(),
                                 "weights in RAM (matrices in place, f32 vectors)");
  } else {
    res_weights_ = gpu_->reserve(weights_->device_bytes(),
                                 "weights kept on the device (matrices, f32 vectors)");
    if (weights_->device_staging_bytes() > 0) {
      for (DeviceBuffer& b : wdev_) b = backend_.alloc(weights_->device_staging_bytes());
    }
    fixed_device_ = weights_->device_bytes() + 2 * weights_->device_staging_bytes();
  }
  res_disk_weights_ = disk_->reserve(wplace_.bytes(Tier::kDisk), "weights on disk");

  DiskIoOptions deo;
  if (weights_->staging_bytes() > 0) {
    for (WeightSlot& s : wslots_) {
      s.mem = ram_->allocate(weights_->staging_bytes(), "weight staging buffer");
      deo.fixed_buffers.push_back({s.mem.data(), static_cast<size_t>(s.mem.size())});
    }
  }
  if (need_dir && (wplace_.any_on_disk() || kv_disk)) {
    disk_io_ = std::make_unique<DiskIo>(deo);
  }
  if (wplace_.any_on_disk()) {
    pack_file_ = DiskFile::open(pack_->weights_path(), OpenMode::kRead, true);
    if (!pack_file_.direct()) {
      spdlog::warn("weights: {} has no O_DIRECT; disk reads go through the page cache",
                   pack_->weights_path());
    }
  }
  kv_ = std::make_unique<KvCache>(kv_backend(), geo, std::max(kv_cap_bytes_, geo.bytes_per_page()),
                                  frac_);
  kv_file_ = std::make_unique<KvFile>(geo);
  exec_ = std::make_unique<Executor>(backend_, disk_io_.get(), opt_.trace, dev_.copies.get());
  // What the weights hold now: in place and vectors (unified), or the cpu
  // share's copies (otherwise), and the staging buffers.
  fixed_ram_ = unified ? res_weights_.bytes() : ram_->used() - wslots_[0].mem.size() -
                                                    wslots_[1].mem.size();
  for (const WeightSlot& s : wslots_) fixed_ram_ += s.mem.size();

  transfer_plan_.weights_off.assign(static_cast<size_t>(c.n_layer + 2), false);
  for (int64_t col = 0; col < c.n_layer + 2; ++col) {
    transfer_plan_.weights_off[static_cast<size_t>(col)] = weights_->streams(col);
  }
  transfer_plan_.kv_off = kv_disk;
  mbs_.resize(static_cast<size_t>(opt_.num_gpu_batches));
  kv_last_store_.assign(static_cast<size_t>(c.n_layer * opt_.num_gpu_batches), 0);

  spdlog::info(
      "engine: {} on {}, compute {}, weights {}, KV {} in pages of {} tokens, block {} x {}",
      model.desc().path, backend_.name(), dtype_name(opt_.compute_dtype),
      opt_.weight_dtype ? dtype_name(*opt_.weight_dtype) : "as stored", dtype_name(opt_.kv_dtype),
      opt_.page_size, opt_.gpu_batch_size, opt_.num_gpu_batches);
  spdlog::info("engine: placement {}{}; RAM budget {} ({}), weights {} in RAM, {} on disk{}",
               frac_.describe(), unified ? " (the CPU device: gpu and cpu are RAM)" : "",
               mb(ram_budget), ram_flags(),
               mb(wplace_.bytes(Tier::kGpu) + wplace_.bytes(Tier::kCpu)),
               mb(wplace_.bytes(Tier::kDisk)),
               need_dir ? fmt::format(" (offload dir {}, disk budget {})", opt_.offload_dir,
                                      mb(disk_budget))
                        : std::string());
  if (opt_.cpu_attention && unified) {
    spdlog::info("engine: --cpu-attention has no effect on the CPU device: attention runs where "
                 "the KV is");
  }
}

OffloadEngine::~OffloadEngine() {
  try {
    if (exec_) exec_->drain();
    if (attn_q_) attn_q_->drain();
  } catch (const std::exception& e) {
    spdlog::debug("engine: a transfer failed while shutting down: {}", e.what());
  }
  attn_jobs_.clear();  // their RAM is the cpu tier's, which goes first
}

std::string OffloadEngine::ram_flags() const {
  return unified_ ? "--cpu-mem + --gpu-mem: on the CPU device both are RAM" : "--cpu-mem";
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

BlockMemory OffloadEngine::block_memory(const std::vector<std::vector<int64_t>>& stored,
                                        const std::vector<std::vector<int64_t>>& prompt,
                                        bool all_rows) const {
  const ModelConfig& c = config();
  const KvGeometry& g = kv_->geometry();
  BlockMemory m;
  m.kv = kv_->needs(stored);
  m.kv_pages = static_cast<uint64_t>(m.kv.backed_pages) * g.bytes_per_page();
  m.kv_staging = 2 * static_cast<uint64_t>(m.kv.stage_records) * kv_file_->record_bytes();
  m.kv_disk = static_cast<uint64_t>(c.n_layer) * static_cast<uint64_t>(m.kv.disk_pages) *
              kv_file_->record_bytes();
  int64_t rows = 0;
  for (const std::vector<int64_t>& p : prompt) {
    int64_t tokens = 0;
    for (int64_t n : p) tokens += n;
    m.hidden_tokens.push_back(tokens);
    m.hidden += static_cast<uint64_t>(tokens * c.n_embd) * sizeof(float);
    m.group_tokens = std::max(m.group_tokens, largest_group(p));
    rows += all_rows ? tokens : static_cast<int64_t>(p.size());
  }
  m.scratch = forward_scratch_bytes(c, m.group_tokens);
  m.logits = static_cast<uint64_t>(rows * c.n_vocab) * sizeof(float);
  return m;
}

void OffloadEngine::check_block(const BlockMemory& m, int64_t n_seqs, int64_t longest) const {
  const KvGeometry& g = kv_ ? kv_->geometry() : kv_geometry(config(), opt_);
  const int64_t cap_pages = static_cast<int64_t>(kv_cap_bytes_ / g.bytes_per_page());
  if (m.kv.backed_pages > cap_pages) {
    fail(
        "KV cache budget {} holds {} pages of {} tokens ({} free); this block needs {} for {} "
        "sequences of up to {} tokens; lower the batch size or raise the KV budget",
        mb(kv_cap_bytes_), cap_pages, g.page_size, cap_pages, m.kv.backed_pages, n_seqs, longest);
  }
  if (!unified_) {
    // The KV cache and its staging: in device memory, relayed through RAM;
    // or in RAM (CPU attention), with each micro-batch's q/k/v and
    // attention rows on the device and in RAM.
    const uint64_t attn_rows =
        cpu_attention_ ? m.hidden / static_cast<uint64_t>(config().n_embd) *
                             static_cast<uint64_t>(fwd_.qkv_dim() + fwd_.q_dim())
                       : 0;
    const uint64_t kv_dev = kv_host() ? attn_rows : m.kv_pages + m.kv_staging;
    const uint64_t kv_ram = kv_host() ? m.kv_pages + m.kv_staging + attn_rows : m.kv_staging;
    const uint64_t dev_need = fixed_device() + m.working() + kv_dev;
    if (dev_need > gpu_->budget()) {
      fail(
          "device memory budget {} (--gpu-mem) is below the {} a block of {} sequences of up to {} "
          "tokens needs: weights and their staging {}, KV cache {} ({} pages) + staging {}, "
          "activations {}, working memory {}, logits {}; raise --gpu-mem, lower the batch size "
          "or put more on the cpu and disk tiers (--percent)",
          mb(gpu_->budget()), mb(dev_need), n_seqs, longest, mb(fixed_device()),
          mb(kv_host() ? 0 : m.kv_pages), kv_host() ? 0 : m.kv.backed_pages,
          mb(kv_host() ? 0 : m.kv_staging), mb(m.hidden), mb(m.scratch), mb(m.logits));
    }
    const uint64_t host_need = fixed_ram() + kv_ram + m.logits;
    if (host_need > ram_->budget()) {
      fail(
          "RAM budget {} (--cpu-mem) is below the {} a block of {} sequences of up to {} tokens "
          "needs: weights kept in RAM and their staging {}, KV cache and staging {}, logits {}; "
          "raise --cpu-mem or put more weights on disk (--percent)",
          mb(ram_->budget()), mb(host_need), n_seqs, longest, mb(fixed_ram()), mb(kv_ram),
          mb(m.logits));
    }
  }
  const uint64_t fixed = fixed_ram();
  const uint64_t need = fixed + m.device();
  if (unified_ && need > ram_->budget()) {
    fail(
        "RAM budget {} ({}) is below the {} a block of {} sequences of up to {} tokens needs: "
        "weights and their staging {}, KV cache {} ({} pages) + staging {}, activations {}, "
        "working memory {}, logits {}; raise the budget, lower the batch size or put more on disk "
        "(--percent)",
        mb(ram_->budget()), ram_flags(), mb(need), n_seqs, longest, mb(fixed), mb(m.kv_pages),
        m.kv.backed_pages, mb(m.kv_staging), mb(m.hidden), mb(m.scratch), mb(m.logits));
  }
  const uint64_t disk_need = wplace_.bytes(Tier::kDisk) + m.kv_disk;
  if (disk_need > disk_->budget()) {
    fail(
        "disk budget {} (--disk-mem, in {}) is below the {} this run keeps on disk: weights {}, "
        "KV cache {} for a block of {} sequences of up to {} tokens; raise --disk-mem, lower the "
        "batch size or keep more in RAM (--percent)",
        mb(disk_->budget()), opt_.offload_dir, mb(disk_need), mb(wplace_.bytes(Tier::kDisk)),
        mb(m.kv_disk), n_seqs, longest);
  }
}

void OffloadEngine::prepare_block(const BlockMemory& m) {
  const ModelConfig& c = config();
  // The block's buffers, sized for it exactly (the KV pool's storage and the
  // forward's scratch only grow); one reservation covers what the backend
  // allocates, the staging buffers count themselves.
  res_block_.release();
  res_block_host_.release();
  for (PoolBlock& b : kv_mem_) b.reset();
  for (DeviceBuffer& b : kv_dev_) b.reset();
  PagePool& pool = kv_->pool();
  const uint64_t bpp = kv_->geometry().bytes_per_page();
  pool.set_budget(std::max(m.kv_pages, bpp));
  const uint64_t kv_pages = std::max(pool.storage_bytes(), m.kv_pages);
  uint64_t hidden = 0;
  for (size_t k = 0; k < mbs_.size(); ++k) {
    const size_t want = static_cast<size_t>(m.hidden_tokens[k] * c.n_embd) * sizeof(float);
    resize_exact(backend_, mbs_[k].hidden, want);
    hidden += want;
  }
  fwd_.reserve(m.group_tokens);
  resize_exact(backend_, logits_, m.logits);
  const uint64_t kv_stage = static_cast<uint64_t>(m.kv.stage_records) * kv_file_->record_bytes();
  const uint64_t block = kv_pages + hidden + fwd_.workspace_bytes() + logits_.size();
  if (unified_) {
    res_block_ = ram_->reserve(block, "the block's KV cache, activations and working memory");
    if (kv_stage > 0) {
      for (PoolBlock& b : kv_mem_) b = ram_->allocate(kv_stage, "KV staging buffer");
    }
  } else if (kv_host()) {
    // CPU attention: the KV cache in RAM, activations on the device, and
    // each micro-batch's q/k/v and attention rows on both.
    uint64_t rows = 0, host_attn = 0;
    const int64_t QKV = fwd_.qkv_dim(), Q = fwd_.q_dim();
    for (size_t k = 0; k < mbs_.size(); ++k) {
      AttnJob& job = attn_jobs_[k];
      const size_t qkv_b = static_cast<size_t>(m.hidden_tokens[k] * QKV) * sizeof(float);
      const size_t attn_b = static_cast<size_t>(m.hidden_tokens[k] * Q) * sizeof(float);
      resize_exact(backend_, job.qkv_dev, qkv_b);
      resize_exact(backend_, job.attn_dev, attn_b);
      if (job.qkv.size() != qkv_b) {
        job.qkv.reset();
        if (qkv_b > 0) job.qkv = ram_->allocate(qkv_b, "q, k, v rows for CPU attention");
      }
      rows += qkv_b + attn_b;
      host_attn += attn_b;
    }
    res_block_ = gpu_->reserve(block - kv_pages + rows,
                               "the block's activations, working memory and attention rows");
    res_block_host_ = ram_->reserve(kv_pages + host_attn,
                                    "the block's KV cache and attention rows (CPU attention)");
    if (kv_stage > 0) {
      for (PoolBlock& b : kv_mem_) b = ram_->allocate(kv_stage, "KV staging buffer");
    }
  } else {
    res_block_ = gpu_->reserve(block + 2 * kv_stage,
                               "the block's KV cache and its staging, activations and working "
                               "memory");
    if (kv_stage > 0) {
      for (DeviceBuffer& b : kv_dev_) b = backend_.alloc(kv_stage);
      for (PoolBlock& b : kv_mem_) b = ram_->allocate(kv_stage, "KV staging relay buffer");
    }
  }
  for (KvSlot& s : kv_slots_) s = KvSlot{};
  for (WeightSlot& s : wslots_) {
    s.column = -1;
    s.step = -1;
  }
  res_disk_kv_.release();
  if (m.kv.disk_pages > 0) {
    kv_->set_disk_slots(m.kv.disk_pages);
    kv_file_->prepare(opt_.offload_dir, m.kv.disk_pages);
    res_disk_kv_ = disk_->reserve(kv_file_->bytes(), "KV cache pages on disk");
  }
}

std::byte* OffloadEngine::kv_relay(const KvSlot& s, size_t r) {
  if (kv_host()) return nullptr;
  const size_t b = static_cast<size_t>(&s - kv_slots_.data());
  return kv_mem_[b].data() + r * kv_file_->record_bytes();
}

std::byte* OffloadEngine::kv_record(const KvSlot& s, size_t r) {
  const size_t b = static_cast<size_t>(&s - kv_slots_.data());
  std::byte* base = kv_host() ? kv_mem_[b].data() : kv_dev_[b].as<std::byte>();
  return base + r * kv_file_->record_bytes();
}

// ---- CPU attention ----

void OffloadEngine::start_cpu_attention(const ScheduleStep& ss, const LayerWeights& w) {
  const int64_t k = ss.micro_batch, j = ss.layer;
  MicroState& m = mbs_[static_cast<size_t>(k)];
  AttnJob& job = attn_jobs_[static_cast<size_t>(k)];
  STRATA_ASSERT(job.finished);
  const int64_t E = config().n_embd, QKV = fwd_.qkv_dim(), Q = fwd_.q_dim();
  const Group& last = m.groups[static_cast<size_t>(m.n_groups - 1)];
  const int64_t n_tokens = last.token0 + last.host.n_tokens();
  for (int64_t gi = 0; gi < m.n_groups; ++gi) {
    const Group& gr = m.groups[static_cast<size_t>(gi)];
    fwd_.layer_qkv(w, gr.dev, m.hidden.as<float>() + gr.token0 * E,
                   job.qkv_dev.as<float>() + gr.token0 * QKV);
  }
  const size_t bytes = static_cast<size_t>(n_tokens * QKV) * sizeof(float);
  STRATA_ASSERT(bytes <= job.qkv.size());
  job.qkv_bytes = bytes;
  job.attn.resize(static_cast<size_t>(n_tokens * Q));
  // The copy down, ordered after the first half; a device without copy
  // queues copies (and waits) here.
  std::function<void()> down = [] {};
  if (dev_.copies) {
    down = dev_.copies->to_host(job.qkv.data(), job.qkv_dev.data(), bytes);
  } else {
    backend_.copy_to_host(job.qkv.data(), job.qkv_dev.data(), bytes);
  }
  float* qkv_host = reinterpret_cast<float*>(job.qkv.data());
  job.layer = j;
  job.step = ss.step;
  job.w = w;
  job.finished = false;
  job.down_s = 0;
  const float scale = fwd_.attention_scale();
  const int64_t n_head = config().n_head, n_groups = m.n_groups;
  job.n = attn_q_->push(
      [this, k, j, down, scale, n_head, n_groups, QKV, Q, qkv_host] {
        AttnJob& jb = attn_jobs_[static_cast<size_t>(k)];
        const auto t0 = Clock::now();
        down();
        jb.down_s = std::chrono::duration<double>(Clock::now() - t0).count();
        const int64_t kvd = (QKV - Q) / 2;
        const KvLayer kv = kv_->pool().layer(j);
        const MicroState& ms = mbs_[static_cast<size_t>(k)];
        for (int64_t gi = 0; gi < n_groups; ++gi) {
          const Group& gr = ms.groups[static_cast<size_t>(gi)];
          DeviceBuffer none;
          const MicroBatch hmb = upload_micro_batch(*host_be_, gr.host, none);  // host arrays
          float* q = qkv_host + gr.token0 * QKV;
          host_be_->kv_append(kv, q + Q, QKV, q + Q + kvd, QKV, hmb.slots, hmb.n_tokens,
                              hmb.touched, hmb.n_filled, hmb.n_touched);
          host_be_->attention(jb.attn.data() + gr.token0 * Q, Q, q, QKV, n_head, kv, hmb.seqs,
                              scale);
        }
      },
      "", 0, {fmt::format("attention layer {} k={}", j, k), "attention", ss.step});
  attn_job_of_[static_cast<size_t>(j * opt_.num_gpu_batches + k)] = job.n;
  if (attn_pending_ >= 0) finish_cpu_attention(attn_pending_);
  attn_pending_ = k;
}

void OffloadEngine::finish_cpu_attention(int64_t k) {
  AttnJob& job = attn_jobs_[static_cast<size_t>(k)];
  MicroState& m = mbs_[static_cast<size_t>(k)];
  attn_q_->wait(job.n);
  const int64_t E = config().n_embd, Q = fwd_.q_dim();
  EngineStats::Link& down = stats_.links["gpu->cpu"];
  down.bytes += job.qkv_bytes;
  down.busy_s += job.down_s;
  const auto t0 = Clock::now();
  backend_.copy_to_device(job.attn_dev.data(), job.attn.data(), job.attn.size() * sizeof(float));
  EngineStats::Link& up = stats_.links["cpu->gpu"];
  up.bytes += job.attn.size() * sizeof(float);
  up.busy_s += std::chrono::duration<double>(Clock::now() - t0).count();
  for (int64_t gi = 0; gi < m.n_groups; ++gi) {
    const Group& gr = m.groups[static_cast<size_t>(gi)];
    fwd_.layer_out(job.w, gr.dev, job.attn_dev.as<float>() + gr.token0 * Q,
                   m.hidden.as<float>() + gr.token0 * E);
  }
  job.finished = true;
}

void OffloadEngine::flush_cpu_attention() {
  if (attn_pending_ < 0) return;
  const int64_t k = attn_pending_;
  attn_pending_ = -1;
  finish_cpu_attention(k);
}

void OffloadEngine::wait_cpu_attention(int64_t layer, int64_t k) {
  if (!cpu_attention_ || layer < 0) return;
  attn_q_->wait(attn_job_of_[static_cast<size_t>(layer * opt_.num_gpu_batches + k)]);
}

// ---- weights ----

void OffloadEngine::load_weights(int64_t column, int32_t step) {
  STRATA_ASSERT(weights_->streams(column));
  const UnitPlacement* u = weights_->disk_unit(column);
  // Round robin over the two buffers: this one last held the load before the
  // previous one, for a column whose computes all came before this step (on
  // a device that queues compute, the copies into it are ordered after that
  // compute by the device copies; offload/transfer.h).
  const size_t i = n_weight_loads_++ % 2;
  WeightSlot& s = wslots_[i];
  s.column = column;
  s.step = step;
  const std::string name = column == 0                    ? "embed"
                           : column == config().n_layer + 1 ? "head"
                                                            : fmt::format("blk.{}", column - 1);
  const TransferLabel label{fmt::format("weights {}", u != nullptr ? u->name : name), "weights",
                            step};
  if (unified_) {
    const WeightStore::Read r = weights_->disk_read(column);
    s.load = exec_->mover().copy(Place::memory(Tier::kGpu, s.mem.data()),
                                 Place::disk(pack_file_, r.offset), r.bytes, exec_->loads(), label);
    return;
  }
  // Into the device staging buffer: the cpu matrices from their RAM copies,
  // the disk tail through this slot's host buffer (io_uring reads land in
  // it, registered and pinned on a GPU, and it feeds the copy up).
  std::byte* dev = wdev_[i].as<std::byte>();
  for (const WeightStore::HostPart& p : weights_->host_parts(column)) {
    s.load = exec_->mover().copy(Place::memory(Tier::kGpu, dev + p.rel),
                                 Place::memory(Tier::kCpu, const_cast<std::byte*>(p.host)),
                                 p.bytes, exec_->loads(), label);
  }
  if (u != nullptr) {
    const WeightStore::Read r = weights_->disk_read(column);
    s.load = exec_->mover().copy(Place::memory(Tier::kGpu, dev + weights_->disk_rel(column)),
                                 Place::disk(pack_file_, r.offset), r.bytes, exec_->loads(), label,
                                 s.mem.data());
  }
}

// The first read of a column's disk share in this run: its tensors against
// the pack's checksums, in the host buffer the read landed in.
void OffloadEngine::verify_disk_share(int64_t column, const std::byte* host) {
  const UnitPlacement* u = weights_->disk_unit(column);
  if (u == nullptr || !pack_) return;
  if (column_verified_.empty()) column_verified_.assign(static_cast<size_t>(weights_->n_columns()), 0);
  uint8_t& done = column_verified_[static_cast<size_t>(column)];
  if (done) return;
  const PackUnit* pu = pack_->find_unit(u->name);
  STRATA_ASSERT(pu != nullptr);
  const WeightStore::Read r = weights_->disk_read(column);
  if (auto bad = pack_->check_tensors(*pu, u->first_disk, {host, r.bytes}, r.offset)) {
    pack_->fail_damaged(*bad);
  }
  done = 1;
}

const std::byte* OffloadEngine::staged_weights(int64_t column, int32_t step) {
  if (!weights_->streams(column)) return nullptr;
  for (WeightSlot& s : wslots_) {
    if (s.column == column && s.step == step) {
      exec_->loads().wait(s.load);
      verify_disk_share(column, s.mem.data());
      if (unified_) return s.mem.data();
      return wdev_[static_cast<size_t>(&s - wslots_.data())].as<std::byte>();
    }
  }
  STRATA_ASSERT_MSG(false, "weights of column {} step {} were never loaded", column, step);
  return nullptr;
}

// ---- KV ----

OffloadEngine::KvSlot& OffloadEngine::kv_slot_for(int64_t layer, int64_t k, int32_t step) {
  // Consecutive layer computes (in schedule order, across steps) alternate.
  const int64_t q = (static_cast<int64_t>(step) * config().n_layer + layer) * opt_.num_gpu_batches + k;
  KvSlot& s = kv_slots_[static_cast<size_t>(q % 2)];
  if (s.layer != layer || s.micro_batch != k || s.step != step) {
    // Taken over from an earlier compute: what it stored from it must be
    // out, and the CPU attention that read it done.
    if (s.last_store > 0) exec_->stores().wait(s.last_store);
    wait_cpu_attention(s.layer, s.micro_batch);
    s.layer = layer;
    s.micro_batch = k;
    s.step = step;
    s.load = 0;
  }
  return s;
}

void OffloadEngine::load_kv(int64_t layer, int64_t k, int32_t step) {
  const KvStage& st = mbs_[static_cast<size_t>(k)].stage;
  if (st.pages.empty()) return;
  // The records were written by earlier steps' stores of this layer and
  // micro-batch: they must be on disk before the read.
  const uint64_t written = kv_last_store_[static_cast<size_t>(layer * opt_.num_gpu_batches + k)];
  if (written > 0) exec_->stores().wait(written);
  KvSlot& slot = kv_slot_for(layer, k, step);
  const uint64_t rec = kv_file_->record_bytes();
  // Runs of records whose disk slots are consecutive are one read each.
  size_t r = 0;
  while (r < st.pages.size()) {
    if (st.fresh[r]) {
      ++r;
      continue;
    }
    const int32_t first = kv_->disk_slot(st.pages[r]);
    size_t e = r + 1;
    while (e < st.pages.size() && !st.fresh[e] &&
           kv_->disk_slot(st.pages[e]) == first + static_cast<int32_t>(e - r)) {
      ++e;
    }
    slot.load = exec_->mover().copy(
        kv_place(kv_record(slot, r)),
        Place::disk(kv_file_->file(), kv_file_->record_offset(layer, first)), (e - r) * rec, exec_->loads(),
        {fmt::format("kv layer {} k={}", layer, k), "kv", step}, kv_relay(slot, r));
    r = e;
  }
}

void OffloadEngine::stage_kv(int64_t layer, int64_t k, int32_t step) {
  const KvStage& st = mbs_[static_cast<size_t>(k)].stage;
  if (st.pages.empty()) return;
  KvSlot& slot = kv_slot_for(layer, k, step);
  if (slot.load > 0) exec_->loads().wait(slot.load);
  const uint64_t pb = kv_->geometry().page_bytes();
  for (size_t r = 0; r < st.pages.size(); ++r) {
    std::byte* rec = kv_record(slot, r);
    kv_->pool().stage(layer, st.pages[r], rec, rec + pb);
  }
}

void OffloadEngine::store_kv(int64_t layer, int64_t k, int32_t step) {
  const KvStage& st = mbs_[static_cast<size_t>(k)].stage;
  wait_cpu_attention(layer, k);  // its KV append wrote what is stored
  const uint64_t rec = kv_file_->record_bytes(), pb = kv_->geometry().page_bytes();
  const TransferLabel label{fmt::format("kv layer {} k={}", layer, k), "kv", step};
  uint64_t last = 0;
  // Fresh pages: from their staging records, runs of consecutive disk slots
  // in one write.
  size_t r = 0;
  while (r < st.pages.size()) {
    if (!st.fresh[r]) {
      ++r;
      continue;
    }
    const int32_t first = kv_->disk_slot(st.pages[r]);
    size_t e = r + 1;
    while (e < st.pages.size() && st.fresh[e] &&
           kv_->disk_slot(st.pages[e]) == first + static_cast<int32_t>(e - r)) {
      ++e;
    }
    KvSlot& slot = kv_slot_for(layer, k, step);
    last = exec_->mover().copy(Place::disk(kv_file_->file(), kv_file_->record_offset(layer, first)),
                               kv_place(kv_record(slot, r)), (e - r) * rec,
                               exec_->stores(), label, kv_relay(slot, r));
    slot.last_store = last;
    r = e;
  }
  // Pages completed in RAM: K and V of this layer from the pool.
  if (!st.completed_backed.empty()) {
    for (int32_t p : st.completed_backed) {
      const auto [k_page, v_page] = kv_->pool().entry(layer, p);
      const uint64_t off = kv_file_->record_offset(layer, kv_->disk_slot(p));
      exec_->mover().copy(Place::disk(kv_file_->file(), off), kv_place(k_page), pb,
                          exec_->stores(), label);
      last = exec_->mover().copy(Place::disk(kv_file_->file(), off + pb),
                                 kv_place(v_page), pb, exec_->stores(), label);
      if (layer == config().n_layer - 1) kv_->mark_retiring(p, last);
    }
  }
  if (last > 0) kv_last_store_[static_cast<size_t>(layer * opt_.num_gpu_batches + k)] = last;
}

// ---- the block ----

void OffloadEngine::run(std::span<const SeqInput> seqs, const StepFn& on_step, bool all_rows) {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(seqs.size());
  if (n == 0) return;
  if (n > block_size()) {
    fail("a block of {} sequences exceeds the engine's block size {} ({} x {})", n, block_size(),
         opt_.gpu_batch_size, opt_.num_gpu_batches);
  }
  STRATA_ASSERT(!all_rows || n == 1);
  int64_t n_steps = 0, longest = 0;
  std::vector<int64_t> stored(static_cast<size_t>(n));  // tokens each sequence will store
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
    check_ids(s.prompt, all_rows ? "scored sequence" : "prompt", i);
    // The last sampled token is never fed back: p + max_new - 1 positions.
    stored[i] = p + s.max_new_tokens - 1;
    check_window(stored[i], all_rows ? "scored sequence" : "prompt", i);
    n_steps = std::max<int64_t>(n_steps, s.max_new_tokens);
    longest = std::max(longest, stored[i]);
  }

  // Sequences fill the micro-batches in order, gpu_batch_size each.
  const int64_t g = opt_.gpu_batch_size, n_mb = opt_.num_gpu_batches;
  std::vector<std::vector<int64_t>> stored_mb(static_cast<size_t>(n_mb)),
      prompt_mb(static_cast<size_t>(n_mb));
  for (int64_t b = 0; b < n; ++b) {
    stored_mb[static_cast<size_t>(b / g)].push_back(stored[static_cast<size_t>(b)]);
    prompt_mb[static_cast<size_t>(b / g)].push_back(
        static_cast<int64_t>(seqs[static_cast<size_t>(b)].prompt.size()));
  }
  const BlockMemory mem = block_memory(stored_mb, prompt_mb, all_rows);
  check_block(mem, n, longest);
  prepare_block(mem);

  std::vector<SeqState> st(static_cast<size_t>(n));
  for (MicroState& m : mbs_) m.members.clear();
  // However the block ends: transfers finish before the pages and buffers
  // they use are given back.
  struct Cleanup {
    OffloadEngine& e;
    std::vector<SeqState>& st;
    ~Cleanup() {
      try {
        e.exec_->drain();
      } catch (const std::exception& ex) {
        spdlog::debug("engine: a transfer failed while ending a block: {}", ex.what());
      }
      if (e.attn_q_) {
        try {
          e.attn_q_->drain();
        } catch (const std::exception& ex) {
          spdlog::debug("engine: a CPU attention failed while ending a block: {}", ex.what());
        }
        e.attn_pending_ = -1;
        for (AttnJob& j : e.attn_jobs_) j.finished = true;
      }
      for (SeqState& s : st) {
        if (s.kv >= 0) e.kv_->remove_sequence(s.kv);
        s.kv = -1;
      }
    }
  } cleanup{*this, st};
  for (int64_t b = 0; b < n; ++b) {
    st[static_cast<size_t>(b)].kv = kv_->add_sequence();
    mbs_[static_cast<size_t>(b / g)].members.push_back(static_cast<int32_t>(b));
    stats_.prompt_tokens += static_cast<int64_t>(seqs[static_cast<size_t>(b)].prompt.size());
  }

  const int64_t V = c.n_vocab, E = c.n_embd;
  const std::vector<ScheduleStep> schedule =
      make_block_schedule({n_steps, c.n_layer, n_mb}, transfer_plan_);

  std::vector<int32_t> active;
  std::vector<SeqAction> actions;
  int64_t n_live = n;
  Clock::time_point t_step;
  int32_t step = -1;
  PagePool& pool = kv_->pool();

  ExecutorHooks hooks;
  hooks.begin_step = [&](int32_t i) {
    if (n_live == 0) return false;
    step = i;
    t_step = Clock::now();
    active.clear();
    int64_t row = 0;
    for (MicroState& m : mbs_) {
      m.row0 = row;
      active.insert(active.end(), m.members.begin(), m.members.end());
      row = static_cast<int64_t>(active.size());
    }
    // Disk pages completed in the last step leave RAM once their stores are out.
    if (kv_->n_retiring() > 0) {
      exec_->stores().wait(kv_->retiring_until());
      kv_->retire(exec_->stores().n_done());
    }
    // The step's new tokens of every micro-batch: KV slots for them, groups,
    // and the KV to stage, before any transfer of the step is planned.
    for (MicroState& m : mbs_) {
      if (m.members.empty()) continue;
      m.n_groups = 0;
      int64_t n_tokens = 0;
      for (size_t r = 0; r < m.members.size(); ++r) {
        const int32_t b = m.members[r];
        SeqState& s = st[static_cast<size_t>(b)];
        std::span<const int32_t> toks =
            step == 0 ? std::span<const int32_t>(seqs[static_cast<size_t>(b)].prompt)
                      : std::span<const int32_t>(&s.next, 1);
        const int64_t n_new = static_cast<int64_t>(toks.size());
        if (m.n_groups == 0 ||
            m.groups[static_cast<size_t>(m.n_groups - 1)].host.n_tokens() + n_new >
                kMaxGroupTokens) {
          if (static_cast<int64_t>(m.groups.size()) == m.n_groups) m.groups.emplace_back();
          Group& gr = m.groups[static_cast<size_t>(m.n_groups++)];
          gr.host.clear();
          gr.token0 = n_tokens;
          gr.row0 = m.row0 + (all_rows ? n_tokens : static_cast<int64_t>(r));
        }
        const int64_t start = kv_->extend(s.kv, n_new, step);
        m.groups[static_cast<size_t>(m.n_groups - 1)].host.add_sequence(
            toks, start, kv_->pages(s.kv), opt_.page_size, all_rows, pos_offset());
        n_tokens += n_new;
      }
      STRATA_ASSERT(static_cast<size_t>(n_tokens * E) * sizeof(float) <= m.hidden.size());
      // The step's staged KV: unbacked pages and the disk pages completed in RAM.
      KvStage& sg = m.stage;
      sg.pages.clear();
      sg.fresh.clear();
      sg.completed_backed.clear();
      for (const int32_t b : m.members) {
        const int32_t seq = st[static_cast<size_t>(b)].kv;
        for (int32_t p : kv_->pages(seq)) {
          if (pool.backed(p)) continue;
          sg.pages.push_back(p);
          sg.fresh.push_back(kv_->fresh(p, step) ? 1 : 0);
        }
        for (int32_t p : kv_->completed(seq)) {
          if (pool.backed(p)) sg.completed_backed.push_back(p);
        }
      }
    }
    return true;
  };
  // A CPU attention still pending belongs to the layer column being
  // computed; before anything of a step of another column happens (its
  // transfers may reuse that layer's weight buffer), it is finished.
  auto leave_layer = [&](const ScheduleStep& at) {
    if (attn_pending_ >= 0 &&
        (at.kind != StageKind::kLayer ||
         attn_jobs_[static_cast<size_t>(attn_pending_)].layer != at.layer)) {
      flush_cpu_attention();
    }
  };
  hooks.store = [&](const ScheduleStep& at, const Transfer& t) {
    leave_layer(at);
    if (t.what == Transfer::What::kKv && !mbs_[static_cast<size_t>(t.micro_batch)].members.empty()) {
      store_kv(t.column - 1, t.micro_batch, t.step);
    }
  };
  hooks.load = [&](const ScheduleStep& at, const Transfer& t) {
    leave_layer(at);
    if (t.what == Transfer::What::kWeights) {
      load_weights(t.column, t.step);
    } else if (t.what == Transfer::What::kKv &&
               !mbs_[static_cast<size_t>(t.micro_batch)].members.empty()) {
      load_kv(t.column - 1, t.micro_batch, t.step);
    }
  };
  // The views of the step about to compute, set by prepare.
  GlobalWeights step_global;
  LayerWeights step_layer;
  hooks.prepare = [&](const ScheduleStep& ss) {
    leave_layer(ss);
    if (mbs_[static_cast<size_t>(ss.micro_batch)].members.empty()) return;
    switch (ss.kind) {
      case StageKind::kEmbed:
        step_global = weights_->embed(staged_weights(0, step));
        break;
      case StageKind::kLayer:
        stage_kv(ss.layer, ss.micro_batch, step);
        step_layer = weights_->layer(ss.layer, staged_weights(ss.column, step));
        break;
      case StageKind::kHead:
        step_global = weights_->head(staged_weights(ss.column, step));
        break;
    }
  };
  hooks.compute = [&](const ScheduleStep& ss) {
    leave_layer(ss);
    MicroState& m = mbs_[static_cast<size_t>(ss.micro_batch)];
    if (!m.members.empty()) {
      switch (ss.kind) {
        case StageKind::kEmbed: {
          const GlobalWeights& w = step_global;
          for (int64_t gi = 0; gi < m.n_groups; ++gi) {
            Group& gr = m.groups[static_cast<size_t>(gi)];
            gr.dev = upload_micro_batch(backend_, gr.host, gr.meta);
            fwd_.embed(w, gr.dev, m.hidden.as<float>() + gr.token0 * E);
          }
          break;
        }
        case StageKind::kLayer: {
          const LayerWeights& w = step_layer;
          if (cpu_attention_) {
            start_cpu_attention(ss, w);
            break;
          }
          const KvLayer kv = pool.layer(ss.layer);
          for (int64_t gi = 0; gi < m.n_groups; ++gi) {
            Group& gr = m.groups[static_cast<size_t>(gi)];
            fwd_.layer(ss.layer, w, kv, gr.dev, m.hidden.as<float>() + gr.token0 * E);
          }
          break;
        }
        case StageKind::kHead: {
          const GlobalWeights& w = step_global;
          for (int64_t gi = 0; gi < m.n_groups; ++gi) {
            Group& gr = m.groups[static_cast<size_t>(gi)];
            fwd_.head(w, gr.dev, m.hidden.as<float>() + gr.token0 * E,
                      logits_.as<float>() + gr.row0 * V);
          }
          break;
        }
      }
    }
  };
  hooks.end_step = [&](int32_t) {
    flush_cpu_attention();
    // End of the step: hand the logits over, then retire finished sequences.
    const double dt = std::chrono::duration<double>(Clock::now() - t_step).count();
    (step == 0 ? stats_.prefill_s : stats_.decode_s) += dt;
    const int64_t rows = all_rows ? static_cast<int64_t>(seqs[0].prompt.size())
                                  : static_cast<int64_t>(active.size());
    const float* logits = logits_.as<float>();
    if (!backend_.memory_is_host()) {
      logits_host_.resize(static_cast<size_t>(rows * V));
      backend_.copy_to_host(logits_host_.data(), logits, logits_host_.size() * sizeof(float));
      logits = logits_host_.data();
    }
    actions.assign(active.size(), SeqAction{});
    on_step(step, active, logits, actions);
    if (!all_rows) stats_.generated_tokens += static_cast<int64_t>(active.size());
    bool any_finished = false;
    for (size_t r = 0; r < active.size(); ++r) {
      const int32_t b = active[r];
      SeqState& s = st[static_cast<size_t>(b)];
      ++s.produced;
      const bool done =
          actions[r].finished || s.produced >= seqs[static_cast<size_t>(b)].max_new_tokens;
      if (!done) {
        const int32_t tok = actions[r].next_token;
        if (tok < 0 || tok >= V) {
          fail("step {}: the next token {} of sequence {} is outside the vocabulary of {} ids",
               step, tok, b, V);
        }
        s.next = tok;
        continue;
      }
      if (!any_finished && kv_->n_retiring() > 0) {
        // Its pages' stores may still read their RAM.
        exec_->stores().wait(kv_->retiring_until());
      }
      any_finished = true;
      kv_->remove_sequence(s.kv);
      s.kv = -1;
      --n_live;
      auto& members = mbs_[static_cast<size_t>(b / g)].members;
      members.erase(std::find(members.begin(), members.end(), b));
    }
  };
  exec_->run(schedule, hooks);
  exec_->drain();
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
  run(in, [&](int, std::span<const int32_t>, const float* logits, std::span<SeqAction> a) {
    out.assign(logits, logits + n * c.n_vocab);
    a[0].finished = true;
  }, true);
  return out;
}

EngineStats OffloadEngine::stats() const {
  EngineStats s = stats_;
  exec_->add_stats(s);
  if (attn_q_ && attn_q_->last() > 0) s.queue_busy_s["cpu attention"] += attn_q_->busy_s();
  s.peak_bytes["cpu"] = ram_->peak();
  if (gpu_) s.peak_bytes["gpu"] = gpu_->peak();
  if (disk_->peak() > 0) s.peak_bytes["disk"] = disk_->peak();
  return s;
}

}  // namespace

std::unique_ptr<Engine> make_offload_engine(const Model& model, const EngineOptions& options,
                                            ComputeDevice device) {
  return std::make_unique<OffloadEngine>(model, options, std::move(device));
}

}  // namespace strata
