// Decode attention over quantized KV pages beside f16 pages and the
// machine's read bandwidth: a whole decode step of a model's attention (every
// layer's pages distinct memory, as the page pool lays them out), for each KV
// format asked for; the KV bytes each step reads and the rate it reads them
// at. Defaults are SmolLM2-135M's shape (30 layers, 9/3 heads, head_dim 64)
// at 32 sequences of 512 keys. Warm-up, then repeats; median and range. A
// program, not a test: numbers depend on the machine and its load.
//
//   strata_bench_attention_quant [--seqs 32] [--ctx 512] [--layers 30] [--heads 9]
//       [--kv-heads 3] [--head-dim 64] [--kv f16,q8a32,q4a32] [--threads N] [--reps N]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/bench.h"
#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bench/attention_bench.h"
#include "quant/convert.h"
#include "quant/quant.h"

namespace {

using strata::DType;

using Stats = strata::RunTimes;
using strata::bench::read_bandwidth;
using strata::bench::time_it;

}  // namespace

int main(int argc, char** argv) {
  strata::bench::AttentionShape shape;
  shape.ctx = 512;
  shape.reps = 9;
  std::string formats = "f16,q8a32,q4a32";
  CLI::App app{"strata quantized-KV attention benchmark: a decode step over every layer's KV"};
  shape.add_flags(app);
  app.add_option("--kv", formats, "KV formats, comma-separated");
  CLI11_PARSE(app, argc, argv);
  const auto [n_seq, ctx, n_layer, n_head, n_kv, hd, reps] = shape;
  const int64_t ps = 16;
  std::printf("strata quantized-KV attention benchmark  %s  %d threads\n", strata::cpu_model_name().c_str(),
              omp_get_max_threads());
  const double bw = read_bandwidth(10);
  std::printf("ceiling: read bandwidth %.1f GB/s (512 MiB, best of 10)\n", bw / 1e9);
  const int64_t per_seq = (ctx + ps - 1) / ps;
  const int64_t n_pages = n_seq * per_seq;
  std::vector<int32_t> page_ids, page_indptr{0}, kv_len, q_indptr{0};
  for (int64_t s = 0; s < n_seq; ++s) {
    for (int64_t p = 0; p < per_seq; ++p) page_ids.push_back(static_cast<int32_t>(s * per_seq + p));
    page_indptr.push_back(static_cast<int32_t>(page_ids.size()));
    kv_len.push_back(static_cast<int32_t>(ctx));
    q_indptr.push_back(static_cast<int32_t>(s + 1));
  }
  const int64_t row = n_head * hd;
  std::mt19937 rng(7);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n_seq * row)), out(q.size());
  for (auto& v : q) v = val(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  double f16_ms = 0;

  std::stringstream list(formats);
  std::string name;
  while (std::getline(list, name, ',')) {
    const auto t = strata::dtype_from_name(name);
    if (!t || (!strata::is_quantized(*t) && *t != DType::kF16 && *t != DType::kF32 &&
               *t != DType::kBF16)) {
      std::fprintf(stderr, "--kv %s: not a KV format\n", name.c_str());
      return 2;
    }
    const size_t tok_bytes = strata::row_bytes(*t, n_kv * hd);  // one token's K (or V) row
    const size_t page_bytes = static_cast<size_t>(ps) * tok_bytes;
    std::vector<char*> slabs;
    std::vector<std::vector<const void*>> k_ptrs(static_cast<size_t>(n_layer)),
        v_ptrs(static_cast<size_t>(n_layer));
    std::vector<float> x(static_cast<size_t>(n_kv * hd));
    for (int64_t l = 0; l < n_layer; ++l) {
      const size_t bytes = 2 * static_cast<size_t>(n_pages) * page_bytes;
      char* slab = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
      for (size_t off = 0; off < bytes; off += tok_bytes) {
        for (auto& v : x) v = val(rng);
        if (*t == DType::kF16) {
          strata::f32_to_f16_row(x.data(), reinterpret_cast<uint16_t*>(slab + off), n_kv * hd);
        } else if (*t == DType::kF32) {
          std::memcpy(slab + off, x.data(), x.size() * 4);
        } else if (*t == DType::kBF16) {
          strata::f32_to_bf16_row(x.data(), reinterpret_cast<uint16_t*>(slab + off), n_kv * hd);
        } else {
          strata::quantize_row(*t, x.data(), slab + off, n_kv * hd);
        }
      }
      slabs.push_back(slab);
      for (int64_t p = 0; p < n_pages; ++p) {
        k_ptrs[static_cast<size_t>(l)].push_back(slab + p * page_bytes);
        v_ptrs[static_cast<size_t>(l)].push_back(slab + (n_pages + p) * page_bytes);
      }
    }
    strata::cpu::AttentionBatch b;
    b.n_seq = n_seq;
    b.q_indptr = q_indptr.data();
    b.kv_len = kv_len.data();
    b.page_indptr = page_indptr.data();
    b.page_ids = page_ids.data();
    bool ok = true;
    const Stats st = time_it(reps, [&] {
      for (int64_t l = 0; l < n_layer; ++l) {
        strata::cpu::KvPages kv;
        kv.k = k_ptrs[static_cast<size_t>(l)].data();
        kv.v = v_ptrs[static_cast<size_t>(l)].data();
        kv.n_pages = n_pages;
        kv.dtype = *t;
        kv.page_size = ps;
        kv.n_kv_head = n_kv;
        kv.head_dim = hd;
        ok = ok && strata::cpu::paged_attention(out.data(), row, q.data(), row, n_head, kv, b,
                                                scale) == strata::Status::kOk;
      }
    });
    if (!ok) {
      std::fprintf(stderr, "attention over %s pages failed\n", name.c_str());
      return 1;
    }
    const double kv_bytes = 2.0 * n_layer * n_seq * ctx * static_cast<double>(tok_bytes);
    if (*t == DType::kF16) f16_ms = st.median * 1e3;
    std::printf(
        "%-7s decode step %lld layers x %lld seqs x %lld keys: KV %.1f MB, %.2f ms (range "
        "%.2f-%.2f), KV read at %.1f GB/s = %.0f%% of the read bandwidth%s\n",
        name.c_str(), static_cast<long long>(n_layer), static_cast<long long>(n_seq),
        static_cast<long long>(ctx), kv_bytes / 1e6, st.median * 1e3, st.lo * 1e3, st.hi * 1e3,
        kv_bytes / st.median / 1e9, 100.0 * kv_bytes / st.median / bw,
        f16_ms > 0 && *t != DType::kF16
            ? (", " + std::to_string(f16_ms / (st.median * 1e3)).substr(0, 4) + "x f16's speed")
                  .c_str()
            : "");
    for (char* s : slabs) std::free(s);
  }
  return 0;
}
