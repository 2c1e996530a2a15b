// Micro-benchmark of the CPU (de)quantizers and row converters, one thread:
// GB/s per format and instruction-set variant beside a memcpy ceiling, for a
// row set larger than the caches (memory-bound) and one that stays in L2
// (compute-bound). GB/s counts bytes read plus bytes written, as the memcpy
// ceiling does (2 x its size). Each figure is the median of the repeats after
// a warm-up, with min..max beside it. Not a test: run build-*/tests/quant/bench_quant.
//   bench_quant [--repeats N] [--mib M] [--isa scalar|avx2|avx512|all]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/bench.h"
#include "core/dtype.h"
#include "quant/isa.h"

namespace strata {
namespace {

struct Stat {
  double median, lo, hi;  // GB/s
};

// One warm-up run (page faults, caches, frequency), then `repeats` runs
// (core/bench.h); GB/s of `bytes` per run.
Stat measure(int repeats, double bytes, const std::function<void()>& fn) {
  const RunTimes t = time_runs(fn, {1, repeats, repeats, 0});
  return {t.rate(bytes) / 1e9, t.rate_lo(bytes) / 1e9, t.rate_hi(bytes) / 1e9};
}

void print_stat(const char* what, Stat s, double ceiling) {
  std::printf("  %-14s %7.2f GB/s  [%6.2f .. %6.2f]  %5.1f%% of memcpy\n", what, s.median, s.lo,
              s.hi, 100.0 * s.median / ceiling);
}

int run(int argc, char** argv) {
  int repeats = 9;
  double mib = 32.0;  // f32 side of the large case
  std::string isa_arg = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--mib" && i + 1 < argc) {
      mib = std::max(1.0, std::atof(argv[++i]));
    } else if (a == "--isa" && i + 1 < argc) {
      isa_arg = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_quant [--repeats N] [--mib M] [--isa scalar|avx2|avx512|all]\n");
      return 2;
    }
  }
  std::vector<QuantIsa> isas;
  for (QuantIsa isa : {QuantIsa::kAvx512, QuantIsa::kAvx2, QuantIsa::kScalar}) {
    if (!quant_isa_supported(isa)) continue;
    if (isa_arg == "all" || isa_arg == quant_isa_name(isa)) isas.push_back(isa);
  }
  if (isas.empty()) {
    std::fprintf(stderr, "bench_quant: --isa %s is not supported on this CPU\n", isa_arg.c_str());
    return 2;
  }

  std::printf("bench_quant: %s, commit %s, 1 thread, %d repeats (median [min .. max])\n",
              cpu_model_name().c_str(), build_commit().c_str(), repeats);
  std::printf("GB/s = (bytes read + bytes written) / s; memcpy counts 2 x its size\n");

  struct Case {
    const char* name;
    int64_t n;
  };
  const int64_t n_large = static_cast<int64_t>(mib * 1024 * 1024 / 4) / 128 * 128;
  const Case cases[] = {{"memory-bound", n_large}, {"in-L2 (64 KiB f32)", 16384}};

  for (const Case& c : cases) {
    const int64_t n = c.n;
    const int inner = std::max<int64_t>(1, n_large / n);  // same bytes per timing for both cases
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    std::vector<uint8_t> q(static_cast<size_t>(n) * 2);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = nd(rng);

    const double f32_bytes = static_cast<double>(n) * 4 * inner;
    const Stat copy = measure(repeats, 2 * f32_bytes, [&] {
      for (int r = 0; r < inner; ++r) std::memcpy(y.data(), x.data(), static_cast<size_t>(n) * 4);
    });
    std::printf("\n== %s: %lld values (%.1f MiB f32) x %d ==\n", c.name, static_cast<long long>(n),
                static_cast<double>(n) * 4 / 1048576.0, inner);
    print_stat("memcpy", copy, copy.median);

    for (QuantIsa isa : isas) {
      const QuantKernels& k = quant_kernels(isa);
      std::printf(" [%s]\n", std::string(quant_isa_name(isa)).c_str());
      for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
        const DType t = static_cast<DType>(i);
        if (!is_quantized(t) || dtype_info(t).dequant_only) continue;
        const double qb = static_cast<double>(row_bytes(t, n)) * inner;
        const Stat sq = measure(repeats, f32_bytes + qb, [&] {
          for (int r = 0; r < inner; ++r) k.quantize_row(t, x.data(), q.data(), n);
        });
        const Stat sd = measure(repeats, f32_bytes + qb, [&] {
          for (int r = 0; r < inner; ++r) k.dequantize_row(t, q.data(), y.data(), n);
        });
        const Stat sb = measure(repeats, f32_bytes / 2 + qb, [&] {
          for (int r = 0; r < inner; ++r) k.dequantize_row_bf16(t, q.data(), h.data(), n);
        });
        const std::string name(dtype_name(t));
        print_stat((name + " quant").c_str(), sq, copy.median);
        print_stat((name + " deq").c_str(), sd, copy.median);
        print_stat((name + " deq bf16").c_str(), sb, copy.median);
      }
      const Stat a = measure(repeats, f32_bytes * 1.5, [&] {
        for (int r = 0; r < inner; ++r) k.f32_to_f16_row(x.data(), h.data(), n);
      });
      const Stat b = measure(repeats, f32_bytes * 1.5, [&] {
        for (int r = 0; r < inner; ++r) k.f16_to_f32_row(h.data(), y.data(), n);
      });
      const Stat cb = measure(repeats, f32_bytes * 1.5, [&] {
        for (int r = 0; r < inner; ++r) k.f32_to_bf16_row(x.data(), h.data(), n);
      });
      const Stat d = measure(repeats, f32_bytes * 1.5, [&] {
        for (int r = 0; r < inner; ++r) k.bf16_to_f32_row(h.data(), y.data(), n);
      });
      print_stat("f32->f16", a, copy.median);
      print_stat("f16->f32", b, copy.median);
      print_stat("f32->bf16", cb, copy.median);
      print_stat("bf16->f32", d, copy.median);
    }
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  return strata::run(argc, argv);
}
