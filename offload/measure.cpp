// Measurements for `strata profile`; see measure.h.
#include "offload/measure.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"
#include "kernels/backend.h"
#include "offload/aligned_buffer.h"
#include "offload/disk_io.h"

namespace strata {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Random values of magnitude 0.5 to 1 and random sign, built from bits:
// exponent fixed, mantissa and sign random. Finite by construction.
void fill_random(void* dst, size_t n_elems, DType t, uint64_t seed) {
  uint64_t state = seed;
  switch (t) {
    case DType::kF32: {
      auto* p = static_cast<uint32_t*>(dst);
      for (size_t i = 0; i < n_elems; ++i) {
        const uint64_t r = splitmix64(state);
        p[i] = 0x3F000000u | static_cast<uint32_t>(r & 0x7FFFFFu) |
               (static_cast<uint32_t>(r >> 63) << 31);
      }
      return;
    }
    case DType::kF16:
    case DType::kBF16: {
      // f16: exponent 14, 10 mantissa bits; bf16: exponent 126, 7 mantissa bits.
      const uint16_t base = t == DType::kF16 ? 0x3800 : 0x3F00;
      const uint16_t mant = t == DType::kF16 ? 0x03FF : 0x007F;
      auto* p = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n_elems; i += 4) {
        const uint64_t r = splitmix64(state);
        for (size_t j = 0; j < 4 && i + j < n_elems; ++j) {
          const auto bits = static_cast<uint16_t>(r >> (16 * j));
          p[i + j] = static_cast<uint16_t>(base | (bits & mant) | (bits & 0x8000));
        }
      }
      return;
    }
    default:
      fail("profile: no random fill for dtype {}; measure with f32, f16 or bf16", dtype_name(t));
  }
}

// Device memory holding `bytes` copied from host memory.
DeviceBuffer device_copy_of(Backend& backend, const void* host, size_t bytes) {
  DeviceBuffer d = backend.alloc(bytes);
  backend.copy_to_device(d.data(), host, bytes);
  return d;
}

// Device memory of n_elems random values of dtype t (see fill_random).
DeviceBuffer device_random(Backend& backend, DType t, size_t n_elems, uint64_t seed) {
  const size_t bytes = row_bytes(t, static_cast<int64_t>(n_elems));
  if (backend.memory_is_host()) {
    DeviceBuffer d = backend.alloc(bytes);
    fill_random(d.data(), n_elems, t, seed);
    return d;
  }
  std::vector<std::byte> host(bytes);
  fill_random(host.data(), n_elems, t, seed);
  return device_copy_of(backend, host.data(), bytes);
}

// Room the disk measurement leaves free beyond its file: the filesystem's
// metadata and whatever else is being written meanwhile.
constexpr uint64_t kDiskMargin = uint64_t{64} << 20;

}  // namespace

// ---- memory sizes ----

uint64_t total_ram_bytes() {
  uint64_t total = 0;
  {
    std::ifstream f("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    while (f >> key >> kb >> unit) {
      if (key == "MemTotal:") {
        total = kb * 1024;
        break;
      }
    }
  }
  if (total == 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) total = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  }
  // A container's limit: cgroup v2, then v1 ("max" or a huge number when none).
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    std::string text;
    if (!(f >> text) || text == "max") continue;
    char* end = nullptr;
    errno = 0;
    const unsigned long long limit = std::strtoull(text.c_str(), &end, 10);
    if (errno == 0 && end && *end == '\0' && limit > 0 && (total == 0 || limit < total)) {
      total = limit;
    }
  }
  if (total == 0) fail("profile: cannot read the size of RAM from /proc/meminfo or sysconf");
  return total;
}

uint64_t free_disk_bytes(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) {
    fail(
        "offload directory {}: cannot read its free space ({}); pass a directory with "
        "--offload-dir",
        dir, std::strerror(errno));
  }
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

// ---- disk ----

void check_offload_dir(const std::string& dir, uint64_t file_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) {
    fail("offload directory {}: no such directory; create it or pass another with --offload-dir",
         dir);
  }
  if (!fs::is_directory(st)) {
    fail("offload directory {}: not a directory; pass a directory with --offload-dir", dir);
  }
  const std::string probe =
      (fs::path(dir) / fmt::format(".strata-profile-probe-{}", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail(
        "offload directory {}: cannot create a file there ({}); pass a writable directory with "
        "--offload-dir",
        dir, std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  const uint64_t free_bytes = free_disk_bytes(dir);
  const uint64_t need = file_bytes + kDiskMargin;
  if (free_bytes < need) {
    fail(
        "offload directory {}: {} free, the disk measurement needs {} ({} file + {} spare); "
        "pass a smaller --disk-bytes or another --offload-dir",
        dir, format_bytes(static_cast<double>(free_bytes)), format_bytes(static_cast<double>(need)),
        format_bytes(static_cast<double>(file_bytes)),
        format_bytes(static_cast<double>(kDiskMargin)));
  }
}

namespace {

// DiskMeasureOptions::beside on its own thread: stopped and joined by
// finish(), which rethrows what it threw, or on the way out of a failed pass.
class LoadBeside {
 public:
  void start(const std::function<void(const std::atomic<bool>&)>& work) {
    thread_ = std::thread([this, &work] {
      try {
        work(stop_);
      } catch (...) {
        error_ = std::current_exception();
      }
    });
  }
  void finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  ~LoadBeside() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::exception_ptr error_;
};

}  // namespace

DiskRates measure_disk(const std::string& dir, const DiskMeasureOptions& o) {
  if (o.block_bytes == 0 || o.block_bytes % kDiskAlign != 0 || o.kv_block_bytes == 0 ||
      o.kv_block_bytes % kDiskAlign != 0 || o.kv_block_bytes > o.block_bytes) {
    fail("profile: disk blocks of {} and {} bytes must be multiples of {} (KV blocks no larger)",
         o.block_bytes, o.kv_block_bytes, kDiskAlign);
  }
  if (o.stream_bytes < kDiskAlign || o.stream_in_flight < 1 || o.chunk_depth < 1) {
    fail(
        "profile: weight-load reads of {} bytes, {} in flight, chunk depth {}: need at least {} "
        "bytes and 1",
        o.stream_bytes, o.stream_in_flight, o.chunk_depth, kDiskAlign);
  }
  if (o.queue_depth < 1 || o.repeats < 1) {
    fail("profile: disk queue depth {} and repeats {} must be at least 1", o.queue_depth,
         o.repeats);
  }
  const uint64_t n_blocks = o.file_bytes / o.block_bytes;
  if (n_blocks == 0) {
    fail("--disk-bytes {}: smaller than one block of {}; measure with at least {}",
         format_bytes(static_cast<double>(o.file_bytes)),
         format_bytes(static_cast<double>(o.block_bytes)),
         format_bytes(static_cast<double>(o.block_bytes) * o.queue_depth));
  }
  const uint64_t file_bytes = n_blocks * o.block_bytes;
  const uint64_t kv_bytes = std::max<uint64_t>(o.kv_block_bytes, std::min(o.kv_bytes, file_bytes)) /
                            o.kv_block_bytes * o.kv_block_bytes;
  check_offload_dir(dir, file_bytes);

  namespace fs = std::filesystem;
  RemoveOnExit remove{(fs::path(dir) / fmt::format(".strata-profile-{}.tmp", ::getpid())).string()};

  // Incompressible contents, one block buffer per request in flight.
  std::vector<AlignedBuffer> bufs;
  uint64_t state = 0x5eed;
  for (int i = 0; i < o.queue_depth; ++i) {
    bufs.emplace_back(o.block_bytes);
    auto* w = reinterpret_cast<uint64_t*>(bufs.back().data());
    for (size_t k = 0; k < o.block_bytes / 8; ++k) w[k] = splitmix64(state);
  }
  DiskIoOptions eo;
  eo.chunk_bytes = o.block_bytes;
  eo.queue_depth = o.queue_depth;
  for (auto& b : bufs) eo.fixed_buffers.push_back(b.bytes());
  DiskIo engine(eo);
  DiskFile file = DiskFile::open(remove.path, OpenMode::kCreate, true);
  file.allocate(file_bytes);

  // One sequential pass over [0, total) in requests of `block`, queue_depth
  // in flight; writes end with fdatasync so the time covers the data reaching
  // the device.
  std::vector<Ticket> tickets(static_cast<size_t>(o.queue_depth));
  auto pass = [&](bool write, size_t block, uint64_t total) {
    const uint64_t n = total / block;
    for (uint64_t b = 0; b < n; ++b) {
      const size_t slot = b % tickets.size();
      engine.wait(tickets[slot]);
      std::byte* mem = bufs[slot].data();
      tickets[slot] = write ? engine.write(file, b * block, mem, block)
                            : engine.read(file, b * block, mem, block);
    }
    for (auto& t : tickets) engine.wait(t);
    if (write) file.sync();
  };

  DiskRates r;
  r.file_bytes = file_bytes;
  r.kv_pass_bytes = kv_bytes;
  r.block_bytes = o.block_bytes;
  r.kv_block_bytes = o.kv_block_bytes;
  r.queue_depth = o.queue_depth;
  r.direct = file.direct();
  r.backend = engine.backend_name();

  TimingPlan plan;
  plan.warmup = 0;
  plan.min_reps = o.repeats;
  plan.max_reps = o.repeats;
  plan.min_seconds = 0;
  pass(true, o.block_bytes, file_bytes);  // warm-up: allocates the blocks for real
  r.write = time_runs([&] { pass(true, o.block_bytes, file_bytes); }, plan);
  r.read = time_runs([&] { pass(false, o.block_bytes, file_bytes); }, plan);
  r.write_kv = time_runs([&] { pass(true, o.kv_block_bytes, kv_bytes); }, plan);

  // Reads in the pattern of weight loads: large requests, cut into chunks by
  // a disk I/O layer configured as the offload engine's. Each size's pass
  // runs once per round, the sizes one after the other, and each rate is its
  // bytes over its time summed over the rounds: a shared machine's disk can
  // switch between a fast and a slow state for seconds at a time (a
  // virtual disk's burst allowance), and the engine, reading for the length
  // of a run, gets the mix; the median of two back-to-back passes caught one
  // state, and one size could be timed in the fast state, the next in the
  // slow one.
  // With a load beside, every size's pass runs once more with it.
  struct StreamPass {
    size_t size;
    uint64_t total;
    std::vector<double> seconds;
    bool beside = false;
  };
  std::vector<StreamPass> passes;
  r.stream_bytes = std::min<uint64_t>(o.stream_bytes, file_bytes) / kDiskAlign * kDiskAlign;
  {
    const uint64_t total = std::min(o.stream_total_bytes, file_bytes);
    passes.push_back(
        {r.stream_bytes, std::max<uint64_t>(1, total / r.stream_bytes) * r.stream_bytes, {}});
  }
  for (const size_t size : o.stream_sizes) {
    if (size == 0 || size % kDiskAlign != 0 || size >= r.stream_bytes) continue;
    const uint64_t total = std::min(o.stream_sized_bytes, file_bytes) / size * size;
    if (total == 0) continue;
    passes.push_back({size, total, {}});
  }
  const size_t n_sizes = passes.size();
  if (o.beside) {
    for (size_t i = 0; i < n_sizes; ++i)
      passes.push_back({passes[i].size, passes[i].total, {}, true});
  }
  // One disk I/O layer and two request buffers of the largest size for every
  // pass (a smaller request fills the start of its buffer), set up once.
  std::vector<AlignedBuffer> big;
  DiskIoOptions so;
  so.chunk_bytes = o.chunk_bytes;
  so.queue_depth = o.chunk_depth;
  for (int i = 0; i < o.stream_in_flight; ++i) {
    big.emplace_back(r.stream_bytes);
    so.fixed_buffers.push_back(big.back().bytes());
  }
  DiskIo stream_engine(so);
  std::vector<Ticket> st(static_cast<size_t>(o.stream_in_flight));
  for (int round = -1; round < std::max(o.repeats, o.stream_rounds); ++round) {
    for (StreamPass& p : passes) {
      LoadBeside load;
      if (p.beside) load.start(o.beside);
      const auto t0 = std::chrono::steady_clock::now();
      for (uint64_t b = 0; b < p.total / p.size; ++b) {
        const size_t slot = b % st.size();
        stream_engine.wait(st[slot]);
        st[slot] = stream_engine.read(file, b * p.size, big[slot].data(), p.size);
      }
      for (auto& t : st) stream_engine.wait(t);
      const std::chrono::duration<double> d = std::chrono::steady_clock::now() - t0;
      load.finish();
      if (round >= 0) p.seconds.push_back(d.count());  // round -1 warms up
    }
  }
  // RunTimes whose "median" is the mean pass (rate(): bytes over the summed
  // time), with the fastest and slowest pass as its range.
  const auto mean_of = [](const std::vector<double>& t) {
    RunTimes rt;
    rt.n = static_cast<int>(t.size());
    double sum = 0;
    for (double x : t) sum += x;
    rt.median = sum / static_cast<double>(t.size());
    rt.lo = *std::min_element(t.begin(), t.end());
    rt.hi = *std::max_element(t.begin(), t.end());
    rt.wall_s = sum;
    if (!(rt.lo > 0)) fail("profile: a disk read pass took no measurable time");
    return rt;
  };
  r.stream_pass_bytes = passes[0].total;
  r.read_stream = mean_of(passes[0].seconds);
  if (o.beside) r.read_stream_beside = mean_of(passes[n_sizes].seconds);
  for (size_t i = 1; i < n_sizes; ++i) {
    r.stream_sizes.push_back(passes[i].size);
    r.stream_sized_pass_bytes.push_back(passes[i].total);
    r.read_stream_sized.push_back(mean_of(passes[i].seconds));
    if (o.beside) r.read_stream_sized_beside.push_back(mean_of(passes[n_sizes + i].seconds));
  }

  // Reads as KV pages on disk are read: one record per request at scattered
  // places, the engine's disk I/O settings.
  {
    DiskIo kv_engine{DiskIoOptions{}};
    std::vector<Ticket> kt(static_cast<size_t>(o.kv_read_depth));
    std::mt19937_64 rng(17);
    const auto scattered = [&](size_t size) {
      if (size == 0 || size % kDiskAlign != 0 || size > file_bytes) {
        fail("profile: KV reads of {} bytes must be a multiple of {} within the {} file", size,
             kDiskAlign, format_bytes(static_cast<double>(file_bytes)));
      }
      std::vector<uint64_t> slots(file_bytes / size);
      std::iota(slots.begin(), slots.end(), uint64_t{0});
      std::shuffle(slots.begin(), slots.end(), rng);
      slots.resize(std::min<size_t>(slots.size(), static_cast<size_t>(o.kv_read_requests)));
      return slots;
    };
    for (size_t size : o.kv_read_sizes) {
      const std::vector<uint64_t> slots = scattered(size);
      std::vector<AlignedBuffer> mem;
      for (int i = 0; i < o.kv_read_depth; ++i) mem.emplace_back(size);
      r.kv_read_sizes.push_back(size);
      r.kv_read_pass_bytes.push_back(static_cast<uint64_t>(slots.size()) * size);
      r.read_kv.push_back(time_runs(
          [&] {
            for (size_t i = 0; i < slots.size(); ++i) {
              const size_t slot = i % kt.size();
              kv_engine.wait(kt[slot]);
              kt[slot] = kv_engine.read(file, slots[i] * size, mem[slot].data(), size);
            }
            for (auto& t : kt) kv_engine.wait(t);
          },
          plan));
    }
    if (!o.kv_read_batches.empty()) {
      const size_t size = o.kv_batch_size;
      const std::vector<uint64_t> slots = scattered(size);
      const int most = *std::max_element(o.kv_read_batches.begin(), o.kv_read_batches.end());
      std::vector<AlignedBuffer> mem;
      for (int i = 0; i < most; ++i) mem.emplace_back(size);
      std::vector<Ticket> batch(static_cast<size_t>(most));
      r.kv_batch_size = size;
      r.kv_batch_pass_bytes = static_cast<uint64_t>(slots.size()) * size;
      for (int n : o.kv_read_batches) {
        if (n < 1) fail("profile: KV read batches of {} requests: need at least 1", n);
        r.kv_read_batches.push_back(n);
        r.read_kv_batched.push_back(time_runs(
            [&] {
              for (size_t i = 0; i < slots.size(); i += static_cast<size_t>(n)) {
                const size_t e = std::min(slots.size(), i + static_cast<size_t>(n));
                for (size_t j = i; j < e; ++j) {
                  batch[j - i] = kv_engine.read(file, slots[j] * size, mem[j - i].data(), size);
                }
                for (size_t j = i; j < e; ++j) kv_engine.wait(batch[j - i]);
              }
            },
            plan));
      }
    }
  }
  return r;
}

// ---- memory and copies ----

RunTimes measure_ram_read(size_t bytes, int threads, const TimingPlan& plan) {
  const int n_threads = std::max(1, threads);
  const size_t n = std::max<size_t>(bytes / sizeof(int64_t), 1024);
  AlignedBuffer buf(n * sizeof(int64_t), 4096);
  auto* p = reinterpret_cast<int64_t*>(buf.data());
#pragma omp parallel for schedule(static) num_threads(n_threads)
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(i);
  volatile int64_t sink = 0;
  return time_runs(
      [&] {
        int64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum) num_threads(n_threads)
        for (size_t i = 0; i < n; i += 8) {
          // Eight independent adds per 64-byte line keep the loads in flight.
          int64_t s = 0;
          for (size_t j = i; j < std::min(i + 8, n); ++j) s += p[j];
          sum += s;
        }
        sink = sink + sum;
      },
      plan);
}

CopyTimes measure_copies(Backend& backend, size_t bytes, const TimingPlan& plan) {
  AlignedBuffer host(bytes, 4096);
  std::memset(host.data(), 1, host.size());
  DeviceBuffer dev = backend.alloc(host.size());
  backend.fill_zero(dev.data(), dev.size());
  backend.synchronize();
  CopyTimes c;
  c.bytes = host.size();
  c.device_is_host = backend.memory_is_host();
  c.to_device = time_runs(
      [&] {
        backend.copy_to_device(dev.data(), host.data(), host.size());
        backend.synchronize();
      },
      plan);
  c.to_host = time_runs(
      [&] {
        backend.copy_to_host(host.data(), dev.data(), host.size());
        backend.synchronize();
      },
      plan);
  return c;
}

// ---- compute ----

double GemmShape::weight_bytes() const {
  return static_cast<double>(row_bytes(weight, k)) * static_cast<double>(n);
}

GemmRunner::GemmRunner(Backend& backend, const GemmShape& s) : backend_(backend), shape_(s) {
  if (s.m < 1 || s.n < 1 || s.k < 1)
    fail("profile: GEMM sizes {}x{}x{} must be positive", s.m, s.n, s.k);
  w_ = device_random(backend, s.weight, static_cast<size_t>(s.n) * static_cast<size_t>(s.k), 1);
  x_ = device_random(backend, DType::kF32, static_cast<size_t>(s.m) * static_cast<size_t>(s.k), 2);
  y_ = backend.alloc(static_cast<size_t>(s.m * s.n) * sizeof(float));
  view_.data = w_.data();
  view_.dtype = s.weight;
  view_.rows = s.n;
  view_.cols = s.k;
  view_.row_bytes = row_bytes(s.weight, s.k);
}

void GemmRunner::run() {
  backend_.matmul(y_.as<float>(), shape_.n, x_.as<float>(), shape_.k, view_, nullptr, shape_.m,
                  shape_.compute);
  backend_.synchronize();
}

RunTimes measure_gemm(Backend& backend, const GemmShape& s, const TimingPlan& plan) {
  GemmRunner g(backend, s);
  return time_runs([&] { g.run(); }, plan);
}

double AttentionShape::model_flops() const {
  return 4.0 * static_cast<double>(n_seq) * static_cast<double>(n_new) * static_cast<double>(ctx) *
         static_cast<double>(n_head) * static_cast<double>(head_dim);
}

double AttentionShape::kv_bytes() const {
  return 2.0 * static_cast<double>(n_seq) * static_cast<double>(ctx) *
         static_cast<double>(row_bytes(kv, n_kv_head * head_dim));
}

RunTimes measure_attention(Backend& backend, const AttentionShape& s, const TimingPlan& plan) {
  if (s.n_seq < 1 || s.ctx < 1 || s.n_new < 1 || s.n_new > s.ctx || s.n_head < 1 ||
      s.n_kv_head < 1 || s.n_head % s.n_kv_head != 0 || s.head_dim < 1 || s.page_size < 1) {
    fail(
        "profile: attention shape {} seqs x {} keys ({} new), {}/{} heads of {}, pages of {} "
        "is not one the kernel runs",
        s.n_seq, s.ctx, s.n_new, s.n_head, s.n_kv_head, s.head_dim, s.page_size);
  }
  const int64_t pages_per_seq = (s.ctx + s.page_size - 1) / s.page_size;
  const int64_t n_pages = s.n_seq * pages_per_seq;
  const size_t page_elems = static_cast<size_t>(s.page_size * s.n_kv_head * s.head_dim);
  const size_t page_bytes = row_bytes(s.kv, static_cast<int64_t>(page_elems));
  const size_t pool_elems = page_elems * static_cast<size_t>(n_pages);
  const DeviceBuffer k_pool = device_random(backend, s.kv, pool_elems, 3);
  const DeviceBuffer v_pool = device_random(backend, s.kv, pool_elems, 4);

  // Page pointers, and the pages of each sequence in a shuffled order.
  std::vector<void*> k_ptrs(static_cast<size_t>(n_pages)), v_ptrs(static_cast<size_t>(n_pages));
  for (int64_t p = 0; p < n_pages; ++p) {
    k_ptrs[p] = k_pool.as<std::byte>() + static_cast<size_t>(p) * page_bytes;
    v_ptrs[p] = v_pool.as<std::byte>() + static_cast<size_t>(p) * page_bytes;
  }
  std::vector<int32_t> page_ids(static_cast<size_t>(n_pages));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), std::mt19937(7));
  std::vector<int32_t> q_indptr{0}, kv_len, page_indptr{0};
  for (int64_t i = 0; i < s.n_seq; ++i) {
    q_indptr.push_back(static_cast<int32_t>(q_indptr.back() + s.n_new));
    kv_len.push_back(static_cast<int32_t>(s.ctx));
    page_indptr.push_back(static_cast<int32_t>(page_indptr.back() + pages_per_seq));
  }
  auto to_device = [&](const auto& v) {
    return device_copy_of(backend, v.data(), v.size() * sizeof(v[0]));
  };
  const DeviceBuffer d_k_ptrs = to_device(k_ptrs), d_v_ptrs = to_device(v_ptrs);
  const DeviceBuffer d_q_indptr = to_device(q_indptr), d_kv_len = to_device(kv_len);
  const DeviceBuffer d_page_indptr = to_device(page_indptr), d_page_ids = to_device(page_ids);

  const int64_t n_tokens = s.n_seq * s.n_new;
  const int64_t row = s.n_head * s.head_dim;
  const DeviceBuffer q =
      device_random(backend, DType::kF32, static_cast<size_t>(n_tokens * row), 5);
  DeviceBuffer out = backend.alloc(static_cast<size_t>(n_tokens * row) * sizeof(float));

  KvLayer kv;
  kv.k_pages = d_k_ptrs.as<void*>();
  kv.v_pages = d_v_ptrs.as<void*>();
  kv.n_pages = n_pages;
  kv.dtype = s.kv;
  kv.page_size = s.page_size;
  kv.n_kv_head = s.n_kv_head;
  kv.head_dim = s.head_dim;
  AttentionSeqs seqs;
  seqs.n_seq = s.n_seq;
  seqs.q_indptr = d_q_indptr.as<int32_t>();
  seqs.kv_len = d_kv_len.as<int32_t>();
  seqs.page_indptr = d_page_indptr.as<int32_t>();
  seqs.page_ids = d_page_ids.as<int32_t>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return time_runs(
      [&] {
        backend.attention(out.as<float>(), row, q.as<float>(), row, s.n_head, kv, seqs, scale);
        backend.synchronize();
      },
      plan);
}

}  // namespace strata
