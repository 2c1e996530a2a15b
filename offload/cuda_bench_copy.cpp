// Host<->device bandwidth of Strata's copy path (pinned cpu-tier pool,
// device gpu-tier pool, CudaCopyQueues) beside plain cudaMemcpyAsync of the
// same size from cudaMallocHost memory (the ceiling) and from pageable
// memory. A program, not a test: warm-up, repeats, median and spread, the
// device and the commit in the output, and one `RESULT key=value ...` line
// for scripts (scripts/device-check.sh).
//
//   strata_bench_cuda_copy [--size 256M] [--repeats 10] [--device 0]
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/bench.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "offload/cuda_memory.h"

namespace {

using namespace strata;

struct Stat {
  double median = 0, lo = 0, hi = 0;  // GB/s
};

// Runs `once` (which must return after its copies completed) twice to warm
// up, then `repeats` times (core/bench.h); GB/s of `bytes` per run.
Stat measure(const std::function<void()>& once, double bytes, int repeats) {
  const RunTimes t = time_runs(once, {2, repeats, repeats, 0});
  return {t.rate(bytes) / 1e9, t.rate_lo(bytes) / 1e9, t.rate_hi(bytes) / 1e9};
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("{} failed: {}", what, cudaGetErrorString(e));
}

std::string fmt_stat(const Stat& s) {
  return fmt::format("{:7.2f} ({:.2f}-{:.2f})", s.median, s.lo, s.hi);
}

int run(int argc, char** argv) {
  CLI::App app{"Host<->device bandwidth of Strata's pinned copy path beside cudaMemcpyAsync"};
  std::string size_text = "256M";
  int repeats = 10;
  int device = 0;
  app.add_option("--size", size_text, "bytes per copy (e.g. 256M, 1G)");
  app.add_option("--repeats", repeats, "timed repeats after 2 warm-up runs")
      ->check(CLI::Range(1, 1000));
  app.add_option("--device", device, "CUDA device");
  CLI11_PARSE(app, argc, argv);
  init_logging();
  const uint64_t bytes = parse_bytes(size_text, "--size");
  if (bytes == 0) fail("--size {} is zero; give a size such as 256M", size_text);

  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "strata_bench_cuda_copy: no CUDA device; nothing to measure\n");
    return 2;
  }
  if (device < 0 || device >= n_dev) fail("--device {} does not exist ({} found)", device, n_dev);
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");

  // Strata's path: blocks from the tier pools, copies on the queues.
  auto gpu_pool = make_cuda_gpu_pool(device, bytes * 2 + (64 << 20));
  auto cpu_pool = make_pinned_cpu_pool(bytes * 2 + (64 << 20));
  PoolBlock dev_a = gpu_pool->allocate(bytes, "bench device buffer");
  PoolBlock dev_b = gpu_pool->allocate(bytes, "bench device buffer");
  PoolBlock host_a = cpu_pool->allocate(bytes, "bench host buffer");
  PoolBlock host_b = cpu_pool->allocate(bytes, "bench host buffer");
  std::memset(host_a.data(), 1, bytes);
  std::memset(host_b.data(), 2, bytes);
  CudaCopyQueues queues(device);
  const Stat ours_h2d =
      measure([&] { queues.load(dev_a.data(), host_a.data(), bytes).synchronize(); }, double(bytes),
              repeats);
  const Stat ours_d2h =
      measure([&] { queues.store(host_b.data(), dev_b.data(), bytes).synchronize(); },
              double(bytes), repeats);
  const Stat ours_both = measure(
      [&] {
        CudaEvent l = queues.load(dev_a.data(), host_a.data(), bytes);
        CudaEvent s = queues.store(host_b.data(), dev_b.data(), bytes);
        l.synchronize();
        s.synchronize();
      },
      2.0 * double(bytes), repeats);

  // Plain cudaMemcpyAsync from cudaMallocHost memory and from pageable memory.
  void* pinned = nullptr;
  void* dev = nullptr;
  check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
  check(cudaMalloc(&dev, bytes), "cudaMalloc");
  std::vector<char> pageable(bytes, 3);
  std::memset(pinned, 4, bytes);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  auto plain = [&](void* dst, const void* src, cudaMemcpyKind kind) {
    return [=] {
      check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    };
  };
  const Stat plain_h2d =
      measure(plain(dev, pinned, cudaMemcpyHostToDevice), double(bytes), repeats);
  const Stat plain_d2h =
      measure(plain(pinned, dev, cudaMemcpyDeviceToHost), double(bytes), repeats);
  const Stat page_h2d =
      measure(plain(dev, pageable.data(), cudaMemcpyHostToDevice), double(bytes), repeats);
  const Stat page_d2h =
      measure(plain(pageable.data(), dev, cudaMemcpyDeviceToHost), double(bytes), repeats);
  cudaStreamDestroy(stream);
  cudaFree(dev);
  cudaFreeHost(pinned);

  std::printf(
      "strata_bench_cuda_copy: %s (sm_%d%d), commit %s, %s per copy, median of %d "
      "(min-max)\n",
      prop.name, prop.major, prop.minor, build_commit().c_str(), format_bytes(bytes).c_str(),
      repeats);
  std::printf("%-40s %-24s %-24s\n", "path", "host->device GB/s", "device->host GB/s");
  std::printf("%-40s %-24s %-24s\n", "strata (pinned pool, copy queues)",
              fmt_stat(ours_h2d).c_str(), fmt_stat(ours_d2h).c_str());
  std::printf("%-40s %-24s %-24s\n", "cudaMemcpyAsync, cudaMallocHost memory",
              fmt_stat(plain_h2d).c_str(), fmt_stat(plain_d2h).c_str());
  std::printf("%-40s %-24s %-24s\n", "cudaMemcpyAsync, pageable memory", fmt_stat(page_h2d).c_str(),
              fmt_stat(page_d2h).c_str());
  std::printf("%-40s %s (both directions at once)\n", "strata, load and store overlapped",
              fmt_stat(ours_both).c_str());
  std::printf(
      "RESULT ours_h2d=%.3f ours_d2h=%.3f plain_h2d=%.3f plain_d2h=%.3f pageable_h2d=%.3f "
      "pageable_d2h=%.3f ours_duplex=%.3f\n",
      ours_h2d.median, ours_d2h.median, plain_h2d.median, plain_d2h.median, page_h2d.median,
      page_d2h.median, ours_both.median);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata_bench_cuda_copy: %s\n", e.what());
    return 1;
  }
}
