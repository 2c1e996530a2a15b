// strata_make_bench_model: writes a random-weight Llama-shaped model as a
// Hugging Face directory (config.json, one f16 model.safetensors, the
// tokenizer files of a fixture) for the offload benchmark
// (scripts/bench_offload.sh). Weights are uniform in +-sqrt(3/fan_in)/2 from
// a fixed seed, norms 1, so activations stay finite over many layers; the
// numbers mean nothing, the bytes and shapes are what the benchmark needs.
//
//   strata_make_bench_model --out DIR [--hidden 2048 --ff 8192 --layers 24
//     --heads 16 --kv-heads 16] --tokenizer-dir tests/data/models/llama
//
// The directory is written through DIR.tmp and renamed, so an interrupted
// run never leaves a directory that looks complete.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fs = std::filesystem;

namespace {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  double scale = 0;  // 0: ones (a norm)
  uint64_t bytes() const {
    uint64_t n = 2;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "strata_make_bench_model: %s\n", msg.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a random-weight Llama-shaped f16 model for the offload benchmark"};
  std::string out, tok_dir;
  int64_t hidden = 2048, ff = 8192, layers = 24, heads = 16, kv_heads = 16, ctx = 512;
  app.add_option("--out", out, "Model directory to write")->required();
  app.add_option("--tokenizer-dir", tok_dir, "Directory with tokenizer.json to copy")->required();
  app.add_option("--hidden", hidden)->capture_default_str();
  app.add_option("--ff", ff)->capture_default_str();
  app.add_option("--layers", layers)->capture_default_str();
  app.add_option("--heads", heads)->capture_default_str();
  app.add_option("--kv-heads", kv_heads)->capture_default_str();
  app.add_option("--ctx", ctx, "max_position_embeddings")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (hidden % heads != 0 || heads % kv_heads != 0) die("heads must divide hidden, kv heads heads");

  // The tokenizer fixes the vocabulary.
  const fs::path tdir(tok_dir);
  std::ifstream tf(tdir / "config.json");
  if (!tf) die("no config.json in " + tok_dir);
  const nlohmann::json tcfg = nlohmann::json::parse(tf);
  const int64_t vocab = tcfg.at("vocab_size").get<int64_t>();
  const int64_t hd = hidden / heads;

  std::vector<Tensor> ts;
  auto lin = [&](const std::string& n, int64_t rows, int64_t cols) {
    ts.push_back({n, {rows, cols}, std::sqrt(3.0 / static_cast<double>(cols)) / 2});
  };
  ts.push_back({"model.embed_tokens.weight", {vocab, hidden}, 1.0});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ts.push_back({p + "input_layernorm.weight", {hidden}, 0});
    lin(p + "self_attn.q_proj.weight", heads * hd, hidden);
    lin(p + "self_attn.k_proj.weight", kv_heads * hd, hidden);
    lin(p + "self_attn.v_proj.weight", kv_heads * hd, hidden);
    lin(p + "self_attn.o_proj.weight", hidden, heads * hd);
    ts.push_back({p + "post_attention_layernorm.weight", {hidden}, 0});
    lin(p + "mlp.gate_proj.weight", ff, hidden);
    lin(p + "mlp.up_proj.weight", ff, hidden);
    lin(p + "mlp.down_proj.weight", hidden, ff);
  }
  ts.push_back({"model.norm.weight", {hidden}, 0});
  lin("lm_head.weight", vocab, hidden);

  nlohmann::ordered_json header;
  uint64_t off = 0;
  for (const Tensor& t : ts) {
    header[t.name] = {{"dtype", "F16"}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes()}}};
    off += t.bytes();
  }
  std::string hjson = header.dump();
  while ((hjson.size() + 8) % 8 != 0) hjson += ' ';

  const fs::path dir(out), tmp = fs::path(out + ".tmp");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) die("cannot create " + tmp.string() + ": " + ec.message());

  nlohmann::ordered_json cfg = {{"architectures", {"LlamaForCausalLM"}},
                                {"model_type", "llama"},
                                {"hidden_size", hidden},
                                {"intermediate_size", ff},
                                {"num_hidden_layers", layers},
                                {"num_attention_heads", heads},
                                {"num_key_value_heads", kv_heads},
                                {"head_dim", hd},
                                {"hidden_act", "silu"},
                                {"max_position_embeddings", ctx},
                                {"rms_norm_eps", 1e-5},
                                {"rope_theta", 10000.0},
                                {"tie_word_embeddings", false},
                                {"vocab_size", vocab},
                                {"torch_dtype", "float16"}};
  for (const char* k : {"bos_token_id", "eos_token_id"}) {
    if (tcfg.contains(k)) cfg[k] = tcfg[k];
  }
  std::ofstream(tmp / "config.json") << cfg.dump(2) << "\n";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "generation_config.json"}) {
    if (fs::exists(tdir / f)) fs::copy_file(tdir / f, tmp / f, fs::copy_options::overwrite_existing);
  }

  std::FILE* fp = std::fopen((tmp / "model.safetensors").c_str(), "wb");
  if (!fp) die("cannot write " + (tmp / "model.safetensors").string());
  const uint64_t hlen = hjson.size();
  std::fwrite(&hlen, 8, 1, fp);
  std::fwrite(hjson.data(), 1, hjson.size(), fp);
  std::vector<uint16_t> buf(size_t{1} << 24);
  uint64_t x = 0x2545F4914F6CDD1Dull;
  for (const Tensor& t : ts) {
    uint64_t n = t.bytes() / 2;
    const uint16_t one = strata::f32_to_f16(1.0f);
    while (n > 0) {
      const size_t m = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
      if (t.scale == 0) {
        std::fill(buf.begin(), buf.begin() + static_cast<long>(m), one);
      } else {
        // A small table of f16 values, indexed by xorshift bits: fast, and
        // as good as any other random for this purpose.
        static std::vector<uint16_t> table;
        static double table_scale = -1;
        if (table_scale != t.scale) {
          table.resize(65536);
          for (size_t i = 0; i < table.size(); ++i) {
            const double u = (static_cast<double>(i) + 0.5) / 65536.0 * 2 - 1;
            table[i] = strata::f32_to_f16(static_cast<float>(u * t.scale));
          }
          table_scale = t.scale;
        }
        for (size_t i = 0; i < m; i += 4) {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          for (size_t k = 0; k < 4 && i + k < m; ++k) buf[i + k] = table[(x >> (16 * k)) & 0xffff];
        }
      }
      if (std::fwrite(buf.data(), 2, m, fp) != m) die("write failed (disk full?)");
      n -= m;
    }
  }
  if (std::fclose(fp) != 0) die("write failed (disk full?)");
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir, ec);
  if (ec) die("cannot rename " + tmp.string() + ": " + ec.message());
  std::printf("wrote %s: %lld layers, hidden %lld, ff %lld, vocab %lld, %.2f GB of f16 weights\n",
              out.c_str(), static_cast<long long>(layers), static_cast<long long>(hidden),
              static_cast<long long>(ff), static_cast<long long>(vocab), off / 1e9);
  return 0;
}
