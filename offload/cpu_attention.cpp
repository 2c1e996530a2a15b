// CPU attention beside a device (cpu_attention.h).
#include "offload/cpu_attention.h"

#include <chrono>
#include <functional>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "offload/block_state.h"
#include "offload/schedule.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

CpuAttention::CpuAttention(Forward& fwd, Backend& device, DeviceCopies* copies, int threads,
                           int64_t n_layer, int64_t n_micro_batches, Trace* trace)
    : fwd_(fwd),
      device_(device),
      copies_(copies),
      host_(std::make_unique<CpuBackend>(threads)),
      queue_("cpu attention", trace),
      n_mb_(n_micro_batches),
      jobs_(static_cast<size_t>(n_micro_batches)),
      job_of_(static_cast<size_t>(n_layer * n_micro_batches), 0) {}

CpuAttention::~CpuAttention() {
  try {
    queue_.drain();
  } catch (const std::exception&) {
  }
  jobs_.clear();  // their RAM is the cpu tier's, which goes first
}

void CpuAttention::prepare(const std::vector<int64_t>& hidden_tokens, TierPool& ram) {
  const int64_t QKV = fwd_.qkv_dim(), Q = fwd_.q_dim();
  for (size_t k = 0; k < jobs_.size(); ++k) {
    Job& job = jobs_[k];
    const size_t qkv_b = static_cast<size_t>(hidden_tokens[k] * QKV) * sizeof(float);
    const size_t attn_b = static_cast<size_t>(hidden_tokens[k] * Q) * sizeof(float);
    if (job.qkv_dev.size() != qkv_b) {
      job.qkv_dev = DeviceBuffer();
      if (qkv_b > 0) job.qkv_dev = device_.alloc(qkv_b);
    }
    if (job.attn_dev.size() != attn_b) {
      job.attn_dev = DeviceBuffer();
      if (attn_b > 0) job.attn_dev = device_.alloc(attn_b);
    }
    if (job.qkv.size() != qkv_b) {
      job.qkv.reset();
      if (qkv_b > 0) job.qkv = ram.allocate(qkv_b, "q, k, v rows for CPU attention");
    }
  }
}

void CpuAttention::start(const ScheduleStep& ss, const LayerWeights& w) {
  const int64_t k = ss.micro_batch, j = ss.layer;
  BlockState::MicroState& m = block_->micro_batch(k);
  Job& job = jobs_[static_cast<size_t>(k)];
  STRATA_ASSERT(job.finished);
  const int64_t E = fwd_.config().n_embd, QKV = fwd_.qkv_dim(), Q = fwd_.q_dim();
  const int64_t n_tokens = m.n_tokens();
  for (int64_t gi = 0; gi < m.n_groups; ++gi) {
    const BlockState::Group& gr = m.groups[static_cast<size_t>(gi)];
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
  if (copies_ != nullptr) {
    down = copies_->to_host(job.qkv.data(), job.qkv_dev.data(), bytes);
  } else {
    device_.copy_to_host(job.qkv.data(), job.qkv_dev.data(), bytes);
  }
  float* qkv_host = reinterpret_cast<float*>(job.qkv.data());
  job.layer = j;
  job.w = w;
  job.finished = false;
  job.down_s = 0;
  const float scale = fwd_.attention_scale();
  const int64_t n_head = fwd_.config().n_head, n_groups = m.n_groups;
  job.n = queue_.push(
      [this, k, j, down, scale, n_head, n_groups, QKV, Q, qkv_host] {
        Job& jb = jobs_[static_cast<size_t>(k)];
        const auto t0 = Clock::now();
        down();
        jb.down_s = std::chrono::duration<double>(Clock::now() - t0).count();
        const int64_t kvd = (QKV - Q) / 2;
        const KvLayer kv = kv_->pool().layer(j);
        const BlockState::MicroState& ms = block_->micro_batch(k);
        for (int64_t gi = 0; gi < n_groups; ++gi) {
          const BlockState::Group& gr = ms.groups[static_cast<size_t>(gi)];
          DeviceBuffer none;
          const MicroBatch hmb = upload_micro_batch(*host_, gr.host, none);  // host arrays
          float* q = qkv_host + gr.token0 * QKV;
          if (hmb.n_stale > 0) host_->key_minmax(kv, hmb.stale, hmb.stale_filled, hmb.n_stale);
          host_->kv_append(kv, q + Q, QKV, q + Q + kvd, QKV, hmb.slots, hmb.n_tokens, hmb.touched,
                           hmb.n_filled, hmb.n_touched);
          host_->attention(jb.attn.data() + gr.token0 * Q, Q, q, QKV, n_head, kv, hmb.seqs, scale);
        }
      },
      "", 0, {fmt::format("attention layer {} k={}", j, k), "attention", ss.step});
  job_of_[static_cast<size_t>(j * n_mb_ + k)] = job.n;
  if (pending_ >= 0) finish(pending_);
  pending_ = k;
}

void CpuAttention::finish(int64_t k) {
  Job& job = jobs_[static_cast<size_t>(k)];
  BlockState::MicroState& m = block_->micro_batch(k);
  queue_.wait(job.n);
  const int64_t E = fwd_.config().n_embd, Q = fwd_.q_dim();
  down_.bytes += job.qkv_bytes;
  down_.busy_s += job.down_s;
  const auto t0 = Clock::now();
  device_.copy_to_device(job.attn_dev.data(), job.attn.data(), job.attn.size() * sizeof(float));
  up_.bytes += job.attn.size() * sizeof(float);
  up_.busy_s += std::chrono::duration<double>(Clock::now() - t0).count();
  for (int64_t gi = 0; gi < m.n_groups; ++gi) {
    const BlockState::Group& gr = m.groups[static_cast<size_t>(gi)];
    fwd_.layer_out(job.w, gr.dev, job.attn_dev.as<float>() + gr.token0 * Q,
                   m.hidden.as<float>() + gr.token0 * E);
  }
  job.finished = true;
}

void CpuAttention::leave(const ScheduleStep& at) {
  if (pending_ >= 0 && (at.kind != StageKind::kLayer ||
                        jobs_[static_cast<size_t>(pending_)].layer != at.layer)) {
    flush();
  }
}

void CpuAttention::flush() {
  if (pending_ < 0) return;
  const int64_t k = pending_;
  pending_ = -1;
  finish(k);
}

void CpuAttention::wait(int64_t layer, int64_t k) {
  if (layer < 0) return;
  queue_.wait(job_of_[static_cast<size_t>(layer * n_mb_ + k)]);
}

void CpuAttention::drain() {
  pending_ = -1;
  for (Job& j : jobs_) j.finished = true;
  queue_.drain();
}

void CpuAttention::add_stats(EngineStats& s) const {
  if (queue_.last() == 0) return;
  EngineStats::Link& down = s.links["gpu->cpu"];
  down.bytes += down_.bytes;
  down.busy_s += down_.busy_s;
  EngineStats::Link& up = s.links["cpu->gpu"];
  up.bytes += up_.bytes;
  up.busy_s += up_.busy_s;
  s.queue_busy_s["cpu attention"] += queue_.busy_s();
}

}  // namespace strata
