// Paged attention benchmark: a whole decode step of a model's attention (every
// layer's KV is distinct memory, laid out as the KV cache's page pool lays it
// out, so the step streams the cache from RAM as the engine does) beside the
// machine's read bandwidth measured in the same run; then prefill of one
// layer. Defaults are SmolLM2-135M's shape (30 layers, 9/3 heads, head_dim
// 64) at batch 32 and 160 keys. Warm-up, then repeats; median and range. Not
// a test: numbers depend on the machine and its load.
//
//   strata_bench_attention [--seqs 32] [--ctx 160] [--prompt 128] [--layers 30]
//                          [--heads 9] [--kv-heads 3] [--head-dim 64]
//                          [--kv f16|bf16|f32] [--threads N] [--reps N] [--decode-only]
//                          [--shared N]
// --shared N: every sequence's first N keys (whole pages) are sequence 0's
// pages, a shared prompt prefix, which the decode step reads once per group
// (kernels/cpu/shared_pages.h); the KV rate counts the bytes read once.
// STRATA_BENCH_CPU_TIME=1 times by process CPU time / threads instead of wall
// time (steadier on a machine shared with other work).
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
#include <string>
#include <vector>

#include <time.h>

#include "core/bench.h"
#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bench/attention_bench.h"

namespace {

using strata::DType;

using Stats = strata::RunTimes;
using strata::bench::read_bandwidth;
using strata::bench::time_it;

void check(strata::Status s) {
  if (s != strata::Status::kOk) {
    std::fprintf(stderr, "attention failed: %s\n", std::string(strata::status_name(s)).c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  strata::bench::AttentionShape shape;
  int64_t prompt = 128;
  bool decode_only = false;
  int64_t shared = 0;
  std::string kv = "f16";
  CLI::App app{"strata paged attention benchmark: a decode step over every layer's KV, and prefill"};
  shape.add_flags(app);
  app.add_option("--prompt", prompt, "Prompt tokens of the prefill run")->check(CLI::PositiveNumber);
  app.add_option("--kv", kv, "KV dtype")->check(CLI::IsMember({"f16", "bf16", "f32"}));
  app.add_flag("--decode-only", decode_only, "Skip the prefill run");
  app.add_option("--shared", shared, "Keys of a prefix every sequence shares (whole pages)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  const auto [n_seq, ctx, n_layer, n_head, n_kv, hd, reps] = shape;
  const bool prefill = !decode_only;
  const DType kv_dtype = kv == "f32" ? DType::kF32 : kv == "bf16" ? DType::kBF16 : DType::kF16;
  const int64_t ps = 16;
  prompt = std::min(prompt, ctx);
  const int64_t eb = kv_dtype == DType::kF32 ? 4 : 2;
  const int64_t page_bytes = ps * n_kv * hd * eb;
  const int64_t per_seq = (ctx + ps - 1) / ps;
  const int64_t prompt_pages = (prompt + ps - 1) / ps;
  const int64_t n_pages = n_seq * per_seq;
  std::printf("strata attention benchmark  %s  %d threads\n", strata::cpu_model_name().c_str(),
              omp_get_max_threads());
  const double bw = read_bandwidth(10);
  std::printf("ceiling: read bandwidth %.1f GB/s (512 MiB, best of 10)\n", bw / 1e9);

  // Page ids as the pool hands them out: each prompt's pages in a run, then
  // the decode pages of all sequences interleaved.
  std::vector<int32_t> page_ids, page_indptr{0}, kv_len, q_indptr{0};
  {
    std::vector<std::vector<int32_t>> seq_pages(static_cast<size_t>(n_seq));
    int32_t next = 0;
    for (auto& sp : seq_pages) {
      for (int64_t p = 0; p < prompt_pages; ++p) sp.push_back(next++);
    }
    for (int64_t p = prompt_pages; p < per_seq; ++p) {
      for (auto& sp : seq_pages) sp.push_back(next++);
    }
    const int64_t shared_pages = std::min(shared, ctx - 1) / ps;
    shared = shared_pages * ps;
    for (auto& sp : seq_pages) std::copy_n(seq_pages[0].begin(), shared_pages, sp.begin());
    for (int64_t s = 0; s < n_seq; ++s) {
      page_ids.insert(page_ids.end(), seq_pages[static_cast<size_t>(s)].begin(),
                      seq_pages[static_cast<size_t>(s)].end());
      page_indptr.push_back(static_cast<int32_t>(page_ids.size()));
      kv_len.push_back(static_cast<int32_t>(ctx));
      q_indptr.push_back(static_cast<int32_t>(s + 1));
    }
  }
  // One slab per layer: its K pages, then its V pages.
  std::vector<char*> slabs;
  std::vector<std::vector<const void*>> k_ptrs(static_cast<size_t>(n_layer)),
      v_ptrs(static_cast<size_t>(n_layer));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  for (int64_t l = 0; l < n_layer; ++l) {
    const size_t bytes = static_cast<size_t>(2 * n_pages * page_bytes);
    char* slab = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    for (size_t i = 0; i < bytes / static_cast<size_t>(eb); ++i) {
      const float v = val(rng);
      if (kv_dtype == DType::kF32) {
        reinterpret_cast<float*>(slab)[i] = v;
      } else {
        reinterpret_cast<uint16_t*>(slab)[i] =
            kv_dtype == DType::kF16 ? strata::f32_to_f16(v) : strata::f32_to_bf16(v);
      }
    }
    slabs.push_back(slab);
    for (int64_t p = 0; p < n_pages; ++p) {
      k_ptrs[static_cast<size_t>(l)].push_back(slab + p * page_bytes);
      v_ptrs[static_cast<size_t>(l)].push_back(slab + (n_pages + p) * page_bytes);
    }
  }
  auto pages_of = [&](int64_t l) {
    strata::cpu::KvPages kv;
    kv.k = k_ptrs[static_cast<size_t>(l)].data();
    kv.v = v_ptrs[static_cast<size_t>(l)].data();
    kv.n_pages = n_pages;
    kv.dtype = kv_dtype;
    kv.page_size = ps;
    kv.n_kv_head = n_kv;
    kv.head_dim = hd;
    return kv;
  };
  strata::cpu::AttentionBatch b;
  b.n_seq = n_seq;
  b.q_indptr = q_indptr.data();
  b.kv_len = kv_len.data();
  b.page_indptr = page_indptr.data();
  b.page_ids = page_ids.data();
  const int64_t row = n_head * hd;
  std::vector<float> q(static_cast<size_t>(n_seq * row)), out(q.size());
  std::uniform_real_distribution<float> qd(-1.0f, 1.0f);
  for (auto& v : q) v = qd(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  const double kv_bytes = 2.0 * n_layer * (shared + n_seq * (ctx - shared)) * n_kv * hd * eb;
  const Stats st = time_it(reps, [&] {
    for (int64_t l = 0; l < n_layer; ++l) {
      check(strata::cpu::paged_attention(out.data(), row, q.data(), row, n_head, pages_of(l), b,
                                         scale));
    }
  });
  std::printf(
      "decode step: %lld layers x %lld sequences x %lld keys, %lld of them shared (%lld/%lld "
      "heads, head_dim %lld, %s KV %.1f MB)\n  %.3f ms (range %.3f-%.3f), %.3f ms/layer, KV read "
      "at %.1f GB/s = "
      "%.0f%% of the read bandwidth\n",
      static_cast<long long>(n_layer), static_cast<long long>(n_seq), static_cast<long long>(ctx),
      static_cast<long long>(shared), static_cast<long long>(n_head), static_cast<long long>(n_kv),
      static_cast<long long>(hd), std::string(strata::dtype_name(kv_dtype)).c_str(), kv_bytes / 1e6,
      st.median * 1e3, st.lo * 1e3, st.hi * 1e3, st.median * 1e3 / n_layer,
      kv_bytes / st.median / 1e9, 100.0 * kv_bytes / st.median / bw);

  // Prefill of one layer: every sequence's prompt at once (causal).
  if (prefill) {
    std::vector<int32_t> pq{0}, plen;
    for (int64_t s = 0; s < n_seq; ++s) {
      pq.push_back(static_cast<int32_t>(pq.back() + prompt));
      plen.push_back(static_cast<int32_t>(prompt));
    }
    strata::cpu::AttentionBatch pb = b;
    pb.q_indptr = pq.data();
    pb.kv_len = plen.data();
    std::vector<float> pq_rows(static_cast<size_t>(n_seq * prompt * row)), po(pq_rows.size());
    for (auto& v : pq_rows) v = qd(rng);
    const Stats ps_st = time_it(std::max(3, reps / 3), [&] {
      check(strata::cpu::paged_attention(po.data(), row, pq_rows.data(), row, n_head, pages_of(0),
                                         pb, scale));
    });
    const double flop = 4.0 * n_head * hd * n_seq * (prompt * (prompt + 1) / 2.0);
    std::printf("prefill, one layer, %lld sequences x %lld tokens: %.3f ms (range %.3f-%.3f), "
                "%.1f GFLOP/s\n",
                static_cast<long long>(n_seq), static_cast<long long>(prompt),
                ps_st.median * 1e3, ps_st.lo * 1e3, ps_st.hi * 1e3,
                flop / ps_st.median / 1e9);
  }
  for (char* s : slabs) std::free(s);
  return 0;
}
