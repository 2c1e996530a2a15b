// `strata tokenize`: ids on one line, --pieces, --no-bos, GGUF and model
// directory paths, and a one-line error with exit code 1 for a bad path.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "support/run_cli.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace strata {
namespace {

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

// Runs strata; out holds what it printed on stdout and stderr.
struct CliRun {
  int code = -1;
  std::string out;
};
CliRun run_strata(const std::vector<std::string>& args) {
  const test::ScratchDir dir("strata-cli");
  const test::CliResult r = test::run_strata(args, dir.path());
  return {r.exit_code, r.out + r.err};
}
CliRun run_strata(const std::string& args) {
  return run_strata(test::split_args(args));
}

const std::string kGpt2 = test::tokenizer_data("gguf-vocab/ggml-vocab-gpt-2.gguf");
const std::string kLlamaBpe = test::tokenizer_data("gguf-vocab/ggml-vocab-llama-bpe.gguf");

TEST(CliTokenize, PrintsIdsOnOneLine) {
  const CliRun r = run_strata("tokenize --model " + quote(kGpt2) + " --text 'Hello world'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "15496 995\n");
}

TEST(CliTokenize, AddsBosWhereTheModelDoesUnlessNoBos) {
  CliRun r = run_strata("tokenize --model " + quote(kLlamaBpe) + " --text 'Hello world'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "128000 9906 1917\n");
  r = run_strata("tokenize --model " + quote(kLlamaBpe) + " --text 'Hello world' --no-bos");
  EXPECT_EQ(r.out, "9906 1917\n");
}

TEST(CliTokenize, PiecesShowEachTokenEscaped) {
  // "Hi", a newline and a llama emoji, whose bytes are split across tokens.
  const CliRun r =
      run_strata({"tokenize", "--model", kGpt2, "--pieces", "--text", "Hi\n\xF0\x9F\xA6\x99"});
  EXPECT_EQ(r.code, 0) << r.out;
  const Tokenizer& tok = test::cached_tokenizer(kGpt2);
  const std::vector<int32_t> ids = tok.encode("Hi\n\xF0\x9F\xA6\x99", false);
  ASSERT_EQ(ids.size(), 5u);
  // First line: ids; then one line per token: id, tab, quoted piece.
  std::string expected = test::join_ids(ids) + "\n";
  expected += std::to_string(ids[0]) + "\t\"Hi\"\n";
  expected += std::to_string(ids[1]) + "\t\"\\n\"\n";
  for (size_t i = 2; i < ids.size(); ++i) {
    std::string esc;
    for (unsigned char c : tok.piece(ids[i])) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      esc += hex;
    }
    expected += std::to_string(ids[i]) + "\t\"" + esc + "\"\n";
  }
  EXPECT_EQ(r.out, expected);
}

TEST(CliTokenize, ReadsAModelDirectory) {
  const CliRun r = run_strata("tokenize --model " + quote(test::tokenizer_data("qwen3")) +
                                 " --text 'Hello world'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "9707 1879\n");
}

TEST(CliTokenize, BadPathIsOneLineAndExitCodeOne) {
  const CliRun r = run_strata("tokenize --model /nonexistent/model.gguf --text hi");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/model.gguf"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;
}

}  // namespace
}  // namespace strata
