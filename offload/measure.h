// Measurements of the machine Strata runs on, for `strata profile`
// (plan/machine_profile.h): sequential disk bandwidth through the disk I/O layer (io_uring,
// O_DIRECT, many blocks in flight), host<->device copies and the GEMM and paged attention rates of
// a Backend, the RAM read rate, and the memory sizes. Every measurement warms up first, then
// repeats and keeps the median with its range (core/bench.h), so one slow run on a shared machine
// does not become the number.
//
// It measures; it does not decide what a number means to the cost model
// (plan/machine_profile.cpp maps them onto a HardwareProfile). Rates come back in
// bytes or FLOPs per second. FLOPs of attention are counted as the cost model
// counts them (policy/cost_model.h): 4 * n_new * ctx * q_dim per sequence,
// so a causal prefill of s tokens counts 4 * s^2 * q_dim although the kernel
// skips the masked half.
//
// Invariant: every rate returned is positive and finite; a measurement that
// cannot produce one throws Error naming what failed.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/bench.h"
#include "core/dtype.h"
#include "kernels/backend.h"

namespace strata {

// Removes a file when it goes out of scope (the measurements' scratch files).
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

// ---- memory sizes ----

// RAM this process can use: MemTotal, or the cgroup memory limit when lower.
uint64_t total_ram_bytes();
// Bytes an unprivileged writer can still put in `dir` (statvfs f_bavail).
// Throws Error naming the directory when it cannot be queried.
uint64_t free_disk_bytes(const std::string& dir);

// ---- disk ----

struct DiskMeasureOptions {
  uint64_t file_bytes = uint64_t{1} << 30;    // temporary file, rounded down to blocks
  size_t block_bytes = size_t{1} << 20;       // one request (multiple of kDiskAlign)
  int queue_depth = 32;                       // requests in flight
  size_t kv_block_bytes = size_t{128} << 10;  // KV page writes (multiple of kDiskAlign)
  uint64_t kv_bytes = uint64_t{256} << 20;    // written per KV pass (at most file_bytes)
  int repeats = 3;                            // timed passes of each kind
  // Reads as the offload engine loads weights: requests of stream_bytes (a
  // layer's share), stream_in_flight of them (double buffering), each cut by
  // the disk I/O layer into chunk_bytes pieces with chunk_depth in flight.
  size_t stream_bytes = size_t{64} << 20;
  // The same at smaller requests (a small model's layer), stream_sized_bytes
  // per pass at most.
  std::vector<size_t> stream_sizes{size_t{1} << 20, size_t{4} << 20, size_t{16} << 20};
  uint64_t stream_total_bytes = uint64_t{512} << 20;  // per pass of stream_bytes requests
  uint64_t stream_sized_bytes = uint64_t{256} << 20;
  // Rounds over all the sizes (at least `repeats`), after one to warm up;
  // each rate is the bytes over the time summed over the rounds.
  int stream_rounds = 4;
  // Work the compute device does while weights stream (the engine loads the
  // next layer while the cores compute this one). When set, each round also
  // times every size's pass with it running on another thread, from before
  // the pass's first request until after its last, which it must return
  // soon after `stop` turns true.
  std::function<void(const std::atomic<bool>& stop)> beside;
  int stream_in_flight = 2;
  size_t chunk_bytes = size_t{1} << 20;
  int chunk_depth = 16;
  // Reads as the offload engine reads KV pages homed on disk: one request
  // per run of a sequence's page records (K and V of one layer, a few KiB
  // each, up to an extent of about 1 MiB: core/kv_layout.h),
  // scattered over the file, through a disk I/O layer configured as the
  // engine's (DiskIoOptions' defaults), kv_read_depth in flight;
  // kv_read_requests requests per pass of each size (at most the file).
  std::vector<size_t> kv_read_sizes{size_t{4} << 10, size_t{16} << 10, size_t{64} << 10,
                                    size_t{256} << 10, size_t{1} << 20};
  int kv_read_depth = 16;
  int kv_read_requests = 2048;
  // The same reads of kv_batch_size bytes issued as a decode layer's load
  // issues them, in batches (a micro-batch's sequences, one request each,
  // all waited for before the next batch), at each batch size.
  std::vector<int> kv_read_batches{1, 2, 4, 8, 16};
  size_t kv_batch_size = size_t{64} << 10;
};

struct DiskRates {
  RunTimes read, write, write_kv;  // seconds per pass
  // Seconds per read pass as the engine loads weights, of stream_pass_bytes;
  // this and read_stream_sized: the mean pass over interleaved rounds
  // (`median` holds it; DiskMeasureOptions::stream_rounds).
  RunTimes read_stream;
  // The same passes with DiskMeasureOptions::beside running (n = 0 and
  // empty without it).
  RunTimes read_stream_beside;
  std::vector<RunTimes> read_stream_sized_beside;
  // Per size of DiskMeasureOptions::stream_sizes: seconds per pass of
  // stream_sized_pass_bytes[i] in requests of that size.
  std::vector<size_t> stream_sizes;
  std::vector<RunTimes> read_stream_sized;
  std::vector<uint64_t> stream_sized_pass_bytes;
  // Per size of DiskMeasureOptions::kv_read_sizes: seconds per pass of
  // kv_read_pass_bytes[i] in scattered requests of that size.
  std::vector<size_t> kv_read_sizes;
  std::vector<RunTimes> read_kv;
  std::vector<uint64_t> kv_read_pass_bytes;
  // Per batch size of DiskMeasureOptions::kv_read_batches: seconds per pass
  // of kv_batch_pass_bytes in requests of kv_batch_size bytes.
  std::vector<int> kv_read_batches;
  std::vector<RunTimes> read_kv_batched;
  uint64_t kv_batch_pass_bytes = 0;
  size_t kv_batch_size = 0;
  size_t stream_bytes = 0;
  uint64_t stream_pass_bytes = 0;  // bytes per read_stream pass
  uint64_t file_bytes = 0;         // bytes per read or write pass
  uint64_t kv_pass_bytes = 0;      // bytes per KV write pass
  size_t block_bytes = 0, kv_block_bytes = 0;
  int queue_depth = 0;
  bool direct = true;   // false: the filesystem has no O_DIRECT, the page cache was in the way
  std::string backend;  // "io_uring" or "threads"
  double read_bytes_per_s() const { return read.rate(static_cast<double>(file_bytes)); }
  double read_stream_bytes_per_s() const {
    return read_stream.rate(static_cast<double>(stream_pass_bytes));
  }
  double read_stream_beside_bytes_per_s() const {
    return read_stream_beside.rate(static_cast<double>(stream_pass_bytes));
  }
  double write_bytes_per_s() const { return write.rate(static_cast<double>(file_bytes)); }
  double write_kv_bytes_per_s() const { return write_kv.rate(static_cast<double>(kv_pass_bytes)); }
  double read_kv_bytes_per_s(size_t i) const {
    return read_kv[i].rate(static_cast<double>(kv_read_pass_bytes[i]));
  }
  double read_kv_batched_bytes_per_s(size_t i) const {
    return read_kv_batched[i].rate(static_cast<double>(kv_batch_pass_bytes));
  }
  double read_stream_sized_bytes_per_s(size_t i) const {
    return read_stream_sized[i].rate(static_cast<double>(stream_sized_pass_bytes[i]));
  }
  double read_stream_sized_beside_bytes_per_s(size_t i) const {
    return read_stream_sized_beside[i].rate(static_cast<double>(stream_sized_pass_bytes[i]));
  }
};

// Checks that `dir` can hold the temporary file of a disk measurement: it
// exists, is a directory, a file can be created in it, and it has room for
// `file_bytes` plus a margin. Throws Error with one line naming the
// directory, the reason and what to do. Writes nothing that stays.
void check_offload_dir(const std::string& dir, uint64_t file_bytes);

// Writes a temporary file in `dir` once (warm-up: the blocks get allocated),
// then times `repeats` passes of sequential writes (each ending in
// fdatasync), of sequential reads, and of writes in KV-page-sized blocks, all
// with O_DIRECT and queue_depth requests in flight; removes the file.
DiskRates measure_disk(const std::string& dir, const DiskMeasureOptions& options);

// ---- memory and copies ----

// Seconds to read `bytes` of RAM: each of `threads` OpenMP threads sums its
// share of a buffer much larger than the caches.
RunTimes measure_ram_read(size_t bytes, int threads, const TimingPlan& plan);

struct CopyTimes {
  RunTimes to_device, to_host;  // seconds per copy of `bytes`
  size_t bytes = 0;
  bool device_is_host = false;  // the backend's device memory is RAM: a memcpy
};
// backend.copy_to_device and copy_to_host of `bytes` between a host buffer
// and device memory.
CopyTimes measure_copies(Backend& backend, size_t bytes, const TimingPlan& plan);

// ---- compute ----

// y[m, n] = x[m, k] . W[n, k]^T with W stored as `weight` and the product in
// `compute` (f32 or bf16); 2*m*n*k FLOPs per run.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  DType weight = DType::kBF16;
  DType compute = DType::kBF16;
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
  double weight_bytes() const;
};
RunTimes measure_gemm(Backend& backend, const GemmShape& shape, const TimingPlan& plan);
// The operands of one such product on a backend's device (random), ready to
// run it: what measure_gemm times, and a load beside a disk measurement
// (DiskMeasureOptions::beside).
class GemmRunner {
 public:
  GemmRunner(Backend& backend, const GemmShape& shape);
  void run();  // one product, synchronized

 private:
  Backend& backend_;
  GemmShape shape_;
  DeviceBuffer w_, x_, y_;
  MatrixView view_;
};

// One layer's paged attention: n_seq sequences of ctx keys each, the last
// n_new of them new (1 = a decode step, ctx = a prefill), pages of page_size
// tokens scattered over the pool in a shuffled order as a long-running cache
// leaves them.
struct AttentionShape {
  int64_t n_seq = 0, n_new = 1, ctx = 0;
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;
  int64_t page_size = 16;
  DType kv = DType::kF16;
  // The cost model's FLOPs: 4 * n_new * ctx * n_head * head_dim per sequence.
  double model_flops() const;
  double kv_bytes() const;  // K and V of every sequence, as stored
};
RunTimes measure_attention(Backend& backend, const AttentionShape& shape, const TimingPlan& plan);

}  // namespace strata
