// CPU attention beside a device with memory of its own
// (MemoryMode::kCpuAttention, --cpu-attention): the KV cache lives in RAM,
// in a pool of a CpuBackend of its own, and each layer's KV append and
// attention run there, on a queue with a thread of its own ("cpu
// attention"), between the two halves of the layer on the device
// (Forward::layer_qkv, layer_out).
//
// Pipelined over the micro-batches of a layer column: start() queues
// micro-batch k's first half on the device, the copy of its q/k/v rows down
// (into pinned RAM on a GPU) and its KV append and attention on the queue,
// then finishes the previous micro-batch (waits for its attention, copies
// its output rows up, queues the layer's second half). So while the CPU
// attends micro-batch k the device works on k-1's second half and k+1's
// first. A step of another column must not run before the column's last
// attention is finished (its transfers reuse the layer's weight buffer):
// leave() finishes it then.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "generate/engine.h"
#include "kernels/backend.h"
#include "model/layer_weights.h"
#include "offload/tier_pool.h"
#include "offload/transfer.h"

namespace strata {

class BlockState;
class Forward;
class KvCache;
class Trace;
struct ScheduleStep;

class CpuAttention {
 public:
  // `device`: the backend the forward computes on; `copies` its copy queues
  // (null: the backend's own synchronous copies).
  CpuAttention(Forward& fwd, Backend& device, DeviceCopies* copies, int threads,
               int64_t n_layer, int64_t n_micro_batches, Trace* trace);
  ~CpuAttention();

  // The backend whose memory holds the KV cache and computes attention.
  Backend& host_backend() { return *host_; }
  // The KV cache and block the jobs read; set before the first block.
  void attach(KvCache& kv, BlockState& block) {
    kv_ = &kv;
    block_ = &block;
  }

  // Each micro-batch's q/k/v and attention rows on the device and in RAM
  // (`ram`, pinned on a GPU) for up to hidden_tokens[k] tokens.
  void prepare(const std::vector<int64_t>& hidden_tokens, TierPool& ram);
  // Queues layer ss.layer of micro-batch ss.micro_batch with weights `w`
  // (see above).
  void start(const ScheduleStep& ss, const LayerWeights& w);
  // Before anything of step `at` runs: finishes the pending micro-batch
  // when `at` is not a compute of its layer column.
  void leave(const ScheduleStep& at);
  // Finishes the pending micro-batch (end of a step).
  void flush();
  // Waits until the attention of (layer, k) has written its KV.
  void wait(int64_t layer, int64_t k);
  // Waits for every job; forgets a pending one (however a block ends).
  void drain();

  // Bytes copied down and up, and the queue's busy time.
  void add_stats(EngineStats& s) const;

 private:
  // The CPU attention of one micro-batch in one layer.
  struct Job {
    int64_t layer = -1;
    uint64_t n = 0;         // its number on the queue
    bool finished = true;   // its second half is queued
    LayerWeights w;         // the views the second half reads
    DeviceBuffer qkv_dev;   // [tokens, qkv_dim]
    DeviceBuffer attn_dev;  // [tokens, q_dim]
    PoolBlock qkv;          // [tokens, qkv_dim] in RAM
    std::vector<float> attn;  // [tokens, q_dim]
    size_t qkv_bytes = 0;   // of this job
    double down_s = 0;      // time of the copy down (written by the job)
  };
  void finish(int64_t k);

  Forward& fwd_;
  Backend& device_;
  DeviceCopies* copies_;
  std::unique_ptr<Backend> host_;
  TransferQueue queue_;
  int64_t n_mb_;
  KvCache* kv_ = nullptr;
  BlockState* block_ = nullptr;
  std::vector<Job> jobs_;              // [n_mb]
  std::vector<uint64_t> job_of_;       // [n_layer * n_mb] last job of each (layer, k)
  int64_t pending_ = -1;               // micro-batch whose second half is not queued
  EngineStats::Link down_, up_;        // gpu->cpu, cpu->gpu
};

}  // namespace strata
