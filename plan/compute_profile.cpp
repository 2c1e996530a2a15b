// Measuring the engine's compute (compute_profile.h).
#include "plan/compute_profile.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "io/atomic_file.h"
#include "kernels/cpu/cpu_backend.h"
#include "kv/page_pool.h"
#include "model/forward.h"
#include "model/layer_weights.h"
#include "model/model.h"
#include "offload/aligned_buffer.h"
#include "offload/disk_io.h"
#include "offload/measure.h"
#include "offload/pack.h"
#include "plan/machine_profile.h"
#include "policy/search.h"
#include "quant/convert.h"
#include "quant/quant.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kPage = 16;
constexpr int64_t kShortCtx = 16;  // keys of a decode point: 15 cached + the new one
// Decode and head points at every micro-batch size the search considers up
// to 128 (1, 2, 3, 4, 6, 8, 12, ...): the CPU kernels take rows of x in
// tiles (12 rows cost about a tile of 8 plus one of 4), so a time between
// two powers of two is not their interpolation.
const std::vector<int64_t> kDecodeRows = gpu_batch_candidates(128);
// The slope of decode attention per cached key: kSlopeRows sequences of
// kLongCtx keys, a layer's KV larger than the caches keep between two runs
// (the engine's other layers pass its weights and their KV through them
// in between); at 8 sequences part of it stayed, and the slope measured
// 2/3 of the engine's (the demo model at 1024 and 2048 keys: 775 and 512
// tok/s of decode predicted, 589 and 369 measured; at 32: 635 and 405
// predicted, 615 and 394 measured).
constexpr int64_t kSlopeRows = 32;
constexpr int64_t kLongCtx = 1024;
// Prefill points, in prompts of kPage tokens each: 32 tokens is the most the
// kernels take in tiles of rows (kernels/cpu/matmul_bf16.h), 64 goes
// through the GEMM path, which costs less per row.
const std::vector<int64_t> kPrefillSeqs{1, 2, 4, 8, 16, 32, 64};
constexpr int64_t kLongPrompt = 512;

// The size of the largest CPU cache (the third level's, else the second's;
// 32 MiB when the system does not say).
size_t last_level_cache_bytes() {
  for (const int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long v = sysconf(name);
    if (v > 0) return static_cast<size_t>(v);
  }
  return size_t{32} << 20;
}

// The names of the tensors a measurement reads: the first `n_layers`
// layers' and the globals.
std::set<std::string> measured_tensors(const ModelDesc& desc, int64_t n_layers) {
  std::set<std::string> names;
  for (const PackLayoutUnit& u : pack_layout(desc)) {
    if (u.layer >= n_layers) continue;
    for (const TensorInfo* t : u.tensors) names.insert(t->name);
  }
  return names;
}

// How the engine packs the weights for `eo`.
PackOptions pack_options(const EngineOptions& eo) {
  PackOptions po;
  po.weight_dtype = eo.weight_dtype;
  return po;
}

// The dtype the engine holds a matrix in for `eo`.
DType engine_dtype(const TensorInfo& t, const EngineOptions& eo) {
  return pack_dtype(t.name, t.shape, t.dtype, pack_options(eo));
}

// Bytes of layer 0's weights as the engine holds them.
uint64_t layer_bytes_of(const Model& model, const EngineOptions& eo) {
  uint64_t n = 0;
  for (const PackLayoutUnit& u : pack_layout(model.desc())) {
    if (u.layer != 0) continue;
    for (const TensorInfo* t : u.tensors) n += packed_bytes(*t, pack_options(eo));
  }
  return n;
}

// How many layers run between two runs of layer 0 to take its weights out
// of the caches, as the engine's other layers do: weights of twice the
// last-level cache, or all the model has (then the engine keeps them in the
// caches too).
int64_t eviction_layers(const Model& model, const EngineOptions& eo) {
  const uint64_t layer_bytes = layer_bytes_of(model, eo);
  const uint64_t want = 2 * last_level_cache_bytes();
  const auto n =
      static_cast<int64_t>((want + layer_bytes - 1) / std::max<uint64_t>(1, layer_bytes));
  return std::min<int64_t>(std::max<int64_t>(n, 1), model.config().n_layer - 1);
}

// A [rows, cols] matrix of dtype t holding random values of a trained
// layer's magnitude.
DeviceBuffer random_matrix(Backend& be, DType t, int64_t rows, int64_t cols, uint64_t seed) {
  const size_t rb = row_bytes(t, cols);
  DeviceBuffer buf = be.alloc(rb * static_cast<size_t>(rows));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<std::byte> out(rb);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    if (is_quantized(t)) {
      quantize_row(t, row.data(), out.data(), cols);
    } else if (t == DType::kF16) {
      f32_to_f16_row(row.data(), reinterpret_cast<uint16_t*>(out.data()), cols);
    } else if (t == DType::kBF16) {
      f32_to_bf16_row(row.data(), reinterpret_cast<uint16_t*>(out.data()), cols);
    } else {
      STRATA_ASSERT(t == DType::kF32);
      std::memcpy(out.data(), row.data(), rb);
    }
    be.copy_to_device(buf.as<std::byte>() + static_cast<size_t>(r) * rb, out.data(), rb);
  }
  return buf;
}

// A read of one layer's weights from a file of the offload directory, as
// the engine's load of the next layer reads its pack (O_DIRECT, the disk
// I/O layer's default settings): issued before a timed run, waited for
// after it. The file (two layers' bytes, written once so that reads reach
// the disk) is removed at the end.
class LayerRead {
 public:
  LayerRead(const std::string& dir, uint64_t layer_bytes)
      : remove_{(fs::path(dir) / fmt::format(".strata-compute-{}.tmp", ::getpid())).string()},
        bytes_((layer_bytes + kDiskAlign - 1) / kDiskAlign * kDiskAlign),
        buf_(bytes_) {
    std::memset(buf_.data(), 0x5a, bytes_);
    file_ = DiskFile::open(remove_.path, OpenMode::kCreate, true);
    for (uint64_t at : {uint64_t{0}, bytes_}) io_.wait(io_.write(file_, at, buf_.data(), bytes_));
    file_.sync();
  }
  LayerRead(const LayerRead&) = delete;
  LayerRead& operator=(const LayerRead&) = delete;

  Ticket issue() { return io_.read(file_, (next_++ % 2) * bytes_, buf_.data(), bytes_); }
  void wait(const Ticket& t) { io_.wait(t); }

 private:
  RemoveOnExit remove_;  // destroyed last: after the file closes
  uint64_t bytes_;
  AlignedBuffer buf_;
  DiskIo io_;
  DiskFile file_;
  uint64_t next_ = 0;
};

// How a run finds the caches and the disk: the same run just before it,
// other layers run before it, or those and a weight load beside it.
enum class Setting { kWarm, kCold, kStreamed };

// One layer, the embeddings and the head of the model on a CPU backend, with
// a page pool of one layer, ready to time micro-batches.
class Bench {
 public:
  // `stream_dir`: where layer() with Setting::kStreamed reads ("": never).
  Bench(const Model& model, const EngineOptions& eo, const TimingPlan& timing,
        const std::string& stream_dir)
      : model_(model),
        eo_(eo),
        timing_(timing),
        n_evict_(eviction_layers(model, eo)),
        be_(eo.threads),
        weights_(model, be_, source()),
        fwd_(be_, model.config(), eo.compute_dtype) {
    const ModelConfig& c = model.config();
    KvGeometry g;
    g.n_layer = 1;
    g.n_kv_head = c.n_kv_head > 0 ? c.n_kv_head : c.n_head;
    g.head_dim = c.head_dim > 0 ? c.head_dim : c.n_embd / c.n_head;
    g.dtype = eo.kv_dtype;
    g.page_size = kPage;
    const int64_t pages = std::max({kDecodeRows.back(), kSlopeRows * (kLongCtx / kPage),
                                    kPrefillSeqs.back(), kLongPrompt / kPage});
    pool_ = std::make_unique<PagePool>(be_, g, g.bytes_per_page() * static_cast<uint64_t>(pages));
    for (int64_t p = 0; p < pages; ++p) {
      const int32_t id = pool_->allocate();
      const auto [k, v] = pool_->entry(0, id);
      be_.fill_zero(k, g.page_bytes());
      be_.fill_zero(v, g.page_bytes());
      pages_.push_back(id);
    }
    // The pages in a random order: with each sequence's pages adjacent in
    // this small pool the slope per key of decode attention measured half
    // the engine's, whose pool spreads a block's pages over the memory of
    // every layer (and see kSlopeRows).
    std::shuffle(pages_.begin(), pages_.end(), std::mt19937(5));
    kv_ = pool_->layer(0);
    const int64_t max_tokens =
        std::max({kDecodeRows.back(), kPrefillSeqs.back() * kPage, kLongPrompt});
    fwd_.reserve(max_tokens);
    hidden0_.resize(static_cast<size_t>(max_tokens * c.n_embd));
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : hidden0_) v = dist(rng);
    hidden_ = be_.alloc(hidden0_.size() * sizeof(float));
    logits_ = be_.alloc(static_cast<size_t>(kDecodeRows.back() * c.n_vocab) * sizeof(float));
    if (!stream_dir.empty()) {
      try {
        std::error_code ec;
        fs::create_directories(stream_dir, ec);
        read_ = std::make_unique<LayerRead>(stream_dir, layer_bytes_of(model, eo));
      } catch (const Error& e) {
        spdlog::warn("cost model: decode beside a weight load not measured: {}", e.what());
      }
    }
  }

  bool streams() const { return read_ != nullptr; }

  // Seconds of one layer over n_seq sequences of n_new new tokens after
  // `cached` keys each.
  // `shared`: whole pages at the start every sequence shares (the same
  // page ids, as a shared prompt prefix's).
  double layer(int64_t n_seq, int64_t cached, int64_t n_new, Setting setting = Setting::kWarm,
               int64_t shared = 0) {
    const MicroBatchHost host = batch(n_seq, cached, n_new, shared);
    const int64_t rows = host.n_tokens() * model_.config().n_embd;
    return time(
        [&] {
          be_.copy_to_device(hidden_.data(), hidden0_.data(),
                             static_cast<size_t>(rows) * sizeof(float));
          const MicroBatch mb = upload_micro_batch(be_, host, meta_);
          fwd_.layer(0, weights_.layer(0), kv_, mb, hidden_.as<float>());
          be_.synchronize();
        },
        setting);
  }

  // Seconds of the embeddings and the head of a decode step of n_seq
  // sequences.
  double head(int64_t n_seq, Setting setting = Setting::kWarm) {
    const MicroBatchHost host = batch(n_seq, kShortCtx - 1, 1);
    return time(
        [&] {
          const MicroBatch mb = upload_micro_batch(be_, host, meta_);
          fwd_.embed(weights_.global(), mb, hidden_.as<float>());
          fwd_.head(weights_.global(), mb, hidden_.as<float>(), logits_.as<float>());
          be_.synchronize();
        },
        setting);
  }

 private:
  // The median seconds of `body`: repeated back to back (its data stays in
  // the caches), or cold: each run after layers 1..n_evict_ of one
  // sequence, as the engine's other layers run between two runs of one;
  // streamed: a layer's weight load in flight too.
  double time(const std::function<void()>& body, Setting setting) {
    if (setting == Setting::kWarm) return time_runs(body, timing_).median;
    STRATA_ASSERT(setting != Setting::kStreamed || read_ != nullptr);
    const MicroBatchHost one = batch(1, kShortCtx - 1, 1);
    std::vector<double> t;
    const int reps = std::max(timing_.min_reps, 3);
    for (int r = -timing_.warmup; r < reps; ++r) {
      const MicroBatch mb = upload_micro_batch(be_, one, meta_);
      for (int64_t l = 1; l <= n_evict_; ++l) {
        fwd_.layer(l, weights_.layer(l), kv_, mb, hidden_.as<float>());
      }
      be_.synchronize();
      Ticket load;
      if (setting == Setting::kStreamed) load = read_->issue();
      const auto t0 = std::chrono::steady_clock::now();
      body();
      const std::chrono::duration<double> d = std::chrono::steady_clock::now() - t0;
      if (setting == Setting::kStreamed) read_->wait(load);
      if (r >= 0) t.push_back(d.count());
    }
    return spread_of(std::move(t)).median;
  }

  MatrixSource source() {
    if (!eo_.weight_dtype) return {};  // the model's own bytes, as the engine reads them
    return [this, names = measured_tensors(model_.desc(), n_evict_ + 1)](
               const TensorInfo& t) -> std::optional<MatrixView> {
      const DType d = engine_dtype(t, eo_);
      if (t.shape.size() != 2 || d == t.dtype || !names.count(t.name)) return std::nullopt;
      MatrixView v;
      v.dtype = d;
      v.rows = t.shape[0];
      v.cols = t.shape[1];
      v.row_bytes = row_bytes(d, v.cols);
      owned_.push_back(random_matrix(be_, d, v.rows, v.cols, owned_.size() + 1));
      v.data = owned_.back().data();
      return v;
    };
  }

  MicroBatchHost batch(int64_t n_seq, int64_t cached, int64_t n_new, int64_t shared = 0) const {
    const ModelConfig& c = model_.config();
    const int64_t per_seq = (cached + n_new + kPage - 1) / kPage;
    STRATA_ASSERT(shared >= 0 && shared * kPage < cached + n_new);
    STRATA_ASSERT(shared + n_seq * (per_seq - shared) <= static_cast<int64_t>(pages_.size()));
    std::vector<int32_t> table(static_cast<size_t>(per_seq));
    MicroBatchHost h;
    h.track_touched = eo_.sparse_budget > 0;  // as the engine's blocks do
    std::vector<int32_t> tokens(static_cast<size_t>(n_new));
    for (int64_t s = 0; s < n_seq; ++s) {
      for (int64_t i = 0; i < n_new; ++i) {
        tokens[static_cast<size_t>(i)] = static_cast<int32_t>((s * 131 + i * 7) % c.n_vocab);
      }
      std::copy_n(pages_.begin(), shared, table.begin());
      std::copy_n(pages_.begin() + shared + s * (per_seq - shared), per_seq - shared,
                  table.begin() + shared);
      h.add_sequence(tokens, cached, table, kPage, false, c.learned_pos ? c.pos_offset : -1);
    }
    return h;
  }

  const Model& model_;
  const EngineOptions& eo_;
  const TimingPlan& timing_;
  int64_t n_evict_;  // layers 1..n_evict_ run between cold runs
  CpuBackend be_;
  std::vector<DeviceBuffer> owned_;  // requantized matrices (before weights_)
  ResidentWeights weights_;
  Forward fwd_;
  std::unique_ptr<PagePool> pool_;
  std::vector<int32_t> pages_;
  KvLayer kv_;
  std::vector<float> hidden0_;
  DeviceBuffer hidden_, logits_, meta_;
  std::unique_ptr<LayerRead> read_;
};

// The executable that measures: its path and modification time, so that a
// rebuild (whose kernels may differ) measures again.
std::string this_build() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return build_commit();
  const auto t = fs::last_write_time(exe, ec);
  return fmt::format("{} {} {}", build_commit(), exe.string(),
                     ec ? 0 : t.time_since_epoch().count());
}

}  // namespace

std::string engine_compute_key(const Model& model, const EngineOptions& eo) {
  const ModelConfig& c = model.config();
  std::string dtypes;
  const std::set<std::string> names = measured_tensors(model.desc(), 1);
  for (const TensorInfo& t : model.desc().tensors) {
    if (t.shape.size() == 2 && names.count(t.name)) {
      dtypes += fmt::format("{}:{},", t.name, dtype_name(engine_dtype(t, eo)));
    }
  }
  return fmt::format(
      "{}|{}|{} L{} E{} H{}/{}x{} F{} V{} ctx{} gated{}|compute {} kv {} threads {}|{}", host_key(),
      this_build(), c.architecture, c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.n_ff,
      c.n_vocab, c.n_ctx, c.gated_ffn, dtype_name(eo.compute_dtype), dtype_name(eo.kv_dtype),
      eo.threads, dtypes);
}

EngineCompute measure_engine_compute(const Model& model, const EngineOptions& eo,
                                     const TimingPlan& timing, const std::string& stream_dir) {
  Bench b(model, eo, timing, stream_dir);
  const int64_t n_ctx = std::max<int64_t>(model.config().n_ctx, kShortCtx + 1);
  const int64_t long_ctx = std::min(kLongCtx, n_ctx);
  const int64_t long_prompt = std::min(kLongPrompt, n_ctx) / kPage * kPage;
  const int64_t n_short = long_prompt / kPage;
  // The slope over shared keys: the sequences share all but their last
  // kShortCtx keys.
  const int64_t shared_pages = (long_ctx - kShortCtx) / kPage;

  // Every point, in this order: decode and head at each row count, decode at
  // long context, the long prompt, the prompts of one page at each count
  // and as many as the long prompt has pages.
  auto one_pass = [&] {
    std::vector<double> t;
    for (int64_t g : kDecodeRows) {
      t.push_back(b.layer(g, kShortCtx - 1, 1));
      t.push_back(b.layer(g, kShortCtx - 1, 1, Setting::kCold));
      t.push_back(b.head(g));
      t.push_back(b.head(g, Setting::kCold));
    }
    t.push_back(b.layer(kSlopeRows, long_ctx - 1, 1, Setting::kCold));
    t.push_back(b.layer(kSlopeRows, long_ctx - 1, 1, Setting::kCold, shared_pages));
    t.push_back(b.layer(1, 0, long_prompt, Setting::kCold));
    for (int64_t n : kPrefillSeqs) t.push_back(b.layer(n, 0, kPage, Setting::kCold));
    t.push_back(b.layer(n_short, 0, kPage, Setting::kCold));
    return t;
  };
  // Two passes, each point's faster median: a disturbance from elsewhere on
  // the machine seldom lasts through both.
  std::vector<double> t = one_pass();
  const std::vector<double> again = one_pass();
  for (size_t i = 0; i < t.size(); ++i) t[i] = std::min(t[i], again[i]);
  // Beside a weight load, once (a disturbance only adds to what the load
  // costs anyway).
  std::vector<double> streamed;
  if (b.streams()) {
    try {
      for (int64_t g : kDecodeRows) {
        streamed.push_back(b.layer(g, kShortCtx - 1, 1, Setting::kStreamed));
      }
    } catch (const Error& e) {
      spdlog::warn("cost model: decode beside a weight load not measured: {}", e.what());
      streamed.clear();
    }
  }
  EngineCompute c;
  c.key = engine_compute_key(model, eo);
  c.decode_ctx = static_cast<double>(kShortCtx);
  size_t i = 0;
  for (int64_t g : kDecodeRows) {
    c.decode_rows.push_back(static_cast<double>(g));
    c.decode_layer_s.push_back(t[i++]);
    c.decode_layer_cold_s.push_back(t[i++]);
    c.head_rows.push_back(static_cast<double>(g));
    c.head_s.push_back(t[i++]);
    c.head_cold_s.push_back(t[i++]);
  }
  c.decode_layer_streamed_s = streamed;
  const double at_long = t[i++];
  const double at_short =
      interpolate(c.decode_rows, c.decode_layer_cold_s, static_cast<double>(kSlopeRows));
  c.decode_key_s = std::max(
      0.0, (at_long - at_short) / static_cast<double>(kSlopeRows * (long_ctx - kShortCtx)));
  const double at_long_shared = t[i++];
  c.decode_shared_key_s =
      shared_pages > 0 ? std::max(0.0, (at_long_shared - at_short) /
                                           static_cast<double>(kSlopeRows * shared_pages * kPage))
                       : 0;

  // The same tokens as one long prompt and as prompts of one page: the
  // difference is the attention that grows with the square of the length.
  const double one_long = t[i++];
  const double many_short = t[i + kPrefillSeqs.size()];
  const double pairs = static_cast<double>(long_prompt * long_prompt - n_short * kPage * kPage);
  c.prefill_pair_s = pairs > 0 ? std::max(0.0, (one_long - many_short) / pairs) : 0;
  c.prefill_seq = static_cast<double>(kPage);
  for (int64_t n : kPrefillSeqs) {
    const double v = t[i++];
    const double quad = static_cast<double>(n * kPage * kPage) * c.prefill_pair_s;
    c.prefill_tokens.push_back(static_cast<double>(n * kPage));
    c.prefill_layer_s.push_back(std::max(v - quad, 0.5 * v));
  }
  // More rows or tokens never take less time: a point below the one before
  // it is the machine's noise, and takes that one's time.
  for (std::vector<double>* v :
       {&c.decode_layer_s, &c.decode_layer_cold_s, &c.decode_layer_streamed_s, &c.prefill_layer_s,
        &c.head_s, &c.head_cold_s}) {
    for (size_t k = 1; k < v->size(); ++k) (*v)[k] = std::max((*v)[k], (*v)[k - 1]);
  }
  // Nor out of the caches less than in them, nor beside a load less than
  // without one.
  for (size_t k = 0; k < c.decode_rows.size(); ++k) {
    c.decode_layer_cold_s[k] = std::max(c.decode_layer_cold_s[k], c.decode_layer_s[k]);
    c.head_cold_s[k] = std::max(c.head_cold_s[k], c.head_s[k]);
    if (!c.decode_layer_streamed_s.empty()) {
      c.decode_layer_streamed_s[k] =
          std::max(c.decode_layer_streamed_s[k], c.decode_layer_cold_s[k]);
    }
  }
  c.validate("the measured compute");
  return c;
}

EngineCompute engine_compute_for(const Model& model, const EngineOptions& eo,
                                 const std::string& offload_dir) {
  const std::string key = engine_compute_key(model, eo);
  const std::string path =
      (fs::path(profile_cache_dir(offload_dir)) / fmt::format("compute-{:016x}.json", fnv1a(key)))
          .string();
  if (fs::exists(path)) {
    try {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      EngineCompute c = engine_compute_from_json(nlohmann::json::parse(text.str()), path);
      if (c.key == key) {
        spdlog::info("cost model: the engine's compute for this model from {}", path);
        return c;
      }
    } catch (const std::exception& e) {
      spdlog::warn("cost model: the cached measurement {} is not usable ({}); measuring again",
                   path, e.what());
    }
  }
  spdlog::info(
      "cost model: measuring the engine's compute for {} on this machine (one layer and the head, "
      "{} compute, {} KV; once, cached in {})",
      model.desc().path, dtype_name(eo.compute_dtype), dtype_name(eo.kv_dtype), path);
  TimingPlan timing;
  timing.warmup = 1;
  timing.min_reps = 5;
  timing.min_seconds = 0.1;
  const EngineCompute c = measure_engine_compute(model, eo, timing, offload_dir);
  write_file_atomically(path, to_json(c).dump(1) + "\n", "the measured compute");
  return c;
}

}  // namespace strata
