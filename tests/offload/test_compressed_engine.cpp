// Compressed engine runs on the fixture models (tests/data/models) against
// the uncompressed f32 run of the same model: KV q8/q4 (Q8A32, Q4A32) and
// weights q8/q4 (a requantized weight pack, Q8A32, Q4A32). Every logit of
// every position (Engine::score, the prefill path) and of every decode step
// (run_block fed the uncompressed run's greedy tokens, the decode path) must
// stay within the bound derived below; where the uncompressed top-1/top-2
// margin exceeds twice the bound the greedy token must be the same; and the
// free-running greedy tokens must equal transformers' golden ones up to the
// first step whose golden margin the bound cannot resolve.
//
// The bound, derived as the bf16 bound of tests/engine/engine_test_util.h:
// a compressed tensor carries a per-element error of at most half a
// quantization step (step = group range / (2^bits - 1)), uniform and of
// independent sign; its relative rms error rho (rms error / rms value) is
// measured, not assumed: for weights exactly, matrix by matrix, from the
// pack's bytes against the source; for K and V as the format's rho on
// N(0, 1) rows (the fixtures' activations are near-Gaussian). Keys are
// quantized per channel over pages of 16 tokens, a range of 16 values where
// a value group spans 32, so the per-token rho covers them too while a page
// is gridded once (prompt pages); decode pages are re-gridded as their range
// widens, each time rounding the older keys once more. A matmul stage
// y = W x then errs by about rho ||x*w||_2, i.e. rho of its output scale,
// whatever the length of the dot product; an attention layer's keys (scores
// q.k) and values (sum p v) are two such stages. Along the residual stream
// the stages' errors add with independent signs and unit gain, to
// sqrt(sum_s rho_s^2) of the logit scale; the largest of the ~1e4 logits
// compared stays within 4.5 standard deviations; the logit scale is bounded
// by max|logit|:
//   |d| <= 4.5 sqrt(sum_s rho_s^2) max|logit| + 2 x the f32 bound.
// Stages: weights: per layer {q,k,v} (their largest rho), o, {gate, up},
// down, then token_embd and the lm_head; KV: K and V per layer.
//
// KV is quantized in groups along head_dim, which must hold whole groups
// (32, 64, 128); the fixtures have head_dim 16, so the KV tests run copies of
// the llama, qwen2 and opt fixtures with half the heads (head_dim 32, the
// same weights): the comparison is against the uncompressed run of that
// same copy, not against a golden.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "offload/engine_goldens.h"
#include "offload/offload_engine.h"
#include "offload/pack_weights.h"
#include "offload/plan_fit.h"
#include "quant/convert.h"
#include "quant/quant.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::f32_logit_bound;

// rms(dequantize(quantize(x)) - x) / rms(x) over 4096 rows of N(0, 1) values.
double format_rho(DType t, int64_t row = 128) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(row)), y(x.size());
  std::vector<uint8_t> q(row_bytes(t, row));
  double err = 0, ref = 0;
  for (int r = 0; r < 4096; ++r) {
    for (auto& v : x) v = n01(rng);
    quantize_row(t, x.data(), q.data(), row);
    dequantize_row(t, q.data(), y.data(), row);
    for (size_t i = 0; i < x.size(); ++i) {
      err += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
      ref += double(x[i]) * x[i];
    }
  }
  return std::sqrt(err / ref);
}

// ||W_pack - W_model||_F / ||W_model||_F of one matrix; 0 when the pack keeps
// the source bytes.
double matrix_rho(const Model& model, const PackMatrices& pack, const std::string& name) {
  const TensorInfo& t = model.desc().get(name);
  const std::optional<MatrixView> v = pack.find(t);
  EXPECT_TRUE(v.has_value()) << name;
  if (!v || v->dtype == t.dtype) return 0.0;
  const int64_t n = t.shape[1];
  const auto src = model.bytes(t);
  const size_t src_row = row_bytes(t.dtype, n);
  std::vector<float> a(static_cast<size_t>(n)), b(a.size());
  double err = 0, ref = 0;
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    row_to_f32(t.dtype, src.data() + static_cast<size_t>(r) * src_row, a.data(), n);
    row_to_f32(v->dtype, static_cast<const std::byte*>(v->data) + r * v->row_bytes, b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      err += (double(b[i]) - a[i]) * (double(b[i]) - a[i]);
      ref += double(a[i]) * a[i];
    }
  }
  return std::sqrt(err / ref);
}

// sum over the weight stages of rho^2 (see the file comment).
double weight_rho2(const Model& model, const PackMatrices& pack) {
  const ModelConfig& c = model.config();
  double sum = 0;
  auto rho = [&](const std::string& n) { return matrix_rho(model, pack, n); };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    auto name = [l](const char* n) { return ModelDesc::layer_name(l, n); };
    const double qkv = std::max({rho(name("attn_q.weight")), rho(name("attn_k.weight")),
                                 rho(name("attn_v.weight"))});
    double ffn_in = rho(name("ffn_up.weight"));
    if (c.gated_ffn) ffn_in = std::max(ffn_in, rho(name("ffn_gate.weight")));
    sum += qkv * qkv + std::pow(rho(name("attn_output.weight")), 2) + ffn_in * ffn_in +
           std::pow(rho(name("ffn_down.weight")), 2);
  }
  const double embd = rho("token_embd.weight");
  const double head = c.tie_embeddings ? embd : rho("output.weight");
  return sum + embd * embd + head * head;
}

struct Fixture {
  std::string name;
  nlohmann::json golden;  // empty for the reshaped copies
  std::unique_ptr<Model> model;
  std::vector<std::vector<int32_t>> prompts;
};

std::vector<std::vector<int32_t>> golden_prompts(const std::string& name) {
  const auto g = test::load_json(std::string(STRATA_TEST_DATA) + "/golden/" + name + ".json");
  std::vector<std::vector<int32_t>> p;
  for (const auto& x : g["prompts"]) p.push_back(x["ids"].get<std::vector<int32_t>>());
  return p;
}

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.name = name;
  f.golden = test::load_json(std::string(STRATA_TEST_DATA) + "/golden/" + name + ".json");
  f.model = Model::open(std::string(STRATA_TEST_DATA) + "/" + f.golden["model"].get<std::string>());
  f.prompts = golden_prompts(name);
  return f;
}

fs::path temp_dir(const std::string& what) {
  return fs::temp_directory_path() /
         ("strata_compression_" + what + "_" + std::to_string(::getpid()));
}

// A copy of an HF fixture with half the attention heads (head_dim 32).
Fixture halved_heads(const std::string& name) {
  const fs::path src = fs::path(STRATA_TEST_DATA) / "models" / name;
  const fs::path dir = temp_dir("hd32_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src)) fs::copy(e.path(), dir / e.path().filename());
  nlohmann::json cfg = test::load_json((dir / "config.json").string());
  const int64_t hidden = cfg["hidden_size"].get<int64_t>();
  const int64_t heads = cfg["num_attention_heads"].get<int64_t>() / 2;
  cfg["num_attention_heads"] = heads;
  if (cfg.contains("num_key_value_heads")) {
    cfg["num_key_value_heads"] = cfg["num_key_value_heads"].get<int64_t>() / 2;
  }
  if (cfg.contains("head_dim")) cfg["head_dim"] = hidden / heads;
  std::ofstream((dir / "config.json").string()) << cfg.dump(2);
  Fixture f;
  f.name = name + " (head_dim 32)";
  f.model = Model::open(dir.string());
  EXPECT_EQ(f.model->config().head_dim, 32);
  f.prompts = golden_prompts(name);
  return f;
}

EngineOptions options(DType kv = DType::kF32) {
  EngineOptions o;
  o.compute_dtype = DType::kF32;
  o.kv_dtype = kv;
  o.gpu_batch_size = 4;
  o.threads = 2;
  o.kv_budget_bytes = uint64_t{64} << 20;
  return o;
}

// Logits of a run: score() of every prompt, and every decode step of one
// block fed `forced` tokens (the uncompressed run's greedy tokens; empty: the
// run's own argmax, which then fills `forced`).
struct RunLogits {
  std::vector<std::vector<float>> scored;                 // [prompt] [positions x V]
  std::vector<std::vector<std::vector<float>>> steps;     // [prompt][step] [V]
};

RunLogits run(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
              std::vector<std::vector<int32_t>>& forced, int32_t n_steps) {
  const int64_t V = e.config().n_vocab;
  RunLogits r;
  for (const auto& p : prompts) r.scored.push_back(e.score(p));
  const bool own = forced.empty();
  if (own) forced.assign(prompts.size(), {});
  r.steps.assign(prompts.size(), {});
  std::vector<SeqInput> in(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    in[i].prompt = prompts[i];
    in[i].max_new_tokens = n_steps;
  }
  e.run_block(in, [&](int step, std::span<const int32_t> active, const float* logits,
                      std::span<SeqAction> out) {
    for (size_t a = 0; a < active.size(); ++a) {
      const size_t s = static_cast<size_t>(active[a]);
      const float* row = logits + static_cast<int64_t>(a) * V;
      r.steps[s].emplace_back(row, row + V);
      if (own) forced[s].push_back(test::argmax(row, V));
      out[a].next_token = forced[s][static_cast<size_t>(step)];
    }
  });
  return r;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(double(x)));
  return m;
}

// Top-1 minus top-2 of a row.
double margin(const std::vector<float>& row) {
  std::vector<float> s = row;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<>());
  return double(s[0]) - s[1];
}

// Every logit of `got` within bound(max|logit| of the row's prompt) of `base`;
// argmax equal wherever base's margin exceeds twice the bound. Returns the
// largest |d| / bound seen.
double compare(const std::string& what, const RunLogits& base, const RunLogits& got,
               double rho2, int64_t V) {
  double worst = 0;
  int checked_tokens = 0;
  for (size_t p = 0; p < base.scored.size(); ++p) {
    const double scale = max_abs(base.scored[p]);
    const double tol = 4.5 * std::sqrt(rho2) * scale + 2 * f32_logit_bound(scale);
    double max_d = 0;
    auto check_row = [&](const float* b, const float* g, const std::string& where) {
      for (int64_t v = 0; v < V; ++v) {
        const double d = std::fabs(double(g[v]) - b[v]);
        max_d = std::max(max_d, std::isnan(d) ? INFINITY : d);
        if (!(d <= tol)) {
          ADD_FAILURE() << what << " prompt " << p << " " << where << " token " << v << ": "
                        << g[v] << " vs " << b[v] << " (|d| " << d << " > " << tol << ")";
          return;
        }
      }
      const std::vector<float> brow(b, b + V);
      if (margin(brow) > 2 * tol) {
        ++checked_tokens;
        EXPECT_EQ(test::argmax(g, V), test::argmax(b, V)) << what << " prompt " << p << " " << where;
      }
    };
    const int64_t n_pos = static_cast<int64_t>(base.scored[p].size()) / V;
    for (int64_t t = 0; t < n_pos; ++t) {
      check_row(base.scored[p].data() + t * V, got.scored[p].data() + t * V,
                "position " + std::to_string(t));
    }
    const double max_prefill = max_d;
    for (size_t s = 0; s < base.steps[p].size(); ++s) {
      check_row(base.steps[p][s].data(), got.steps[p][s].data(), "step " + std::to_string(s));
    }
    std::printf(
        "[ %s ] prompt %zu: max|d| %.3g (prefill %.3g), max|logit| %.3g, bound %.3g (%.1f%% of "
        "it)\n",
        what.c_str(), p, max_d, max_prefill, scale, tol, 100.0 * max_d / tol);
    worst = std::max(worst, max_d / tol);
  }
  std::printf("[ %s ] rho %.4g; %d rows with a margin above 2x the bound kept their argmax\n",
              what.c_str(), std::sqrt(rho2), checked_tokens);
  return worst;
}

// Free-running greedy tokens equal the golden ones up to the first step whose
// golden top-1/top-2 margin is within 2 (bound + f32 bound) of a tie.
void expect_golden_prefix(const Fixture& f, Engine& e, double rho2) {
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    const auto& gp = f.golden["prompts"][p];
    const auto want = gp["greedy"].get<std::vector<int32_t>>();
    const auto margins = gp["greedy_margins"].get<std::vector<double>>();
    double scale = 0;
    for (const auto& row : gp["logits"]) {
      for (const auto& x : row) scale = std::max(scale, std::fabs(x.get<double>()));
    }
    const double tol = 4.5 * std::sqrt(rho2) * scale + 3 * f32_logit_bound(scale);
    const auto got = test::greedy(e, {f.prompts[p]}, static_cast<int32_t>(want.size())).tokens[0];
    size_t resolved = 0;
    while (resolved < want.size() && margins[resolved] > 2 * tol) ++resolved;
    for (size_t s = 0; s < resolved; ++s) {
      ASSERT_EQ(got[s], want[s]) << f.name << " prompt " << p << " step " << s << " (margin "
                                 << margins[s] << " > 2 x " << tol << ")";
    }
    std::printf("[ %s ] prompt %zu: golden tokens checked up to step %zu of %zu\n",
                f.name.c_str(), p, resolved, want.size());
  }
}

constexpr int32_t kSteps = 8;

class CompressedWeights : public ::testing::TestWithParam<std::string> {};

TEST_P(CompressedWeights, Q8AndQ4WithinTheDerivedBound) {
  const Fixture f = load_fixture(GetParam());
  const int64_t V = f.model->config().n_vocab;
  auto base_engine = make_engine(*f.model, options());
  std::vector<std::vector<int32_t>> forced;
  const RunLogits base = run(*base_engine, f.prompts, forced, kSteps);
  for (DType w : {DType::kQ8A32, DType::kQ4A32}) {
    const fs::path dir = temp_dir(f.name + "_" + std::string(dtype_name(w)));
    fs::remove_all(dir);
    EngineOptions o = options();
    o.weight_dtype = w;
    o.offload_dir = dir.string();
    auto e = make_engine(*f.model, o);
    // The pack holds the requantized matrices; the engine reads them.
    const auto pack = open_pack_matrices(*f.model, dir.string(), w);
    EXPECT_EQ(pack->pack().manifest().options.weight_dtype, w);
    const double rho2 = weight_rho2(*f.model, *pack);
    const std::string what = f.name + " weights " + std::string(dtype_name(w));
    const RunLogits got = run(*e, f.prompts, forced, kSteps);
    compare(what, base, got, rho2, V);
    expect_golden_prefix(f, *e, rho2);
    fs::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CompressedWeights,
                         ::testing::Values("opt", "llama", "qwen2", "llama-gguf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

class CompressedKv : public ::testing::TestWithParam<std::string> {};

TEST_P(CompressedKv, Q8AndQ4WithinTheDerivedBound) {
  const Fixture f = halved_heads(GetParam());
  const ModelConfig& c = f.model->config();
  const int64_t V = c.n_vocab;
  auto base_engine = make_engine(*f.model, options());
  std::vector<std::vector<int32_t>> forced;
  const RunLogits base = run(*base_engine, f.prompts, forced, kSteps);
  for (DType kv : {DType::kQ8A32, DType::kQ4A32}) {
    auto e = make_engine(*f.model, options(kv));
    const double rho = format_rho(kv, c.head_dim);
    const double rho2 = 2.0 * static_cast<double>(c.n_layer) * rho * rho;
    compare(f.name + " KV " + std::string(dtype_name(kv)), base, run(*e, f.prompts, forced, kSteps),
            rho2, V);
  }
  fs::remove_all(temp_dir("hd32_" + GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CompressedKv, ::testing::Values("opt", "llama", "qwen2"));

// Placement never changes the arithmetic, quantized KV included: q4 and q8
// pages (keys per channel, re-gridded while a page fills) homed on disk —
// written once complete, read back for attention — give the bits of the same
// run with every page in RAM, scoring and decoding. Pages of 4 tokens, so
// the prompts fill several and the decode steps complete more.
TEST(CompressedKvOnDisk, GivesTheBitsOfTheRunInRam) {
  const Fixture f = halved_heads("llama");
  const fs::path dir = temp_dir("kv_disk");
  fs::remove_all(dir);
  for (DType kv : {DType::kQ4A32, DType::kQ8A32}) {
    SCOPED_TRACE(dtype_name(kv));
    EngineOptions ram = options(kv);
    ram.page_size = 4;
    EngineOptions disk = ram;
    disk.placement.set(DataKind::kKv, 0, 0);  // every KV page homed on disk
    disk.offload_dir = dir.string();
    auto e_ram = make_engine(*f.model, ram);
    auto e_disk = make_engine(*f.model, disk);
    std::vector<std::vector<int32_t>> forced;
    const RunLogits a = run(*e_ram, f.prompts, forced, kSteps);
    const RunLogits b = run(*e_disk, f.prompts, forced, kSteps);
    const EngineStats st = e_disk->stats();
    ASSERT_TRUE(st.links.count("cpu->disk") && st.links.count("disk->cpu"));
    EXPECT_GT(st.links.at("cpu->disk").bytes, 0u) << "pages stored on disk";
    EXPECT_GT(st.links.at("disk->cpu").bytes, 0u) << "pages read back from disk";
    ASSERT_EQ(a.scored.size(), b.scored.size());
    for (size_t p = 0; p < a.scored.size(); ++p) EXPECT_EQ(a.scored[p], b.scored[p]) << p;
    for (size_t p = 0; p < a.steps.size(); ++p) EXPECT_EQ(a.steps[p], b.steps[p]) << p;
  }
  fs::remove_all(dir);
  fs::remove_all(temp_dir("hd32_llama"));
}

// Quantized KV's pages dequantized to f32 for the CPU attention kernel are
// in the block's RAM (offload/block_budget.h: kv_dequant_bytes): a RAM
// budget a byte short of the block is refused, naming them; the block's
// need is accepted.
TEST(CompressedKvBudget, TheDequantizedPagesAreCountedAndNamed) {
  const Fixture f = halved_heads("llama");
  EngineOptions o = options(DType::kQ8A32);
  o.plan_prompt_tokens = 20;
  o.plan_new_tokens = 8;
  const PlanFit fit = plan_fit(*f.model, o, device_caps("cpu"), 0);
  ASSERT_TRUE(fit.refusal.empty()) << fit.refusal;
  o.gpu_mem = 0;
  o.cpu_mem = fit.need.ram - 1;
  try {
    make_engine(*f.model, o);
    FAIL() << "a RAM budget a byte short of the block was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantized KV dequantized for attention"),
              std::string::npos)
        << e.what();
  }
  o.cpu_mem = fit.need.ram;
  EXPECT_NO_THROW(make_engine(*f.model, o));
  fs::remove_all(temp_dir("hd32_llama"));
}

// The format rho the KV bound uses: close to step / sqrt(12) over the rms,
// with step = E[range of 32 N(0,1)] / levels (4.1 / 255 and 4.1 / 15).
TEST(KvFormatError, IsTheQuantizationStep) {
  const double q8 = format_rho(DType::kQ8A32), q4 = format_rho(DType::kQ4A32);
  std::printf("rho q8a32 %.4g, q4a32 %.4g\n", q8, q4);
  EXPECT_NEAR(q8, 4.1 / 255 / std::sqrt(12.0), 0.25 * q8);
  EXPECT_NEAR(q4, 4.1 / 15 / std::sqrt(12.0), 0.25 * q4);
}

TEST(CompressedEngineOptions, WeightCompressionNeedsAnOffloadDirAndKvAGroupThatFits) {
  const Fixture f = load_fixture("llama");
  EngineOptions o = options();
  o.weight_dtype = DType::kQ8A32;
  try {
    make_engine(*f.model, o);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--offload-dir"), std::string::npos) << e.what();
  }
  o = options(DType::kQ4A32);  // head_dim 16 holds no group of 32
  try {
    make_engine(*f.model, o);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim is 16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
