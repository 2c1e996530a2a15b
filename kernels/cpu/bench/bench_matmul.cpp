// Matmul benchmark: GFLOP/s of the CPU matmul at SmolLM2-135M shapes for every
// weight dtype, beside the ceilings it is judged against (a large oneDNN
// matmul in the same compute dtype, and memory bandwidth), and a whole
// batch-32 decode step of that model's linear layers compared with the time
// its weight bytes take to stream from memory; then one layer's paged
// attention (decode and prefill) beside the memory bandwidth. Warm-up, then
// repeats; prints median and range. Not a test: numbers depend on the
// machine and its load (GNU OpenMP threads spin at barriers: on a machine
// shared with other busy processes, run with OMP_PROC_BIND=true or
// OMP_WAIT_POLICY=passive).
//
//   strata_bench_matmul [--quick] [--threads N] [--reps N] [--decode-only]
//                       [--decode-m 1,8,32] [--decode-dtype q4a32|f16|bf16|...]
//                       [--compute f32|bf16|int8]
//                       [--dtypes f32,q4a32,q5_0,q4_k,...]  (shapes whose k is not a
//                       whole number of blocks are skipped)
//                       [--isa avx2|scalar]  (our kernels as on a CPU without
//                       AVX-512, or without AVX2 too)
#include <omp.h>
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "quant/convert.h"
#include "quant/quant.h"

namespace {

using strata::DType;
using strata::cpu::ComputeType;

int g_reps = 7;

using Stats = strata::RunTimes;

// Two warm-up runs, then g_reps runs (at least 0.1 s in all): core/bench.h.
Stats time_it(const std::function<void()>& fn) {
  return strata::time_runs(fn, {2, g_reps, 200, 0.1});
}

struct Bandwidth {
  double copy = 0;  // bytes copied per second (memcpy)
  double read = 0;  // bytes read per second (sum over a buffer)
};

Bandwidth measure_bandwidth() {
  const size_t bytes = size_t{512} << 20;
  auto* a = static_cast<char*>(std::aligned_alloc(64, bytes));
  auto* b = static_cast<char*>(std::aligned_alloc(64, bytes));
  std::memset(a, 1, bytes);
  std::memset(b, 2, bytes);
  Stats copy = time_it([&] {
#pragma omp parallel
    {
      const size_t part = bytes / static_cast<size_t>(omp_get_num_threads());
      const size_t off = part * static_cast<size_t>(omp_get_thread_num());
      std::memcpy(b + off, a + off, part);
    }
  });
  volatile int64_t sink = 0;
  Stats read = time_it([&] {
    int64_t s = 0;
    const auto* p = reinterpret_cast<const int64_t*>(a);
#pragma omp parallel for reduction(+ : s)
    for (size_t i = 0; i < bytes / 8; ++i) s += p[i];
    sink = sink + s;
  });
  std::free(a);
  std::free(b);
  std::printf(
      "memory: memcpy %.1f GB/s copied (%.1f GB/s read+written), read-only %.1f GB/s "
      "(512 MiB, median; range %.1f-%.1f copied)\n",
      bytes / copy.median / 1e9, 2 * bytes / copy.median / 1e9, bytes / read.median / 1e9,
      bytes / copy.hi / 1e9, bytes / copy.lo / 1e9);
  return {bytes / copy.median, bytes / read.median};
}

double onednn_ceiling(dnnl::memory::data_type t, int64_t s) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream str(eng);
  const bool int8 = t == memory::data_type::s8;
  const memory::desc a({s, s}, int8 ? memory::data_type::u8 : t, memory::format_tag::ab);
  const memory::desc b({s, s}, t, memory::format_tag::any);
  const memory::desc c({s, s}, int8 ? memory::data_type::s32 : memory::data_type::f32,
                       memory::format_tag::ab);
  matmul::primitive_desc pd;
  try {
    pd = matmul::primitive_desc(matmul::desc(a, b, c), eng);
  } catch (const dnnl::error&) {
    // oneDNN multiplies bf16 only with AVX-512; ComputeType::kBF16 then runs
    // through the f32 products, whose ceiling is the one to compare with.
    std::printf("ceiling: oneDNN has no %s matmul on this CPU; the f32 ceiling stands for it\n",
                t == memory::data_type::bf16 ? "bf16" : "u8s8");
    return onednn_ceiling(memory::data_type::f32, s);
  }
  memory ma(a, eng), mb(pd.weights_desc(), eng), mc(c, eng);
  std::memset(ma.get_data_handle(), 0, a.get_size());
  std::memset(mb.get_data_handle(), 0, pd.weights_desc().get_size());
  matmul p(pd);
  Stats st = time_it([&] {
    p.execute(str, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    str.wait();
  });
  const double flop = 2.0 * s * s * s;
  std::printf("ceiling: oneDNN %s matmul %ldx%ldx%ld (%s): %.0f GFLOP/s (range %.0f-%.0f)\n",
              int8                           ? "u8s8"
              : t == memory::data_type::bf16 ? "bf16"
                                             : "f32 ",
              static_cast<long>(s), static_cast<long>(s), static_cast<long>(s), pd.impl_info_str(),
              flop / st.median / 1e9, flop / st.hi / 1e9, flop / st.lo / 1e9);
  return flop / st.median;
}

// A weight matrix [n, k] of random values stored as `t`.
struct Weights {
  DType t;
  int64_t n, k;
  size_t row_bytes;
  std::vector<char> data;
};

Weights make_weights(DType t, int64_t n, int64_t k, std::mt19937& rng) {
  Weights w{t, n, k, strata::row_bytes(t, k), {}};
  w.data.resize(w.row_bytes * static_cast<size_t>(n));
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    for (auto& v : row) v = dist(rng);
    char* dst = w.data.data() + static_cast<size_t>(j) * w.row_bytes;
    switch (t) {
      case DType::kF32:
        std::memcpy(dst, row.data(), w.row_bytes);
        break;
      case DType::kF16:
        strata::f32_to_f16_row(row.data(), reinterpret_cast<uint16_t*>(dst), k);
        break;
      case DType::kBF16:
        strata::f32_to_bf16_row(row.data(), reinterpret_cast<uint16_t*>(dst), k);
        break;
      default:
        if (strata::dtype_info(t).dequant_only) {
          // A read-only GGUF format: random bytes (their speed is what counts here).
          for (size_t b = 0; b < w.row_bytes; ++b) dst[b] = static_cast<char>(rng());
        } else {
          strata::quantize_row(t, row.data(), dst, k);
        }
        break;
    }
  }
  return w;
}

void check(strata::Status s) {
  if (s != strata::Status::kOk) {
    std::fprintf(stderr, "matmul failed: %s\n", std::string(strata::status_name(s)).c_str());
    std::exit(1);
  }
}

const char* name(ComputeType c) {
  return c == ComputeType::kBF16 ? "bf16" : c == ComputeType::kInt8 ? "int8" : "f32";
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, decode_only = false;
  std::vector<int64_t> decode_ms = {32};
  DType decode_dtype = strata::kQ4_1;  // the layers' weights; the head stays Q8_0 when quantized
  std::vector<ComputeType> computes = {ComputeType::kF32, ComputeType::kBF16, ComputeType::kInt8};
  std::vector<DType> dtypes = {DType::kF32, DType::kF16, DType::kBF16, strata::kQ4_1,
                               strata::kQ8_0};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--decode-only") {
      decode_only = true;
    } else if (a == "--decode-m" && i + 1 < argc) {
      decode_ms.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        decode_ms.push_back(std::strtoll(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
      }
    } else if (a == "--decode-dtype" && i + 1 < argc) {
      const auto t = strata::dtype_from_name(argv[++i]);
      if (!t) {
        std::fprintf(stderr, "unknown dtype '%s'\n", argv[i]);
        return 2;
      }
      // The decode step's rows have 576 and 1536 values.
      if (576 % strata::dtype_info(*t).block_elems != 0) {
        std::fprintf(stderr,
                     "--decode-dtype %s: its blocks of %ld values do not divide the decode "
                     "step's rows of 576 values\n",
                     argv[i], static_cast<long>(strata::dtype_info(*t).block_elems));
        return 2;
      }
      decode_dtype = *t;
    } else if (a == "--compute" && i + 1 < argc) {
      const std::string c = argv[++i];
      computes = {c == "bf16"   ? ComputeType::kBF16
                  : c == "int8" ? ComputeType::kInt8
                                : ComputeType::kF32};
    } else if (a == "--dtypes" && i + 1 < argc) {
      dtypes.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p <= list.size();) {
        const size_t e = std::min(list.find(',', p), list.size());
        const auto t = strata::dtype_from_name(list.substr(p, e - p));
        if (!t) {
          std::fprintf(stderr, "unknown dtype '%s'\n", list.substr(p, e - p).c_str());
          return 2;
        }
        dtypes.push_back(*t);
        p = e + 1;
      }
    } else if (a == "--isa" && i + 1 < argc) {
      // Our kernels as on a CPU with less (oneDNN's own: DNNL_MAX_CPU_ISA).
      const std::string isa = argv[++i];
      if (isa != "avx2" && isa != "scalar") {
        std::fprintf(stderr, "unknown --isa '%s' (avx2 or scalar)\n", isa.c_str());
        return 2;
      }
      strata::cpu::restrict_cpu_features({false, false, isa == "avx2"});
    } else if (a == "--threads" && i + 1 < argc) {
      omp_set_num_threads(std::atoi(argv[++i]));
    } else if (a == "--reps" && i + 1 < argc) {
      g_reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::printf(
          "usage: %s [--quick] [--threads N] [--reps N] [--decode-only] [--decode-m 1,8,32] "
          "[--decode-dtype q4a32|f16|...] [--compute f32|bf16|int8] [--dtypes "
          "f32,q4a32,q4_k,...] [--isa avx2|scalar]\n",
          argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  const dnnl_version_t* v = dnnl_version();
  std::printf("strata matmul benchmark  commit %s  %s  %d threads  oneDNN %d.%d.%d\n",
              strata::build_commit().c_str(), strata::cpu_model_name().c_str(),
              omp_get_max_threads(), v->major, v->minor, v->patch);
  const Bandwidth bw = measure_bandwidth();
  const double ceil_f32 = onednn_ceiling(dnnl::memory::data_type::f32, 2048);
  const double ceil_bf16 = onednn_ceiling(dnnl::memory::data_type::bf16, 2048);
  const double ceil_int8 = onednn_ceiling(dnnl::memory::data_type::s8, 2048);
  auto ceiling = [&](ComputeType c) {
    return c == ComputeType::kBF16 ? ceil_bf16 : c == ComputeType::kInt8 ? ceil_int8 : ceil_f32;
  };

  std::mt19937 rng(42);
  strata::cpu::MatmulCache cache;
  struct Shape {
    int64_t n, k;
  };
  const std::vector<Shape> shapes = {
      {576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
  const std::vector<int64_t> ms =
      quick ? std::vector<int64_t>{1, 32, 512} : std::vector<int64_t>{1, 8, 32, 512};
  std::printf(
      "\nour matmul, y[m,n] = x[m,k] . W[n,k]^T; GFLOP/s (%% of the oneDNN ceiling of the "
      "compute dtype) and W GB/s streamed\n");
  std::printf("%-6s %-6s %5s %6s %6s %10s %8s %9s\n", "W", "comp", "m", "n", "k", "GFLOP/s",
              "%ceil", "W GB/s");
  for (ComputeType c : computes) {
    if (decode_only) break;
    for (DType t : dtypes) {
      if (quick && t == DType::kF16) continue;
      for (const Shape& s : shapes) {
        if (!strata::row_elems_ok(t, s.k)) continue;  // K-quants: k a multiple of 256
        const Weights w = make_weights(t, s.n, s.k, rng);
        for (int64_t m : ms) {
          std::vector<float> x(static_cast<size_t>(m * s.k), 0.5f);
          std::vector<float> y(static_cast<size_t>(m * s.n));
          Stats st = time_it([&] {
            check(strata::cpu::matmul(cache, y.data(), s.n, x.data(), s.k, w.data.data(), t,
                                      w.row_bytes, nullptr, m, s.n, s.k, c));
          });
          const double flop = 2.0 * m * s.n * s.k;
          const double gflops = flop / st.median / 1e9;
          const double ceil = ceiling(c);
          std::printf("%-6s %-6s %5ld %6ld %6ld %10.1f %7.0f%% %9.1f\n",
                      std::string(strata::dtype_name(t)).c_str(), name(c), static_cast<long>(m),
                      static_cast<long>(s.n), static_cast<long>(s.k), gflops,
                      100.0 * gflops * 1e9 / ceil, w.data.size() / st.median / 1e9);
        }
      }
    }
  }

  // A decode step of SmolLM2-135M (Q4_1 layers, Q8_0 tied lm_head, or every
  // matrix in --decode-dtype when it is not quantized) at each batch of
  // --decode-m: every layer's weights are distinct memory (96 MB in Q4_1,
  // beyond the caches), as in a real step.
  const int n_layer = 30;
  const std::vector<Shape> layer = {{576, 576},  {192, 576},  {192, 576}, {576, 576},
                                    {1536, 576}, {1536, 576}, {576, 1536}};
  std::vector<Weights> ws;
  size_t step_bytes = 0;
  for (int l = 0; l < n_layer; ++l) {
    for (const Shape& s : layer) ws.push_back(make_weights(decode_dtype, s.n, s.k, rng));
  }
  const DType head = strata::is_quantized(decode_dtype) ? strata::kQ8_0 : decode_dtype;
  ws.push_back(make_weights(head, 49152, 576, rng));
  for (const auto& w : ws) step_bytes += w.data.size();
  for (const int64_t m : decode_ms) {
    double step_flop = 0;
    for (const auto& w : ws) step_flop += 2.0 * m * w.n * w.k;
    std::printf(
        "\ndecode step, SmolLM2-135M %s (30 layers x q,k,v,o,gate,up,down + %s "
        "lm_head), m = %lld\n",
        std::string(strata::dtype_name(decode_dtype)).c_str(),
        std::string(strata::dtype_name(head)).c_str(), static_cast<long long>(m));
    std::vector<float> x(static_cast<size_t>(m * 1536), 0.5f);
    std::vector<float> y(static_cast<size_t>(m * 49152));
    auto part = [](const Weights& w) {
      return strata::cpu::WeightPart{w.data.data(), w.t, w.row_bytes, nullptr, w.n};
    };
    for (ComputeType c : computes) {
      // One call per matrix, then as the engine calls them: q, k and v in one
      // call, gate and up in one (matmul_parts).
      Stats st = time_it([&] {
        for (const auto& w : ws) {
          check(strata::cpu::matmul(cache, y.data(), w.n, x.data(), w.k, w.data.data(), w.t,
                                    w.row_bytes, nullptr, m, w.n, w.k, c));
        }
      });
      Stats fused = time_it([&] {
        for (size_t l = 0; l + 1 < ws.size(); l += layer.size()) {
          const strata::cpu::WeightPart qkv[] = {part(ws[l]), part(ws[l + 1]), part(ws[l + 2])};
          const strata::cpu::WeightPart gate_up[] = {part(ws[l + 4]), part(ws[l + 5])};
          check(strata::cpu::matmul_parts(cache, y.data(), 960, x.data(), 576, qkv, m, 576, c));
          for (size_t i : {l + 3, l + 6}) {
            const Weights& w = ws[i];
            check(strata::cpu::matmul(cache, y.data(), w.n, x.data(), w.k, w.data.data(), w.t,
                                      w.row_bytes, nullptr, m, w.n, w.k, c));
          }
          check(strata::cpu::matmul_parts(cache, y.data(), 3072, x.data(), 576, gate_up, m, 576,
                                          c));
        }
        const Weights& head = ws.back();
        check(strata::cpu::matmul(cache, y.data(), head.n, x.data(), head.k, head.data.data(),
                                  head.t, head.row_bytes, nullptr, m, head.n, head.k, c));
      });
      const double bound_copy = step_bytes / bw.copy;
      const double bound_read = step_bytes / bw.read;
      std::printf(
          "  compute %-4s: %.2f ms (range %.2f-%.2f), %.0f GFLOP/s, weights %.1f MB at "
          "%.1f GB/s\n",
          name(c), st.median * 1e3, st.lo * 1e3, st.hi * 1e3, step_flop / st.median / 1e9,
          step_bytes / 1e6, step_bytes / st.median / 1e9);
      std::printf(
          "    q,k,v and gate,up fused: %.2f ms (range %.2f-%.2f), weights at %.1f GB/s\n",
          fused.median * 1e3, fused.lo * 1e3, fused.hi * 1e3, step_bytes / fused.median / 1e9);
      std::printf(
          "                bandwidth bound %.2f ms by memcpy (%.2fx of it), %.2f ms by "
          "read-only (%.2fx); compute bound at the oneDNN ceiling %.2f ms\n",
          bound_copy * 1e3, st.median / bound_copy, bound_read * 1e3, st.median / bound_read,
          step_flop / ceiling(c) * 1e3);
    }
  }
  std::printf("\nmatmul cache: %zu primitives, %.1f MB workspaces\n", cache.n_primitives(),
              cache.workspace_bytes() / 1e6);

  // Paged attention of one SmolLM2 layer (9 query heads, 3 kv heads, head_dim
  // 64, pages of 16, bf16 KV): a batch-32 decode step at context 512, and a
  // 512-token prefill of one sequence.
  std::printf("\npaged attention, one layer (9/3 heads, head_dim 64, bf16 KV, pages of 16)\n");
  const int64_t ctx = 512, ps = 16, n_kv = 3, hd = 64, n_head = 9;
  const int64_t per_seq = ctx / ps;
  for (int mode = 0; mode < 2; ++mode) {
    const int64_t n_seq = mode == 0 ? 32 : 1;
    const int64_t n_new = mode == 0 ? 1 : ctx;
    std::vector<std::vector<uint16_t>> k_pages, v_pages;
    std::vector<const void*> kp, vp;
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < n_seq * per_seq; ++i) {
      k_pages.emplace_back(static_cast<size_t>(ps * n_kv * hd));
      v_pages.emplace_back(static_cast<size_t>(ps * n_kv * hd));
      for (auto& e : k_pages.back()) e = strata::f32_to_bf16(dist(rng));
      for (auto& e : v_pages.back()) e = strata::f32_to_bf16(dist(rng));
    }
    for (size_t i = 0; i < k_pages.size(); ++i) {
      kp.push_back(k_pages[i].data());
      vp.push_back(v_pages[i].data());
    }
    std::vector<int32_t> q_indptr{0}, kv_len, page_indptr{0}, page_ids;
    for (int64_t s = 0; s < n_seq; ++s) {
      q_indptr.push_back(static_cast<int32_t>(q_indptr.back() + n_new));
      kv_len.push_back(static_cast<int32_t>(ctx));
      for (int64_t p = 0; p < per_seq; ++p)
        page_ids.push_back(static_cast<int32_t>(s * per_seq + p));
      page_indptr.push_back(static_cast<int32_t>(page_ids.size()));
    }
    strata::cpu::KvPages kv;
    kv.k = kp.data();
    kv.v = vp.data();
    kv.n_pages = static_cast<int64_t>(kp.size());
    kv.dtype = DType::kBF16;
    kv.page_size = ps;
    kv.n_kv_head = n_kv;
    kv.head_dim = hd;
    strata::cpu::AttentionBatch b;
    b.n_seq = n_seq;
    b.q_indptr = q_indptr.data();
    b.kv_len = kv_len.data();
    b.page_indptr = page_indptr.data();
    b.page_ids = page_ids.data();
    const int64_t n_tok = q_indptr.back();
    std::vector<float> q(static_cast<size_t>(n_tok * n_head * hd), 0.1f), o(q.size());
    Stats st = time_it([&] {
      check(strata::cpu::paged_attention(o.data(), n_head * hd, q.data(), n_head * hd, n_head, kv,
                                         b, 0.125f));
    });
    const double kv_bytes = 2.0 * n_seq * ctx * n_kv * hd * 2;
    const double pairs = mode == 0 ? 1.0 * n_seq * ctx : ctx * (ctx + 1) / 2.0;
    const double flop = 4.0 * n_head * hd * pairs;
    std::printf(
        "  %s: %.3f ms (range %.3f-%.3f), %.0f GFLOP/s, KV %.1f MB at %.1f GB/s (memcpy "
        "ceiling %.1f GB/s copied, %.1f read)\n",
        mode == 0 ? "decode, 32 sequences x 512 keys" : "prefill, 512 tokens        ",
        st.median * 1e3, st.lo * 1e3, st.hi * 1e3, flop / st.median / 1e9, kv_bytes / 1e6,
        kv_bytes / st.median / 1e9, bw.copy / 1e9, bw.read / 1e9);
  }
  return 0;
}
