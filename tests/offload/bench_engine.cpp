// Engine benchmark (a program, not a test): prefill and decode throughput of
// make_engine on a model at several batch sizes, beside this machine's
// ceilings measured in the same run: the GFLOP/s of a large oneDNN matmul in
// the same compute dtype (prefill is judged against it) and the memcpy
// bandwidth (a decode step is judged against the bytes it must read: every
// weight once plus the KV cache it attends over, divided by that bandwidth).
// Synthetic prompts of random ids; every sequence generates exactly gen-len
// tokens. Warm-up run, then repeats; prints medians and ranges.
//
//   strata_bench_engine --model M [--batch 1,8,32] [--prompt-len 128] [--gen-len 32]
//                       [--compute bf16|f32|int8] [--kv f16|bf16|f32] [--threads N] [--reps N]
//                       [--isa native|avx2|portable]  (the CPU kernels' hand-written paths
//                       narrowed to a subset of this CPU's, for A/B runs in one binary)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/bench.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/cpu_features.h"
#include "model/model.h"
#include "offload/offload_engine.h"

namespace {

using namespace strata;

using Range = Spread;  // core/bench.h

Range range_of(std::vector<double> v) {
  return spread_of(std::move(v));
}

// One warm-up run, then `reps` runs (core/bench.h).
Range time_it(int reps, const std::function<void()>& fn) {
  const RunTimes t = time_runs(fn, {1, reps, reps, 0});
  return {t.median, t.lo, t.hi};
}

// Bytes copied per second by memcpy over 512 MiB (read + write counted once).
Range copy_bandwidth(int reps) {
  const size_t bytes = size_t{512} << 20;
  auto* a = static_cast<char*>(std::aligned_alloc(64, bytes));
  auto* b = static_cast<char*>(std::aligned_alloc(64, bytes));
  std::memset(a, 1, bytes);
  std::memset(b, 2, bytes);
  const int threads = omp_get_max_threads();
  const Range t = time_it(reps, [&] {
#pragma omp parallel for num_threads(threads)
    for (int i = 0; i < threads; ++i) {
      const size_t lo = bytes / threads * i,
                   hi = i + 1 == threads ? bytes : bytes / threads * (i + 1);
      std::memcpy(b + lo, a + lo, hi - lo);
    }
  });
  std::free(a);
  std::free(b);
  return {bytes / t.median, bytes / t.hi, bytes / t.lo};
}

// GFLOP/s of a 2048^3 oneDNN matmul in f32 or bf16 (f32 out), or u8 x s8
// (s32 out) for the int8 compute type.
Range matmul_ceiling(DType compute, int reps) {
  using dt = dnnl::memory::data_type;
  const int64_t n = 2048;
  const bool int8 = compute == DType::kI8;
  const dt t = int8 ? dt::s8 : compute == DType::kBF16 ? dt::bf16 : dt::f32;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const dnnl::memory::desc a({n, n}, int8 ? dt::u8 : t, {n, 1}), b({n, n}, t, {n, 1}),
      c({n, n}, int8 ? dt::s32 : dt::f32, {n, 1});
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
  dnnl::memory ma(a, eng), mb(b, eng), mc(c, eng);
  std::memset(ma.get_data_handle(), 0, a.get_size());
  std::memset(mb.get_data_handle(), 0, b.get_size());
  dnnl::matmul mm(pd);
  const Range r = time_it(reps, [&] {
    mm.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    s.wait();
  });
  const double flops = 2.0 * n * n * n;
  return {flops / r.median / 1e9, flops / r.hi / 1e9, flops / r.lo / 1e9};
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::stoll(item));
  return v;
}

int run(int argc, char** argv) {
  std::string model_path, compute_name = "bf16", kv_name, batches = "1,8,32", isa = "native";
  int64_t prompt_len = 128, gen_len = 32;
  int threads = 0, reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail("{} needs a value", a);
      return argv[++i];
    };
    if (a == "--model")
      model_path = next();
    else if (a == "--batch")
      batches = next();
    else if (a == "--prompt-len")
      prompt_len = std::stoll(next());
    else if (a == "--gen-len")
      gen_len = std::stoll(next());
    else if (a == "--compute")
      compute_name = next();
    else if (a == "--kv")
      kv_name = next();
    else if (a == "--threads")
      threads = std::stoi(next());
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--isa")
      isa = next();
    else if (a == "--help" || a == "-h") {
      std::printf(
          "strata_bench_engine --model M [--batch 1,8,32] [--prompt-len 128] "
          "[--gen-len 32] [--compute bf16|f32|int8] [--kv f16|bf16|f32] [--threads N] "
          "[--reps N] [--isa native|avx2|portable]\n");
      return 0;
    } else {
      fail("unknown option {}; see --help", a);
    }
  }
  if (model_path.empty()) fail("--model is required; see --help");
  if (prompt_len < 1 || gen_len < 2 || reps < 1)
    fail("need --prompt-len >= 1, --gen-len >= 2, --reps >= 1");
  if (threads > 0) omp_set_num_threads(threads);
  if (isa == "avx2") {
    cpu::restrict_cpu_features({false, false, true});
  } else if (isa == "portable") {
    cpu::restrict_cpu_features({false, false, false});
  } else if (isa != "native") {
    fail("--isa {} is not native, avx2 or portable", isa);
  }
  const auto compute =
      compute_name == "int8" ? std::optional<DType>(DType::kI8) : dtype_from_name(compute_name);
  if (!compute) fail("--compute {} is not a dtype; use f32, bf16 or int8", compute_name);
  const DType kv = kv_name.empty() ? default_kv_dtype(*compute)
                                   : dtype_from_name(kv_name).value_or(DType::kCount);
  if (kv == DType::kCount) fail("--kv {} is not a dtype; use f32, f16 or bf16", kv_name);

  const auto model = Model::open(model_path);
  const ModelConfig& c = model->config();
  // Weight bytes a decode step reads (every matrix once; a tied lm_head is
  // the embedding table) and the flops of one token through the layers.
  uint64_t weight_bytes = 0;
  double layer_flops_per_token = 0;
  for (const TensorInfo& t : model->desc().tensors) {
    if (t.shape.size() != 2 || t.name == "position_embd.weight") continue;
    if (t.name == "token_embd.weight" && !c.tie_embeddings) continue;  // only gathered
    weight_bytes += t.nbytes;
    if (t.name.rfind("blk.", 0) == 0) layer_flops_per_token += 2.0 * t.n_elems();
  }
  const double head_flops = 2.0 * c.n_vocab * c.n_embd;
  const int64_t kv_elem = kv == DType::kF32 ? 4 : 2;
  const int64_t kv_row_bytes = c.n_kv_head * c.head_dim * kv_elem;

  std::printf("strata engine benchmark  %s  %d threads  %s\n", cpu_model_name().c_str(),
              omp_get_max_threads(), cpu::cpu_features().avx512_bf16 ? "avx512_bf16" : "");
  std::printf(
      "model %s: %lld layers, n_embd %lld, %lld/%lld heads, vocab %lld, weights read per "
      "step %.1f MB\n",
      model_path.c_str(), static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
      static_cast<long long>(c.n_head), static_cast<long long>(c.n_kv_head),
      static_cast<long long>(c.n_vocab), weight_bytes / 1e6);
  // A ceiling is what the machine can do: the best of 10 runs (a run slowed
  // by another process says nothing about the machine); the median is shown.
  const Range bw_runs = copy_bandwidth(10);
  const Range ceil_runs = matmul_ceiling(*compute, 10);
  const Range bw{bw_runs.hi, bw_runs.lo, bw_runs.hi};
  const Range ceil{ceil_runs.hi, ceil_runs.lo, ceil_runs.hi};
  std::printf(
      "ceilings (best of 10, median): memcpy %.1f GB/s (%.1f); oneDNN %s matmul 2048^3 "
      "%.0f GFLOP/s (%.0f)\n",
      bw.median / 1e9, bw_runs.median / 1e9, compute_name.c_str(), ceil.median, ceil_runs.median);
  std::printf("workload: prompt %lld, gen %lld, compute %s, kv %s\n\n",
              static_cast<long long>(prompt_len), static_cast<long long>(gen_len),
              compute_name.c_str(), std::string(dtype_name(kv)).c_str());
  std::printf("%6s %12s %9s %8s %12s %10s %10s %8s\n", "batch", "prefill t/s", "GFLOP/s", "%ceil",
              "decode t/s", "step ms", "bound ms", "x bound");

  for (int64_t batch : parse_list(batches)) {
    EngineOptions o;
    o.compute_dtype = *compute;
    o.kv_dtype = kv;
    o.gpu_batch_size = batch;
    o.threads = threads;
    auto engine = make_engine(*model, o);
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.n_vocab - 1));
    std::vector<SeqInput> seqs(static_cast<size_t>(batch));
    for (auto& s : seqs) {
      s.prompt.resize(static_cast<size_t>(prompt_len));
      for (auto& t : s.prompt) t = id(rng);
      s.max_new_tokens = static_cast<int32_t>(gen_len);
    }
    const StepFn feed = [&](int, std::span<const int32_t>, const float*, std::span<SeqAction> out) {
      for (auto& a : out) a.next_token = 17;  // any id: time does not depend on it
    };
    std::vector<double> prefill, decode_step;
    engine->run_block(seqs, feed);  // warm-up
    for (int r = 0; r < reps; ++r) {
      const EngineStats before = engine->stats();
      engine->run_block(seqs, feed);
      const EngineStats after = engine->stats();
      prefill.push_back(after.prefill_s - before.prefill_s);
      decode_step.push_back((after.decode_s - before.decode_s) / static_cast<double>(gen_len - 1));
    }
    const Range pf = range_of(prefill), ds = range_of(decode_step);
    // Prefill work: the layers for every prompt token, causal attention
    // (q.k and p.v over pos + 1 keys), the head for the last token of each.
    const double n_tok = static_cast<double>(batch * prompt_len);
    const double attn_flops =
        4.0 * c.n_layer * c.n_head * c.head_dim * batch * (prompt_len * (prompt_len + 1) / 2.0);
    const double pf_flops = layer_flops_per_token * n_tok + attn_flops + head_flops * batch;
    const double gflops = pf_flops / pf.median / 1e9;
    // Decode step bytes: weights once, the KV read by attention at the
    // middle step's length, and the new K/V written.
    const double mid_len = prompt_len + gen_len / 2.0;
    const double kv_bytes = 2.0 * c.n_layer * batch * (mid_len + 1) * kv_row_bytes;
    const double bound = (weight_bytes + kv_bytes) / bw.median;
    std::printf(
        "%6lld %12.0f %9.0f %7.0f%% %12.0f %10.2f %10.2f %7.2fx   (prefill %.3f s %.3f-%.3f, "
        "step %.2f-%.2f ms, KV %.1f MB)\n",
        static_cast<long long>(batch), n_tok / pf.median, gflops, 100.0 * gflops / ceil.median,
        batch / ds.median, ds.median * 1e3, bound * 1e3, ds.median / bound, pf.median, pf.lo, pf.hi,
        ds.lo * 1e3, ds.hi * 1e3, kv_bytes / 1e6);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  strata::init_logging();
  // Engine start-up lines are noise here; STRATA_PROFILE_OPS=1 keeps info
  // level for the backend's per-op time table.
  if (std::getenv("STRATA_PROFILE_OPS") == nullptr) spdlog::set_level(spdlog::level::warn);
  try {
    return run(argc, argv);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
