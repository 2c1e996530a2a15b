// GGUF tokenizer metadata on small hand-made files: byte-level BPE with a
// control token, SentencePiece merging by score with byte fallback, and the
// errors malformed metadata gives (naming the file and the key).
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/tokenizer_test_util.h"

namespace strata {
namespace {

using test::GgufWriter;
using test::ScratchDir;

// 256 byte tokens, "he", "ll", "hell", "hello", "<|end|>" (control).
GgufWriter gpt2_writer() {
  GgufWriter w;
  GgufWriter::StringArray tokens;
  GgufWriter::IntArray types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(tok::byte_level_encode(std::string(1, static_cast<char>(b))));
    types.push_back(1);
  }
  for (const char* t : {"he", "ll", "hell", "hello"}) {
    tokens.push_back(t);
    types.push_back(1);
  }
  tokens.push_back("<|end|>");
  types.push_back(3);
  w.set("general.architecture", std::string("llama"));
  w.set("tokenizer.ggml.model", std::string("gpt2"));
  w.set("tokenizer.ggml.pre", std::string("gpt-2"));
  w.set("tokenizer.ggml.tokens", tokens);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.merges", GgufWriter::StringArray{"h e", "l l", "he ll", "hell o"});
  w.set("tokenizer.ggml.eos_token_id", uint32_t{260});
  w.set("tokenizer.chat_template", std::string("{{ x }}"));
  return w;
}

TEST(TokenizerGguf, ByteLevelWithControlToken) {
  ScratchDir dir("gguf-bpe");
  gpt2_writer().write(dir.file("t.gguf"));
  const auto tok = Tokenizer::from_path(dir.file("t.gguf"));
  EXPECT_EQ(tok->kind(), "byte-level BPE (gpt-2 pattern)");
  EXPECT_EQ(tok->encode("hello<|end|>hel", false), (std::vector<int32_t>{259, 260, 256, 'l'}));
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{260}));
  EXPECT_TRUE(tok->is_special(260));
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_EQ(tok->encode("hello", true), (std::vector<int32_t>{259}));  // no BOS to add
  EXPECT_EQ(tok->chat_template(), "{{ x }}");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{259, 260, ' '}, true), "hello ");
  EXPECT_THROW(tok->decode(std::vector<int32_t>{261}, false), Error);
  EXPECT_THROW(tok->piece(-1), Error);
}

// SentencePiece: "ab" scores -1, "bc" scores -0.5, so in "abc" b+c merges first.
GgufWriter spm_writer() {
  GgufWriter w;
  GgufWriter::StringArray tokens = {"<unk>", "<s>", "</s>"};
  GgufWriter::IntArray types = {2, 3, 3};
  GgufWriter::FloatArray scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
    scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> normal = {
      {"\xE2\x96\x81", -2}, {"a", -3}, {"b", -3}, {"c", -3}, {"ab", -1}, {"bc", -0.5f}};
  for (const auto& [t, s] : normal) {
    tokens.push_back(t);
    types.push_back(1);
    scores.push_back(s);
  }
  w.set("tokenizer.ggml.model", std::string("llama"));
  w.set("tokenizer.ggml.tokens", tokens);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.scores", scores);
  w.set("tokenizer.ggml.bos_token_id", uint32_t{1});
  w.set("tokenizer.ggml.eos_token_id", uint32_t{2});
  w.set("tokenizer.ggml.unknown_token_id", uint32_t{0});
  return w;
}

TEST(TokenizerGguf, SentencePieceMergesByScoreWithByteFallback) {
  ScratchDir dir("gguf-spm");
  spm_writer().write(dir.file("t.gguf"));
  const auto tok = Tokenizer::from_gguf_file(dir.file("t.gguf"));
  EXPECT_EQ(tok->kind(), "SentencePiece BPE (llama)");
  const int32_t kSpace = 259, kA = 260, kB = 261, kBc = 264;
  EXPECT_EQ(tok->encode("abc", false), (std::vector<int32_t>{kSpace, kA, kBc}));
  EXPECT_EQ(tok->encode("abc", true), (std::vector<int32_t>{1, kSpace, kA, kBc}));
  // "é" has no token: its bytes.
  EXPECT_EQ(tok->encode("b\xC3\xA9", false),
            (std::vector<int32_t>{kSpace, kB, 3 + 0xC3, 3 + 0xA9}));
  // Round trip drops the prefix space again.
  EXPECT_EQ(tok->decode(tok->encode("ab c\xC3\xA9", true), true), "ab c\xC3\xA9");
  EXPECT_EQ(tok->encode("", false), std::vector<int32_t>{});
  EXPECT_EQ(tok->encode("", true), (std::vector<int32_t>{1}));
  // <s> in the text is the control token; the text after it gets its own prefix.
  EXPECT_EQ(tok->encode("<s>a", false), (std::vector<int32_t>{1, kSpace, kA}));
  EXPECT_TRUE(tok->add_bos_default());
}

std::string gguf_error(const GgufWriter& w) {
  ScratchDir dir("gguf-err");
  w.write(dir.file("bad.gguf"));
  try {
    Tokenizer::from_gguf_file(dir.file("bad.gguf"));
  } catch (const Error& e) {
    std::string msg = e.what();
    const std::string path = dir.file("bad.gguf");
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  return "no error";
}

void expect_in(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

TEST(TokenizerGguf, MalformedMetadataNamesTheKey) {
  {
    GgufWriter w;
    w.set("general.architecture", std::string("llama"));
    expect_in(gguf_error(w), "tokenizer.ggml.model");
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", std::string("t5"));
    w.set("tokenizer.ggml.tokens", GgufWriter::StringArray{"a"});
    const std::string msg = gguf_error(w);
    expect_in(msg, "tokenizer.ggml.model");
    expect_in(msg, "'t5'");
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", std::string("gpt2"));
    w.set("tokenizer.ggml.tokens", GgufWriter::StringArray{"a", "b"});
    w.set("tokenizer.ggml.token_type", GgufWriter::IntArray{1});
    w.set("tokenizer.ggml.merges", GgufWriter::StringArray{});
    const std::string msg = gguf_error(w);
    expect_in(msg, "tokenizer.ggml.token_type has 1 entries");
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", std::string("gpt2"));
    w.set("tokenizer.ggml.tokens", GgufWriter::StringArray{"a", "b"});
    w.set("tokenizer.ggml.merges", GgufWriter::StringArray{});
    w.set("tokenizer.ggml.eos_token_id", uint32_t{7});
    const std::string msg = gguf_error(w);
    expect_in(msg, "tokenizer.ggml.eos_token_id = 7");
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", std::string("gpt2"));
    w.set("tokenizer.ggml.pre", std::string("martian"));
    w.set("tokenizer.ggml.tokens", GgufWriter::StringArray{"a", "b"});
    w.set("tokenizer.ggml.merges", GgufWriter::StringArray{});
    expect_in(gguf_error(w), "tokenizer.ggml.pre 'martian'");
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", std::string("gpt2"));
    w.set("tokenizer.ggml.pre", std::string("gpt-2"));
    w.set("tokenizer.ggml.tokens", GgufWriter::StringArray{"a", "b"});
    w.set("tokenizer.ggml.merges", GgufWriter::StringArray{"a b", "ab"});
    expect_in(gguf_error(w), "tokenizer.ggml.merges[1] = 'ab'");
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", std::string("gpt2"));
    w.set("tokenizer.ggml.pre", std::string("gpt-2"));
    w.set("tokenizer.ggml.tokens", GgufWriter::StringArray{"a", "b"});
    expect_in(gguf_error(w), "tokenizer.ggml.merges is missing");
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", std::string("llama"));
    w.set("tokenizer.ggml.tokens", GgufWriter::StringArray{"a", "b"});
    w.set("tokenizer.ggml.scores", GgufWriter::FloatArray{0, 0, 0});
    expect_in(gguf_error(w), "tokenizer.ggml.scores has 3 entries");
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", std::string("llama"));
    w.set("tokenizer.ggml.tokens", GgufWriter::StringArray{});
    expect_in(gguf_error(w), "tokenizer.ggml.tokens is missing or empty");
  }
}

}  // namespace
}  // namespace strata
