// Weight packs on the fixture models: every tensor's bytes in weights.bin
// equal the source bytes (or the reference quantizer's bytes when
// requantized), the layout invariants (alignment, contiguity, the documented
// order inside a layer), damaged packs (tampered manifest, truncated
// weights.bin, checksum mismatch) rejected with an Error, stale packs
// rebuilt, and failed builds (unwritable directory, full disk) leaving no
// pack behind.
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "io/file_writers.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/json.h"
#include "model/config_json.h"
#include "model/model.h"
#include "offload/aligned_buffer.h"
#include "offload/checksum.h"
#include "offload/pack.h"
#include "offload/pack_build.h"
#include "offload/offload_test_util.h"
#include "quant/quant_ref.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using offload_test::read_file;
using test_files::TempDir;

std::string fixture(const std::string& name) {
  return std::string(STRATA_TEST_DATA) + "/models/" + name;
}

const char* const kFixtures[] = {"opt", "llama", "qwen2", "llama-gguf/tiny-llama.gguf"};

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no Error)";
}

#define EXPECT_ERROR_HAS(msg, part) \
  EXPECT_NE((msg).find(part), std::string::npos) << "'" << (part) << "' not in: " << (msg)

// Row of n values of a source tensor as f32, decoded element by element.
std::vector<float> decode_row(DType t, const std::byte* p, int64_t n) {
  std::vector<float> y(n);
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::kF32) {
      std::memcpy(&y[i], p + 4 * i, 4);
    } else if (t == DType::kF16 || t == DType::kBF16) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      y[i] = t == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  if (is_quantized(t)) dequantize_row_ref(t, p, y.data(), n);
  return y;
}

// The documented order of a layer's tensors for this config.
std::vector<std::string> expected_layer_order(const ModelConfig& c) {
  std::vector<std::string> v = {"attn_norm.weight"};
  if (c.norm_bias) v.push_back("attn_norm.bias");
  if (c.attn_qkv_bias) v.insert(v.end(), {"attn_q.bias", "attn_k.bias", "attn_v.bias"});
  if (c.attn_out_bias) v.push_back("attn_output.bias");
  v.push_back("ffn_norm.weight");
  if (c.norm_bias) v.push_back("ffn_norm.bias");
  if (c.ffn_bias) {
    if (c.gated_ffn) v.push_back("ffn_gate.bias");
    v.insert(v.end(), {"ffn_up.bias", "ffn_down.bias"});
  }
  v.insert(v.end(), {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"});
  if (c.gated_ffn) v.push_back("ffn_gate.weight");
  v.insert(v.end(), {"ffn_up.weight", "ffn_down.weight"});
  return v;
}

// Checks the layout invariants and that every tensor holds `expect(src)`.
void check_pack(
    const Model& model, const Pack& p,
    const std::function<std::vector<std::byte>(const TensorInfo&, const PackTensor&)>& expect) {
  const std::vector<std::byte> w = read_file(p.weights_path());
  ASSERT_EQ(w.size(), p.weights_bytes());
  EXPECT_EQ(w.size() % 4096, 0u);
  const ModelConfig& c = model.config();

  std::vector<std::string> names;
  uint64_t prev_end = 0;
  for (const PackUnit& u : p.units()) {
    names.push_back(u.name);
    EXPECT_EQ(u.offset % 4096, 0u) << u.name;
    EXPECT_GE(u.offset, prev_end);
    ASSERT_FALSE(u.tensors.empty());
    EXPECT_EQ(u.tensors.front().offset, u.offset) << u.name;
    for (size_t k = 0; k < u.tensors.size(); ++k) {
      const PackTensor& t = u.tensors[k];
      EXPECT_EQ(t.offset % 4096, 0u) << t.name;
      if (k + 1 < u.tensors.size()) {
        EXPECT_EQ(u.tensors[k + 1].offset, align_up(t.offset + t.nbytes, 4096)) << t.name;
        for (uint64_t b = t.offset + t.nbytes; b < u.tensors[k + 1].offset; ++b)
          ASSERT_EQ(w[b], std::byte{0});
      }
      EXPECT_EQ(u.tail_bytes(k), u.offset + u.length - t.offset);
    }
    EXPECT_EQ(u.tail_bytes(u.tensors.size()), 0u);
    EXPECT_EQ(u.tail_bytes(0), u.length);
    EXPECT_EQ(u.offset + u.length, u.tensors.back().offset + u.tensors.back().nbytes);
    EXPECT_EQ(xxh64(w.data() + u.offset, u.length), u.checksum) << u.name;
    prev_end = u.offset + u.length;
    if (u.layer >= 0) {
      std::vector<std::string> stems;
      for (const auto& t : u.tensors) stems.push_back(t.name.substr(t.name.find('.', 4) + 1));
      EXPECT_EQ(stems, expected_layer_order(c)) << u.name;
    }
  }
  std::vector<std::string> want_names = {"embed", "output_norm"};
  if (!c.tie_embeddings) want_names.push_back("output");
  for (int64_t l = 0; l < c.n_layer; ++l) want_names.push_back("blk." + std::to_string(l));
  EXPECT_EQ(names, want_names);

  size_t n_tensors = 0;
  for (const PackUnit& u : p.units()) n_tensors += u.tensors.size();
  EXPECT_EQ(n_tensors, model.desc().tensors.size());
  for (const TensorInfo& src : model.desc().tensors) {
    const PackTensor* t = p.find_tensor(src.name);
    ASSERT_NE(t, nullptr) << src.name;
    EXPECT_EQ(t->shape, src.shape) << src.name;
    const std::vector<std::byte> want = expect(src, *t);
    ASSERT_EQ(t->nbytes, want.size()) << src.name;
    EXPECT_EQ(std::memcmp(w.data() + t->offset, want.data(), want.size()), 0) << src.name;
  }
}

std::vector<std::byte> source_bytes(const Model& m, const TensorInfo& src) {
  const auto b = m.bytes(src);
  return {b.begin(), b.end()};
}

std::set<std::string> dir_entries(const fs::path& dir) {
  std::set<std::string> s;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) s.insert(e.path().filename().string());
  return s;
}

TEST(Pack, EveryFixtureRoundTripsByteForByte) {
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    const auto model = Model::open(fixture(name));
    TempDir dir;
    const std::string out = dir / "pack";
    const Pack built = build_pack(*model, out, {});
    EXPECT_EQ(dir_entries(out), (std::set<std::string>{"manifest.json", "weights.bin"}));
    const Pack p = Pack::open(out, model.get());
    check_pack(*model, p, [&](const TensorInfo& src, const PackTensor& t) {
      EXPECT_EQ(t.dtype, src.dtype) << src.name;
      return source_bytes(*model, src);
    });
    p.verify();
    // The manifest records where the weights came from.
    const PackSource& s = p.manifest().source;
    EXPECT_EQ(s.path, fixture(name));
    ASSERT_EQ(s.files.size(), model->desc().files.size());
    for (size_t i = 0; i < s.files.size(); ++i) {
      EXPECT_EQ(s.files[i].size, model->desc().files[i].size);
      EXPECT_EQ(s.files[i].mtime_ns, model->desc().files[i].mtime_ns);
    }
    EXPECT_EQ(p.manifest().config, config_to_json(model->config()));
    EXPECT_EQ(pack_stale_reason(*model, out, {}), "");
  }
}

TEST(Pack, HeaderChecksumCoversTheSafetensorsHeader) {
  const auto model = Model::open(fixture("opt"));
  const PackSource s = pack_source_of(*model);
  ASSERT_EQ(s.files.size(), 1u);
  const std::vector<std::byte> f = read_file(s.files[0].path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(f[i]);
  EXPECT_EQ(s.files[0].header_checksum, xxh64(f.data(), 8 + n));
  EXPECT_EQ(s.format, "hf");
}

// Requantized packs: a matrix whose rows fit the group holds exactly the
// reference quantizer's bytes of the decoded source rows; everything else
// holds the source bytes.
void check_requantized(const char* name, DType target) {
  SCOPED_TRACE(std::string(name) + " -> " + std::string(dtype_name(target)));
  const auto model = Model::open(fixture(name));
  TempDir dir;
  const std::string out = dir / "pack";
  PackOptions o;
  o.weight_dtype = target;
  build_pack(*model, out, o);
  const Pack p = Pack::open(out, model.get());
  EXPECT_EQ(p.manifest().options, o);
  int n_requantized = 0, n_kept_matrices = 0;
  check_pack(*model, p, [&](const TensorInfo& src, const PackTensor& t) {
    const int64_t n = src.shape.back();
    const bool matrix = src.shape.size() == 2 && src.name != "position_embd.weight";
    const bool fits = n % dtype_info(target).block_elems == 0;
    if (!matrix || !fits) {
      EXPECT_EQ(t.dtype, src.dtype) << src.name;
      if (matrix) ++n_kept_matrices;
      return source_bytes(*model, src);
    }
    EXPECT_EQ(t.dtype, target) << src.name;
    if (t.dtype != target) return source_bytes(*model, src);
    ++n_requantized;
    const auto b = model->bytes(src);
    const size_t src_row = row_bytes(src.dtype, n), dst_row = row_bytes(target, n);
    std::vector<std::byte> want(src.n_elems() / n * dst_row);
    for (int64_t r = 0; r < src.n_elems() / n; ++r) {
      const std::vector<float> x = decode_row(src.dtype, b.data() + r * src_row, n);
      quantize_row_ref(target, x.data(), want.data() + r * dst_row, n);
    }
    return want;
  });
  EXPECT_GT(n_requantized, 0);
  if (std::string(name) == "llama" && dtype_info(target).block_elems == 32) {
    EXPECT_EQ(n_kept_matrices, model->config().n_layer);  // ffn_down: rows of 172
  }
  p.verify();
}

TEST(Pack, RequantizedMatricesEqualTheReferenceQuantizer) {
  check_requantized("opt", DType::kQ8A32);
  check_requantized("opt", DType::kQ4A64);
  check_requantized("llama", DType::kQ4A32);
  check_requantized("qwen2", DType::kQ8S32);
  check_requantized("llama-gguf/tiny-llama.gguf", DType::kQ8A64);
}

// A pack built once for the damage tests.
class DamagedPack : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::open(fixture("opt"));
    out_ = dir_ / "pack";
    build_pack(*model_, out_, {});
    manifest_ = read_json_file(out_ + "/manifest.json");
    mpath_ = out_ + "/manifest.json";
  }
  void write_manifest(const Json& j) {
    std::ofstream f(mpath_, std::ios::trunc);
    f << j.dump(1);
  }
  std::string open_error(bool with_model = false) {
    return error_of([&] { Pack::open(out_, with_model ? model_.get() : nullptr); });
  }
  TempDir dir_;
  std::unique_ptr<Model> model_;
  std::string out_, mpath_;
  Json manifest_;
};

TEST_F(DamagedPack, TamperedManifestsAreErrors) {
  struct Case {
    const char* what;
    std::function<void(Json&)> edit;
    const char* expect;
    bool with_model = false;
  };
  const std::vector<Case> cases = {
      {"unaligned tensor",
       [](Json& j) {
         j["units"][3]["tensors"][2]["offset"] =
             j["units"][3]["tensors"][2]["offset"].get<uint64_t>() + 1;
       },
       "is not a multiple of 4096"},
      {"unit past the end", [](Json& j) { j["units"][0]["offset"] = j["weights_bytes"]; },
       "runs past the end"},
      {"unit overlaps", [](Json& j) { j["units"][2]["offset"] = j["units"][1]["offset"]; },
       "overlaps"},
      {"size of dtype", [](Json& j) { j["units"][3]["tensors"][8]["dtype"] = "f32"; }, "needs"},
      {"unknown dtype", [](Json& j) { j["units"][3]["tensors"][8]["dtype"] = "f12"; },
       "unknown dtype"},
      {"same size, other dtype", [](Json& j) { j["units"][3]["tensors"][8]["dtype"] = "bf16"; },
       "is bf16 in the pack", true},
      {"other shape",
       [](Json& j) {
         j["units"][0]["tensors"][0]["shape"] = {64, 700};
       },
       "has shape [64, 700]", true},
      {"negative dim",
       [](Json& j) {
         j["units"][0]["tensors"][0]["shape"] = {-700, 64};
       },
       "bad shape"},
      {"missing units", [](Json& j) { j.erase("units"); }, "'units' is missing"},
      {"offset is a string", [](Json& j) { j["units"][1]["offset"] = "0"; }, "units[1].offset"},
      {"older version", [](Json& j) { j["version"] = 1; }, "version 1"},
      {"tensor without checksum", [](Json& j) { j["units"][1]["tensors"][0].erase("checksum"); },
       "units[1].tensors[0]"},
      {"not a pack", [](Json& j) { j["format"] = "other"; }, "not a Strata weight pack"},
      {"duplicate tensor",
       [](Json& j) { j["units"][3]["tensors"][0]["name"] = j["units"][2]["tensors"][0]["name"]; },
       "appears twice"},
      {"bad checksum text", [](Json& j) { j["units"][1]["checksum"] = "crc:12"; }, "xxh64"},
      {"length short of the last tensor",
       [](Json& j) { j["units"][3]["length"] = j["units"][3]["length"].get<uint64_t>() - 4096; },
       "outside unit"},
      {"weights_bytes",
       [](Json& j) { j["weights_bytes"] = j["weights_bytes"].get<uint64_t>() + 4096; },
       "truncated or damaged"},
      {"missing tensor for the model",
       [](Json& j) {
         j["units"][3]["tensors"].erase(j["units"][3]["tensors"].size() - 1);
         j["units"][3]["length"] = j["units"][3]["tensors"].back()["offset"].get<uint64_t>() +
                                   j["units"][3]["tensors"].back()["nbytes"].get<uint64_t>() -
                                   j["units"][3]["offset"].get<uint64_t>();
       },
       "rebuild the pack", true},
      {"other config", [](Json& j) { j["config"]["n_head"] = 8; }, "config differs", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Json j = manifest_;
    c.edit(j);
    write_manifest(j);
    const std::string msg = open_error(c.with_model);
    EXPECT_ERROR_HAS(msg, c.expect);
    EXPECT_ERROR_HAS(msg, out_);
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    // A damaged pack is not current: open_or_build_pack replaces it.
    EXPECT_NE(pack_stale_reason(*model_, out_, {}), "");
  }
  {
    std::ofstream f(mpath_, std::ios::trunc);
    f << "{\"format\": ";
  }
  EXPECT_ERROR_HAS(open_error(), mpath_);
  write_manifest(manifest_);
  EXPECT_NO_THROW(Pack::open(out_, model_.get()));
}

TEST_F(DamagedPack, TruncatedOrMissingWeightsAreErrors) {
  const std::string w = out_ + "/weights.bin";
  const auto size = fs::file_size(w);
  fs::resize_file(w, size - 4096);
  std::string msg = open_error();
  EXPECT_ERROR_HAS(msg, w);
  EXPECT_ERROR_HAS(msg, "truncated");
  fs::remove(w);
  msg = open_error();
  EXPECT_ERROR_HAS(msg, w);
  EXPECT_ERROR_HAS(msg, "incomplete");
  fs::remove(mpath_);
  msg = open_error();
  EXPECT_ERROR_HAS(msg, "no weight pack here");
}

TEST_F(DamagedPack, ChecksumMismatchIsFoundAndRebuilt) {
  const std::string w = out_ + "/weights.bin";
  const std::vector<std::byte> good = read_file(w);
  const Pack p = Pack::open(out_, model_.get());
  const PackUnit& u = p.layer(1);
  {
    std::fstream f(w, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(u.tensors.back().offset + 17));
    const char x = static_cast<char>(~static_cast<uint8_t>(good[u.tensors.back().offset + 17]));
    f.write(&x, 1);
  }
  const std::string msg = error_of([&] { p.verify(); });
  EXPECT_ERROR_HAS(msg, "unit 'blk.1'");
  EXPECT_ERROR_HAS(msg, w);
  EXPECT_ERROR_HAS(msg, "checksum");
  // verify_unit on bytes already read says the same.
  const std::vector<std::byte> bad = read_file(w);
  EXPECT_ERROR_HAS(error_of([&] { p.verify_unit(u, std::span(bad).subspan(u.offset, u.length)); }),
                   "blk.1");
  p.verify_unit(p.layer(0), std::span(bad).subspan(p.layer(0).offset, p.layer(0).length));
  // Without verification the damage is invisible; with it, the pack is rebuilt.
  EXPECT_EQ(pack_stale_reason(*model_, out_, {}), "");
  const Pack rebuilt = open_or_build_pack(*model_, out_, {}, PackOpenOptions{true});
  rebuilt.verify();
  EXPECT_TRUE(read_file(w) == good);
}

TEST(Pack, StalePacksAreRebuilt) {
  TempDir dir;
  const fs::path src = dir.path() / "model";
  fs::copy(fixture("opt"), src, fs::copy_options::recursive);
  const std::string out = dir / "pack";
  auto model = Model::open(src.string());
  EXPECT_NE(pack_stale_reason(*model, out, {}).find("no pack"), std::string::npos);
  open_or_build_pack(*model, out, {});
  const auto built_at = fs::last_write_time(out + "/weights.bin");

  // Current: used as it is.
  EXPECT_EQ(pack_stale_reason(*model, out, {}), "");
  open_or_build_pack(*model, out, {});
  EXPECT_EQ(fs::last_write_time(out + "/weights.bin"), built_at);

  // Other options: rebuilt.
  PackOptions q8;
  q8.weight_dtype = DType::kQ8A32;
  EXPECT_NE(pack_stale_reason(*model, out, q8).find("holds weights 'source'"), std::string::npos);
  Pack p = open_or_build_pack(*model, out, q8);
  EXPECT_EQ(p.manifest().options, q8);
  EXPECT_EQ(p.find_tensor("blk.0.attn_q.weight")->dtype, DType::kQ8A32);

  // A source file modified since: rebuilt with its new identity.
  const fs::path st = src / "model.safetensors";
  fs::last_write_time(st, fs::last_write_time(st) + std::chrono::seconds(10));
  model = Model::open(src.string());
  const std::string why = pack_stale_reason(*model, out, q8);
  EXPECT_NE(why.find("model.safetensors"), std::string::npos) << why;
  EXPECT_NE(why.find("modified"), std::string::npos) << why;
  p = open_or_build_pack(*model, out, q8);
  EXPECT_EQ(p.manifest().source.files[0].mtime_ns, model->desc().files[0].mtime_ns);
  EXPECT_EQ(pack_stale_reason(*model, out, q8), "");

  // A pack of another model in the directory: rebuilt.
  const auto llama = Model::open(fixture("llama"));
  EXPECT_NE(pack_stale_reason(*llama, out, {}), "");
  p = open_or_build_pack(*llama, out, {});
  EXPECT_EQ(p.manifest().units.size(), 3u + 3u);
  check_pack(*llama, p,
             [&](const TensorInfo& s, const PackTensor&) { return source_bytes(*llama, s); });
}

TEST(Pack, UnwritableDirectoryIsAnErrorAndLeavesNothing) {
  const auto model = Model::open(fixture("opt"));
  TempDir dir;
  const fs::path ro = dir.path() / "ro";
  fs::create_directories(ro);
  ::chmod(ro.c_str(), 0555);
  {
    offload_test::NoPermissionOverride guard;
    if (!offload_test::dir_is_unwritable(ro)) {
      ::chmod(ro.c_str(), 0755);
      GTEST_SKIP() << "cannot make a directory unwritable for this process";
    }
    std::string msg = error_of([&] { build_pack(*model, (ro / "pack").string(), {}); });
    EXPECT_ERROR_HAS(msg, (ro / "pack").string());
    EXPECT_ERROR_HAS(msg, "cannot create the pack directory");
    msg = error_of([&] { build_pack(*model, ro.string(), {}); });
    EXPECT_ERROR_HAS(msg, ro.string());
    EXPECT_ERROR_HAS(msg, "permission denied");
  }
  ::chmod(ro.c_str(), 0755);
  EXPECT_TRUE(dir_entries(ro).empty());
}

TEST(Pack, FullDiskIsAnErrorAndLeavesNoPack) {
  const auto model = Model::open(fixture("opt"));
  TempDir dir;
  const std::string out = dir / "pack";
  build_pack(*model, out, {});  // an old pack, replaced below
  {
    offload_test::FileSizeLimit limit(64 << 10);
    ASSERT_TRUE(limit.ok());
    const std::string msg = error_of([&] { build_pack(*model, out, {}); });
    EXPECT_ERROR_HAS(msg, out);
    EXPECT_ERROR_HAS(msg, "File too large");
  }
  EXPECT_TRUE(dir_entries(out).empty()) << "left: " << ::testing::PrintToString(dir_entries(out));

  // A real full filesystem where a small tmpfs can be mounted.
  const std::string mnt = dir / "mnt";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=128k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno)
                 << "); the file size limit covered it";
  }
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string msg = error_of([&] { build_pack(*model, mnt + "/pack", {}); });
  EXPECT_ERROR_HAS(msg, mnt + "/pack");
  EXPECT_ERROR_HAS(msg, "No space left");
  EXPECT_TRUE(dir_entries(mnt + "/pack").empty());
}

}  // namespace
}  // namespace strata
