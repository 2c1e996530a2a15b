// Helpers of the engine tests that run the fixture models (tests/data/golden)
// through engines of different placements and devices and compare the runs:
// the fixtures and their eight prompts, greedy generation of every prompt
// with the logits of every step, bytes per link, and the bound for f32
// logits computed in another summation order.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "generate/engine.h"
#include "model/model.h"
#include "offload/engine_goldens.h"

namespace strata::fixture_runs {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("strata-engine-" + tag + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
};

struct Fixture {
  std::string name;
  std::unique_ptr<Model> model;
  std::vector<std::vector<int32_t>> prompts;  // 8 prompts of 1..25 tokens
};

inline Fixture load(const std::string& name) {
  Fixture f;
  f.name = name;
  const auto golden = test::load_json(std::string(STRATA_TEST_DATA) + "/golden/" + name + ".json");
  f.model = Model::open(std::string(STRATA_TEST_DATA) + "/" + golden["model"].get<std::string>());
  std::vector<std::vector<int32_t>> g;
  for (const auto& p : golden["prompts"]) g.push_back(p["ids"].get<std::vector<int32_t>>());
  auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  auto head = [](const std::vector<int32_t>& a, size_t n) {
    return std::vector<int32_t>(a.begin(), a.begin() + static_cast<long>(std::min(n, a.size())));
  };
  f.prompts = {g[0],          g[1],          g[2],           head(g[0], 3), cat(g[1], g[2]),
               head(g[2], 9), head(g[1], 1), cat(g[0], g[1])};
  return f;
}

// Prompts with shared prefixes among others: a preamble of two fixture
// prompts before five of them, twice the same prompt, and the fixture's
// own prompts (sharing less than a page with them, or nothing).
inline std::vector<std::vector<int32_t>> sharing_prompts(const Fixture& f) {
  auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<int32_t> preamble = cat(f.prompts[0], f.prompts[2]);
  std::vector<std::vector<int32_t>> p;
  for (size_t i : {1, 3, 5, 6, 7}) p.push_back(cat(preamble, f.prompts[i]));
  p.insert(p.begin() + 2, f.prompts[4]);
  p.push_back(f.prompts[4]);
  p.push_back(f.prompts[6]);
  p.push_back(f.prompts[2]);
  return p;
}

// An engine for the fixture runs: f32 compute and KV, micro-batches of g
// sequences, k per block, pages of 4 tokens (short prompts span several,
// full and partial), 2 threads, the offload directory under `dir`; the
// placement is EngineOptions' default (everything where the device
// computes: in RAM, on the CPU). Prefix sharing is off (some fixture prompts
// begin with others: the grids count each step's bytes, and a prefix step
// is one more); the tests of sharing turn it on.
inline EngineOptions fixture_options(const Fixture& f, int64_t g, int64_t k, const fs::path& dir) {
  EngineOptions o;
  o.compute_dtype = DType::kF32;
  o.kv_dtype = DType::kF32;
  o.gpu_batch_size = g;
  o.num_gpu_batches = k;
  o.page_size = 4;
  o.threads = 2;
  o.kv_budget_bytes = uint64_t{64} << 20;
  o.offload_dir = (dir / f.name).string();
  o.prefix_sharing = false;
  return o;
}

constexpr int32_t kNewTokens = 9;

struct GenRun {
  std::vector<std::vector<int32_t>> tokens;             // [seq][step]
  std::vector<std::vector<std::vector<float>>> logits;  // [seq][step][vocab]
  EngineStats stats;
};

// Draft tokens for sequence `seq` given the tokens it has produced so far
// (the last of which is fed next): speculative decoding's proposals.
using DraftFn =
    std::function<std::vector<int32_t>(size_t seq, const std::vector<int32_t>& produced)>;

// Greedy generation as generate() with speculative decoding: each step's
// drafts from `draft`, a sequence's rows taken in order while the argmax
// confirms the draft token fed next; every kept token's logits row is
// recorded, so the run compares with generate()'s token for token.
inline GenRun generate_speculative(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                   const DraftFn& draft, int32_t new_tokens = kNewTokens) {
  const int64_t V = e.config().n_vocab;
  GenRun r;
  r.tokens.resize(prompts.size());
  r.logits.resize(prompts.size());
  for (size_t b0 = 0; b0 < prompts.size(); b0 += static_cast<size_t>(e.block_size())) {
    const size_t n = std::min(prompts.size() - b0, static_cast<size_t>(e.block_size()));
    std::vector<SeqInput> in(n);
    for (size_t i = 0; i < n; ++i) in[i] = {prompts[b0 + i], new_tokens};
    std::vector<std::vector<int32_t>> fed_drafts(n);
    e.run_block(in, [&](int, std::span<const int32_t> active, const float* logits,
                        std::span<SeqAction> out) {
      for (size_t a = 0, rows = 1; a < active.size(); a += rows) {
        rows = 1;
        while (a + rows < active.size() && active[a + rows] == active[a]) ++rows;
        const auto b = static_cast<size_t>(active[a]);
        const size_t s = b0 + b;
        EXPECT_LE(rows - 1, fed_drafts[b].size()) << "more rows than tokens fed";
        for (size_t i = 0; i < rows; ++i) {
          const float* row = logits + static_cast<int64_t>(a + i) * V;
          r.logits[s].emplace_back(row, row + V);
          r.tokens[s].push_back(test::argmax(row, V));
          out[a].next_token = r.tokens[s].back();
          out[a].accepted = static_cast<int32_t>(i);
          if (i + 1 == rows || r.tokens[s].back() != fed_drafts[b][i]) break;
        }
        out[a].draft = draft(s, r.tokens[s]);
        fed_drafts[b] = out[a].draft;
      }
    });
  }
  r.stats = e.stats();
  return r;
}

// Greedy generation of every prompt in blocks of the engine's size (no
// draft tokens: one row per sequence and step).
inline GenRun generate(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                       int32_t new_tokens = kNewTokens) {
  return generate_speculative(
      e, prompts, [](size_t, const std::vector<int32_t>&) { return std::vector<int32_t>{}; },
      new_tokens);
}

// Drafts that follow `plain`'s greedy continuation of each sequence, up to
// `k` tokens, with every third one wrong (so steps accept some and reject
// some).
inline DraftFn continuation_drafts(const GenRun& plain, int64_t n_vocab, size_t k = 3) {
  return [&plain, n_vocab, k](size_t s, const std::vector<int32_t>& produced) {
    std::vector<int32_t> d;
    for (size_t i = produced.size(); i < plain.tokens[s].size() && d.size() < k; ++i) {
      const int32_t t = plain.tokens[s][i];
      d.push_back(d.size() % 3 == 2 ? static_cast<int32_t>((t + 1) % n_vocab) : t);
    }
    return d;
  };
}

inline uint64_t link_bytes(const EngineStats& s, const std::string& name) {
  auto it = s.links.find(name);
  return it == s.links.end() ? 0 : it->second.bytes;
}

// The bound for logits computed with other micro-batch sizes, f32 compute:
// only the matrix products see the batch (their row count), and a product
// of another height may sum each dot product in another order. A sum of k
// terms rounded in f32 (u = 2^-24) in any order carries an error of at most
// (k - 1) u sum|x_i w_i|, and with rounding errors of independent signs a
// typical one of u sqrt(k/2)-ish times the output scale; two orders differ
// by up to twice that. Each of the S = 4 n_layer + 1 matrix stages a logit
// depends on adds such a relative error of its output scale, with unit gain
// along the residual stream, so the logits differ by about
// 2 u sqrt(k_max / 2) sqrt(S) of their scale; the largest of the ~1e4
// compared values stays within 4.5 standard deviations, and the scale is
// bounded by max|logit|; plus u max|logit| for the final rounding.
inline double micro_batch_bound(const ModelConfig& c, double max_abs_logit) {
  const double u = std::ldexp(1.0, -24);
  const double k_max = static_cast<double>(std::max({c.n_embd, c.n_ff, c.n_head * c.head_dim}));
  const double stages = 4.0 * static_cast<double>(c.n_layer) + 1.0;
  return (4.5 * 2 * u * std::sqrt(k_max / 2) * std::sqrt(stages) + u) * max_abs_logit;
}

// Every step's logits of `got` bit for bit those of `ref` (tokens first).
inline void expect_same_bits(const GenRun& ref, const GenRun& got, const std::string& what) {
  ASSERT_EQ(got.tokens, ref.tokens) << what;
  for (size_t q = 0; q < ref.logits.size(); ++q) {
    ASSERT_EQ(got.logits[q].size(), ref.logits[q].size()) << what;
    for (size_t i = 0; i < ref.logits[q].size(); ++i) {
      ASSERT_EQ(std::memcmp(got.logits[q][i].data(), ref.logits[q][i].data(),
                            ref.logits[q][i].size() * sizeof(float)),
                0)
          << what << ": logits of sequence " << q << " step " << i << " are not bit-identical";
    }
  }
}

// Tokens equal, and every row within the bound of the reference's row.
inline void expect_same_tokens_close_logits(const ModelConfig& c, const GenRun& ref,
                                            const GenRun& got, const std::string& what) {
  ASSERT_EQ(got.tokens, ref.tokens) << what;
  for (size_t s = 0; s < ref.logits.size(); ++s) {
    ASSERT_EQ(got.logits[s].size(), ref.logits[s].size()) << what;
    for (size_t i = 0; i < ref.logits[s].size(); ++i) {
      const std::vector<float>& a = ref.logits[s][i];
      double max_abs = 0;
      for (float x : a) max_abs = std::max(max_abs, std::fabs(double(x)));
      const double bound = micro_batch_bound(c, max_abs);
      for (size_t v = 0; v < a.size(); ++v) {
        ASSERT_LE(std::fabs(double(got.logits[s][i][v]) - a[v]), bound)
            << what << ": sequence " << s << " token " << i << " id " << v;
      }
    }
  }
}

// The test name of a fixture parameter ("llama-gguf" -> "llama_gguf").
inline std::string fixture_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& c : n) c = c == '-' ? '_' : c;
  return n;
}

}  // namespace strata::fixture_runs
