#include "offload/engine.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "kernels/cpu/cpu_backend.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "model/layer_weights.h"
#include "model/model.h"
#include "offload/schedule.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

EngineOptions validated(const EngineOptions& o) {
  if (o.compute_dtype != DType::kF32 && o.compute_dtype != DType::kBF16) {
    fail("compute dtype {} is not supported; use f32 or bf16", dtype_name(o.compute_dtype));
  }
  if (o.kv_dtype != DType::kF32 && o.kv_dtype != DType::kF16 && o.kv_dtype != DType::kBF16) {
    fail("KV cache dtype {} is not supported; use f32, f16 or bf16", dtype_name(o.kv_dtype));
  }
  if (o.gpu_batch_size < 1 || o.gpu_batch_size > (1 << 20)) {
    fail("batch size {} is not allowed; use 1 or more", o.gpu_batch_size);
  }
  if (o.num_gpu_batches < 1 || o.num_gpu_batches > (1 << 20)) {
    fail("number of batches {} is not allowed; use 1 or more", o.num_gpu_batches);
  }
  if (o.page_size < 1 || o.page_size > 4096) {
    fail("KV page size {} is not allowed; use 1 to 4096 tokens", o.page_size);
  }
  if (o.threads < 0) fail("thread count {} is not allowed; use 0 (all cores) or more", o.threads);
  EngineOptions v = o;
  if (v.kv_budget_bytes == 0) v.kv_budget_bytes = default_kv_budget_bytes();
  return v;
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

// Grows `buf` to hold at least `bytes` (contents are not kept).
void ensure(Backend& be, DeviceBuffer& buf, size_t bytes) {
  if (buf.size() >= bytes) return;
  const size_t grown = std::max(bytes, buf.size() * 3 / 2);
  buf = DeviceBuffer();
  buf = be.alloc(grown);
}

// Tokens the forward computes at once: a micro-batch's sequences are cut
// into groups of at most this many tokens (a longer prompt is a group of its
// own), which bounds the forward's scratch; matmuls are as efficient at this
// height as at any larger one.
constexpr int64_t kMaxGroupTokens = 4096;

// Everything resident: weights in place, KV in RAM, compute on the CPU.
class ResidentEngine final : public Engine {
 public:
  ResidentEngine(const Model& model, const EngineOptions& options)
      : model_(model),
        opt_(validated(options)),
        backend_(opt_.threads),
        weights_(model, backend_),
        fwd_(backend_, model.config(), opt_.compute_dtype),
        kv_(backend_, kv_geometry(model.config(), opt_), opt_.kv_budget_bytes) {
    mbs_.resize(static_cast<size_t>(opt_.num_gpu_batches));
    spdlog::info(
        "engine: {} on {}, compute {}, KV {} in pages of {} tokens (budget {}), block {} x {}",
        model.desc().path, backend_.name(), dtype_name(opt_.compute_dtype),
        dtype_name(opt_.kv_dtype), opt_.page_size,
        format_bytes(static_cast<double>(opt_.kv_budget_bytes)), opt_.gpu_batch_size,
        opt_.num_gpu_batches);
  }

  const ModelConfig& config() const override { return model_.config(); }
  int64_t block_size() const override { return opt_.gpu_batch_size * opt_.num_gpu_batches; }
  void run_block(std::span<const SeqInput> seqs, const StepFn& on_step) override;
  std::vector<float> score(std::span<const int32_t> tokens) override;
  EngineStats stats() const override { return stats_; }

 private:
  // Consecutive sequences of a micro-batch computed together.
  struct Group {
    MicroBatchHost host;
    MicroBatch dev;
    DeviceBuffer meta;   // device copy of `host` (unused when memory is host memory)
    int64_t token0 = 0;  // its first row in the micro-batch's hidden
    int64_t row0 = 0;    // its first row in the step's logits
  };
  struct MicroState {
    std::vector<int32_t> members;  // block indices of its live sequences, ascending
    int64_t row0 = 0;              // its first row in the step's logits
    std::vector<Group> groups;     // [n_groups] this step's groups (the vector only grows)
    int64_t n_groups = 0;
    DeviceBuffer hidden;  // [n_tokens, n_embd] f32, kept between columns
  };
  struct SeqState {
    int32_t kv = -1;       // KV cache sequence, -1 once finished
    int32_t next = -1;     // token fed to the next decode step
    int32_t produced = 0;  // logits rows handed out so far
  };

  int64_t pos_offset() const { return config().learned_pos ? config().pos_offset : -1; }
  void check_ids(std::span<const int32_t> ids, const char* what, size_t index) const;
  void check_window(int64_t positions, const char* what, size_t index) const;
  void note_peak(uint64_t extra);

  const Model& model_;
  EngineOptions opt_;
  CpuBackend backend_;
  ResidentWeights weights_;
  Forward fwd_;
  KvCache kv_;
  EngineStats stats_;
  std::vector<MicroState> mbs_;
  DeviceBuffer logits_;  // [block rows, n_vocab] f32
  std::vector<float> logits_host_;
};

void ResidentEngine::check_ids(std::span<const int32_t> ids, const char* what, size_t index) const {
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

void ResidentEngine::check_window(int64_t positions, const char* what, size_t index) const {
  const int64_t w = config().sliding_window;
  if (w > 0 && positions > w) {
    fail(
        "{} {} needs {} positions, but {} attends within a sliding window of {} tokens, which "
        "this engine does not implement; keep prompt + new tokens within {}",
        what, index, positions, model_.desc().path, w, w);
  }
}

void ResidentEngine::note_peak(uint64_t extra) {
  uint64_t bytes = kv_.pool().peak_bytes() + fwd_.workspace_bytes() + logits_.size() + extra;
  for (const MicroState& m : mbs_) {
    bytes += m.hidden.size();
    for (const Group& g : m.groups) bytes += g.meta.size();
  }
  uint64_t& peak = stats_.peak_bytes["cpu"];
  peak = std::max(peak, bytes);
}

void ResidentEngine::run_block(std::span<const SeqInput> seqs, const StepFn& on_step) {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(seqs.size());
  if (n == 0) return;
  if (n > block_size()) {
    fail("a block of {} sequences exceeds the engine's block size {} ({} x {})", n, block_size(),
         opt_.gpu_batch_size, opt_.num_gpu_batches);
  }
  int64_t n_steps = 0;
  std::vector<int64_t> stored(static_cast<size_t>(n));  // tokens each sequence will store
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqInput& s = seqs[i];
    const int64_t p = static_cast<int64_t>(s.prompt.size());
    if (p == 0) fail("prompt {} is empty; every prompt needs at least one token", i);
    if (s.max_new_tokens < 1) {
      fail("prompt {} asks for {} new tokens; use 1 or more", i, s.max_new_tokens);
    }
    if (p + s.max_new_tokens > c.n_ctx) {
      fail(
          "prompt {} has {} tokens + {} new tokens = {}, more than the context of {} ({} "
          "tokens); shorten the prompt or lower the number of new tokens",
          i, p, s.max_new_tokens, p + s.max_new_tokens, model_.desc().path, c.n_ctx);
    }
    check_ids(s.prompt, "prompt", i);
    // The last sampled token is never fed back: p + max_new - 1 positions.
    stored[i] = p + s.max_new_tokens - 1;
    check_window(stored[i], "prompt", i);
    n_steps = std::max<int64_t>(n_steps, s.max_new_tokens);
  }
  const int64_t need = kv_.pages_needed({}, stored);
  if (need > kv_.pool().n_free()) {
    fail(
        "KV cache budget {} holds {} pages of {} tokens ({} free); this block needs {} for {} "
        "sequences of up to {} tokens; lower the batch size or raise the KV budget",
        format_bytes(static_cast<double>(kv_.pool().budget_bytes())), kv_.pool().max_pages(),
        opt_.page_size, kv_.pool().n_free(), need, n,
        *std::max_element(stored.begin(), stored.end()));
  }

  // Sequences fill the micro-batches in order, gpu_batch_size each.
  std::vector<SeqState> st(static_cast<size_t>(n));
  for (MicroState& m : mbs_) m.members.clear();
  struct Cleanup {
    KvCache& kv;
    std::vector<SeqState>& st;
    ~Cleanup() {
      for (SeqState& s : st) {
        if (s.kv >= 0) kv.remove_sequence(s.kv);
        s.kv = -1;
      }
    }
  } cleanup{kv_, st};
  for (int64_t b = 0; b < n; ++b) {
    st[static_cast<size_t>(b)].kv = kv_.add_sequence();
    mbs_[static_cast<size_t>(b / opt_.gpu_batch_size)].members.push_back(static_cast<int32_t>(b));
    stats_.prompt_tokens += static_cast<int64_t>(seqs[static_cast<size_t>(b)].prompt.size());
  }

  const int64_t V = c.n_vocab, E = c.n_embd;
  const int64_t n_mb = opt_.num_gpu_batches;
  const std::vector<ScheduleStep> schedule = make_block_schedule({n_steps, c.n_layer, n_mb});
  ensure(backend_, logits_, static_cast<size_t>(n * V) * sizeof(float));

  std::vector<int32_t> active;
  std::vector<SeqAction> actions;
  int64_t n_live = n;
  Clock::time_point t_step;
  int32_t step = -1;
  for (const ScheduleStep& ss : schedule) {
    if (ss.step != step) {  // a new generation step: its rows of logits
      if (n_live == 0) break;
      step = ss.step;
      t_step = Clock::now();
      active.clear();
      for (MicroState& m : mbs_) {
        m.row0 = static_cast<int64_t>(active.size());
        active.insert(active.end(), m.members.begin(), m.members.end());
      }
    }
    MicroState& m = mbs_[static_cast<size_t>(ss.micro_batch)];
    if (!m.members.empty()) {
      switch (ss.kind) {
        case StageKind::kEmbed: {
          // The step's new tokens: KV slots for them, cut into groups.
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
              Group& g = m.groups[static_cast<size_t>(m.n_groups++)];
              g.host.clear();
              g.token0 = n_tokens;
              g.row0 = m.row0 + static_cast<int64_t>(r);
            }
            const int64_t start = kv_.extend(s.kv, n_new);
            m.groups[static_cast<size_t>(m.n_groups - 1)].host.add_sequence(
                toks, start, kv_.pages(s.kv), opt_.page_size, false, pos_offset());
            n_tokens += n_new;
          }
          ensure(backend_, m.hidden, static_cast<size_t>(n_tokens * E) * sizeof(float));
          for (int64_t gi = 0; gi < m.n_groups; ++gi) {
            Group& g = m.groups[static_cast<size_t>(gi)];
            g.dev = upload_micro_batch(backend_, g.host, g.meta);
            fwd_.embed(weights_.global(), g.dev, m.hidden.as<float>() + g.token0 * E);
          }
          break;
        }
        case StageKind::kLayer:
          for (int64_t gi = 0; gi < m.n_groups; ++gi) {
            Group& g = m.groups[static_cast<size_t>(gi)];
            fwd_.layer(ss.layer, weights_.layer(ss.layer), kv_.pool().layer(ss.layer), g.dev,
                       m.hidden.as<float>() + g.token0 * E);
          }
          break;
        case StageKind::kHead:
          for (int64_t gi = 0; gi < m.n_groups; ++gi) {
            Group& g = m.groups[static_cast<size_t>(gi)];
            fwd_.head(weights_.global(), g.dev, m.hidden.as<float>() + g.token0 * E,
                      logits_.as<float>() + g.row0 * V);
          }
          break;
      }
    }
    if (ss.kind != StageKind::kHead || ss.micro_batch != n_mb - 1) continue;

    // End of the step: hand the logits over, then retire finished sequences.
    backend_.synchronize();
    const double dt = seconds_since(t_step);
    (step == 0 ? stats_.prefill_s : stats_.decode_s) += dt;
    stats_.queue_busy_s["compute"] += dt;
    note_peak(0);
    const float* logits = logits_.as<float>();
    if (!backend_.memory_is_host()) {
      logits_host_.resize(active.size() * static_cast<size_t>(V));
      backend_.copy_to_host(logits_host_.data(), logits, logits_host_.size() * sizeof(float));
      logits = logits_host_.data();
    }
    actions.assign(active.size(), SeqAction{});
    on_step(step, active, logits, actions);
    stats_.generated_tokens += static_cast<int64_t>(active.size());
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
      kv_.remove_sequence(s.kv);
      s.kv = -1;
      --n_live;
      auto& members = mbs_[static_cast<size_t>(b / opt_.gpu_batch_size)].members;
      members.erase(std::find(members.begin(), members.end(), b));
    }
  }
}

std::vector<float> ResidentEngine::score(std::span<const int32_t> tokens) {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail("nothing to score: the token sequence is empty");
  if (n > c.n_ctx) {
    fail("scoring {} tokens exceeds the context of {} ({} tokens); use shorter chunks", n,
         model_.desc().path, c.n_ctx);
  }
  check_ids(tokens, "scored sequence", 0);
  check_window(n, "scored sequence", 0);
  const int64_t need = kv_.geometry().pages_for(n);
  if (need > kv_.pool().n_free()) {
    fail(
        "KV cache budget {} holds {} pages of {} tokens ({} free); scoring {} tokens needs {}; "
        "raise the KV budget or use shorter chunks",
        format_bytes(static_cast<double>(kv_.pool().budget_bytes())), kv_.pool().max_pages(),
        opt_.page_size, kv_.pool().n_free(), n, need);
  }
  const Clock::time_point t0 = Clock::now();
  struct SeqGuard {
    KvCache& kv;
    int32_t id;
    ~SeqGuard() { kv.remove_sequence(id); }
  } guard{kv_, kv_.add_sequence()};
  kv_.extend(guard.id, n);
  MicroBatchHost host;
  host.add_sequence(tokens, 0, kv_.pages(guard.id), opt_.page_size, true, pos_offset());
  DeviceBuffer meta;
  const MicroBatch mb = upload_micro_batch(backend_, host, meta);
  DeviceBuffer hidden = backend_.alloc(static_cast<size_t>(n * c.n_embd) * sizeof(float));
  std::vector<float> out(static_cast<size_t>(n * c.n_vocab));
  DeviceBuffer logits_dev;
  float* logits = out.data();
  if (!backend_.memory_is_host()) {
    logits_dev = backend_.alloc(out.size() * sizeof(float));
    logits = logits_dev.as<float>();
  }
  fwd_.embed(weights_.global(), mb, hidden.as<float>());
  for (int64_t l = 0; l < c.n_layer; ++l) {
    fwd_.layer(l, weights_.layer(l), kv_.pool().layer(l), mb, hidden.as<float>());
  }
  fwd_.head(weights_.global(), mb, hidden.as<float>(), logits);
  if (!backend_.memory_is_host()) {
    backend_.copy_to_host(out.data(), logits, out.size() * sizeof(float));
  }
  backend_.synchronize();
  const double dt = seconds_since(t0);
  stats_.prefill_s += dt;
  stats_.queue_busy_s["compute"] += dt;
  stats_.prompt_tokens += n;
  note_peak(hidden.size() + out.size() * sizeof(float));
  return out;
}

}  // namespace

DType default_kv_dtype(DType compute_dtype) {
  return compute_dtype == DType::kBF16 ? DType::kF16 : DType::kF32;
}

uint64_t default_kv_budget_bytes() {
  constexpr uint64_t kMin = uint64_t{256} << 20;
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream in(line.substr(13));
      uint64_t kib = 0;
      if (in >> kib) return std::max(kMin, kib * 1024 / 2);
    }
  }
  spdlog::warn("engine: /proc/meminfo has no MemAvailable; the KV budget defaults to {}",
               format_bytes(static_cast<double>(kMin)));
  return kMin;
}

std::unique_ptr<Engine> make_engine(const Model& model, const EngineOptions& options) {
  return std::make_unique<ResidentEngine>(model, options);
}

}  // namespace strata
