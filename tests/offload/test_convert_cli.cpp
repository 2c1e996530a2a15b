// `strata convert` end to end: a pack written, found current, rebuilt for
// other options and verified; an unwritable directory, a full disk and bad
// flags end with exit status 1, one line on stderr, and no manifest.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>

#include "io/file_writers.h"
#include "model/model.h"
#include "offload/pack.h"
#include "offload/offload_test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using offload_test::count_lines;
using offload_test::run_strata;
using test_files::TempDir;

std::string fixture(const std::string& name) {
  return std::string(STRATA_TEST_DATA) + "/models/" + name;
}

void expect_one_error_line(const offload_test::Run& r, const std::string& part) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("strata: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << "'" << part << "' not in: " << r.err;
}

TEST(ConvertCli, WritesFindsCurrentRebuildsAndVerifies) {
  TempDir dir;
  const std::string out = dir / "pack";
  auto r = run_strata({"convert", "--model", fixture("opt"), "--out", out}, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("wrote 4 units (2 layers)"), std::string::npos) << r.out;
  const auto model = Model::open(fixture("opt"));
  EXPECT_EQ(Pack::open(out, model.get()).manifest().options.to_string(), "source");

  r = run_strata({"convert", "--model", fixture("opt"), "--out", out}, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("current"), std::string::npos) << r.out;

  r = run_strata({"convert", "--model", fixture("opt"), "--out", out, "--weights", "q8", "--group",
                  "32", "--verify"},
                 dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("q8a32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checksums verified"), std::string::npos) << r.out;
  const Pack p = Pack::open(out, model.get());
  EXPECT_EQ(p.manifest().options.to_string(), "q8a32");
  EXPECT_EQ(p.find_tensor("blk.1.ffn_down.weight")->dtype, DType::kQ8A32);

  r = run_strata({"convert", "--model", fixture("opt"), "--out", out, "--weights", "q8", "--group",
                  "32", "--force"},
                 dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote"), std::string::npos) << r.out;
}

TEST(ConvertCli, GgufModel) {
  TempDir dir;
  const std::string out = dir / "pack";
  const auto r = run_strata({"convert", "--model", fixture("llama-gguf/tiny-llama.gguf"), "--out",
                             out, "--weights", "q4"},
                            dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto model = Model::open(fixture("llama-gguf/tiny-llama.gguf"));
  EXPECT_EQ(Pack::open(out, model.get()).manifest().options.to_string(), "q4a64");
}

TEST(ConvertCli, UnwritableDirectory) {
  TempDir dir;
  const fs::path ro = dir.path() / "ro";
  fs::create_directories(ro);
  ::chmod(ro.c_str(), 0555);
  const std::string out = (ro / "pack").string();
  const auto r = run_strata({"convert", "--model", fixture("opt"), "--out", out},
                            dir.path().string(), offload_test::drop_permission_override);
  ::chmod(ro.c_str(), 0755);
  if (r.exit_code == 0) GTEST_SKIP() << "cannot make a directory unwritable for the strata process";
  expect_one_error_line(r, out);
  EXPECT_FALSE(fs::exists(out + "/manifest.json"));
  EXPECT_TRUE(fs::is_empty(ro));
}

TEST(ConvertCli, FullDisk) {
  TempDir dir;
  const std::string out = dir / "pack";
  const auto r = run_strata({"convert", "--model", fixture("opt"), "--out", out},
                            dir.path().string(), offload_test::limit_file_size_64k);
  expect_one_error_line(r, out);
  EXPECT_FALSE(fs::exists(out + "/manifest.json"));
  EXPECT_TRUE(fs::is_empty(out)) << "partial files left in " << out;
}

TEST(ConvertCli, BadFlagsAndModels) {
  TempDir dir;
  const std::string out = dir / "pack";
  auto r = run_strata({"convert", "--model", fixture("opt"), "--out", out, "--weights", "q5"},
                      dir.path().string());
  expect_one_error_line(r, "--weights q5");
  r = run_strata(
      {"convert", "--model", fixture("opt"), "--out", out, "--weights", "q4s", "--group", "64"},
      dir.path().string());
  expect_one_error_line(r, "--group 64");
  r = run_strata({"convert", "--model", dir / "missing", "--out", out}, dir.path().string());
  expect_one_error_line(r, dir / "missing");
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace strata
