// Real vocabularies against the ids Hugging Face tokenizers gives: the GGUF
// path (gpt-2, llama-bpe, qwen2, llama-spm), the tokenizer.json path (Qwen3 on
// the qwen2 vectors) and the vocab.json + merges.txt path (GPT-2 on the gpt-2
// vectors); and decode(encode(x)) == x on every input.
#include <gtest/gtest.h>

#include <thread>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace strata {
namespace {

using test::cached_tokenizer;
using test::join_ids;
using test::read_vectors;
using test::tokenizer_data;

// Checks every vector; returns how many matched.
size_t check_vectors(const Tokenizer& tok, const std::vector<test::Vector>& vectors,
                     const std::string& name) {
  size_t pass = 0;
  for (size_t i = 0; i < vectors.size(); ++i) {
    const auto& v = vectors[i];
    const std::vector<int32_t> got = tok.encode(v.text, false);
    if (got == v.ids) {
      ++pass;
    } else {
      ADD_FAILURE() << name << " vector " << i << " text '" << v.text << "'\n  expected "
                    << join_ids(v.ids) << "\n  got      " << join_ids(got);
    }
  }
  std::printf("[ vectors  ] %s: %zu/%zu match\n", name.c_str(), pass, vectors.size());
  return pass;
}

void check_round_trip(const Tokenizer& tok, const std::vector<test::Vector>& vectors) {
  for (const auto& v : vectors) {
    const std::vector<int32_t> ids = tok.encode(v.text, false);
    EXPECT_EQ(tok.decode(ids, false), v.text) << "ids " << join_ids(ids);
    const std::vector<int32_t> with_bos = tok.encode(v.text, true);
    EXPECT_EQ(tok.decode(with_bos, true), v.text) << "ids " << join_ids(with_bos);
  }
}

const std::string kGpt2 = "gguf-vocab/ggml-vocab-gpt-2.gguf";
const std::string kLlamaBpe = "gguf-vocab/ggml-vocab-llama-bpe.gguf";
const std::string kQwen2 = "gguf-vocab/ggml-vocab-qwen2.gguf";
const std::string kLlamaSpm = "gguf-vocab/ggml-vocab-llama-spm.gguf";

TEST(Vectors, Gpt2Gguf) {
  const auto vectors = read_vectors(tokenizer_data(kGpt2));
  ASSERT_EQ(vectors.size(), 46u);
  const Tokenizer& tok = cached_tokenizer(tokenizer_data(kGpt2));
  EXPECT_EQ(tok.kind(), "byte-level BPE (gpt-2 pattern)");
  EXPECT_EQ(tok.n_vocab(), 50257);
  EXPECT_EQ(check_vectors(tok, vectors, "gpt-2 (gguf)"), vectors.size());
  check_round_trip(tok, vectors);
}

TEST(Vectors, LlamaBpeGguf) {
  const auto vectors = read_vectors(tokenizer_data(kLlamaBpe));
  const Tokenizer& tok = cached_tokenizer(tokenizer_data(kLlamaBpe));
  EXPECT_EQ(tok.kind(), "byte-level BPE (llama-bpe pattern)");
  EXPECT_EQ(check_vectors(tok, vectors, "llama-bpe (gguf)"), vectors.size());
  check_round_trip(tok, vectors);
  // Llama 3 adds <|begin_of_text|> by default.
  EXPECT_TRUE(tok.add_bos_default());
  EXPECT_EQ(tok.bos_id(), 128000);
  const std::vector<int32_t> ids = tok.encode("Hello world", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 128000);
}

TEST(Vectors, Qwen2Gguf) {
  const auto vectors = read_vectors(tokenizer_data(kQwen2));
  const Tokenizer& tok = cached_tokenizer(tokenizer_data(kQwen2));
  EXPECT_EQ(tok.kind(), "byte-level BPE (qwen2 pattern)");
  EXPECT_EQ(check_vectors(tok, vectors, "qwen2 (gguf)"), vectors.size());
  check_round_trip(tok, vectors);
  EXPECT_FALSE(tok.chat_template().empty());
}

TEST(Vectors, LlamaSpmGguf) {
  const auto vectors = read_vectors(tokenizer_data(kLlamaSpm));
  const Tokenizer& tok = cached_tokenizer(tokenizer_data(kLlamaSpm));
  EXPECT_EQ(tok.kind(), "SentencePiece BPE (llama)");
  EXPECT_EQ(check_vectors(tok, vectors, "llama-spm (gguf)"), vectors.size());
  check_round_trip(tok, vectors);
  EXPECT_TRUE(tok.add_bos_default());
  EXPECT_EQ(tok.encode("Hello", true), (std::vector<int32_t>{1, 15043}));
}

TEST(Vectors, Qwen3TokenizerJsonOnQwen2Vectors) {
  const auto vectors = read_vectors(tokenizer_data(kQwen2));
  const Tokenizer& tok = cached_tokenizer(tokenizer_data("qwen3/tokenizer.json"));
  EXPECT_NE(tok.kind().find("byte-level BPE (tokenizer.json"), std::string::npos) << tok.kind();
  EXPECT_EQ(check_vectors(tok, vectors, "qwen3 (tokenizer.json)"), vectors.size());
  check_round_trip(tok, vectors);
  // tokenizer_config.json beside it: no BOS, <|im_end|> ends a turn, a template.
  EXPECT_FALSE(tok.add_bos_default());
  EXPECT_EQ(tok.bos_id(), -1);
  const std::vector<int32_t> eos = tok.eos_ids();
  EXPECT_NE(std::find(eos.begin(), eos.end(), 151645), eos.end());
  EXPECT_NE(std::find(eos.begin(), eos.end(), 151643), eos.end());
  EXPECT_NE(tok.chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(tok.pad_id(), 151643);
  EXPECT_EQ(tok.n_vocab(), 151669);
}

TEST(Vectors, Gpt2VocabMergesOnGpt2Vectors) {
  const auto vectors = read_vectors(tokenizer_data(kGpt2));
  const Tokenizer& tok = cached_tokenizer(tokenizer_data("gpt2"));
  EXPECT_NE(tok.kind().find("vocab.json + merges.txt"), std::string::npos) << tok.kind();
  EXPECT_EQ(check_vectors(tok, vectors, "gpt2 (vocab.json + merges.txt)"), vectors.size());
  check_round_trip(tok, vectors);
  EXPECT_TRUE(tok.is_special(50256));
}

// Special tokens written in the text are recognised; Qwen's chat markers.
TEST(Vectors, SpecialTokensInText) {
  const Tokenizer& gguf = cached_tokenizer(tokenizer_data(kQwen2));
  const Tokenizer& json = cached_tokenizer(tokenizer_data("qwen3/tokenizer.json"));
  const std::string text = "<|im_start|>user\nHi there<|im_end|>\n";
  for (const Tokenizer* tok : {&gguf, &json}) {
    const std::vector<int32_t> ids = tok->encode(text, false);
    ASSERT_GE(ids.size(), 4u);
    EXPECT_EQ(ids.front(), 151644);
    EXPECT_NE(std::find(ids.begin(), ids.end(), 151645), ids.end());
    EXPECT_EQ(tok->decode(ids, false), text);
    EXPECT_EQ(tok->decode(ids, true), "user\nHi there\n");
    // The same text without the markers tokenizes the rest identically.
    const std::vector<int32_t> inner = tok->encode("user\nHi there", false);
    EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.begin() + 1 + inner.size()), inner);
  }
  // Qwen3's <think> is an added token that is not special.
  const std::vector<int32_t> think = json.encode("<think>\n", false);
  ASSERT_FALSE(think.empty());
  EXPECT_EQ(think.front(), 151667);
  EXPECT_FALSE(json.is_special(151667));
  EXPECT_EQ(json.decode(think, true), "<think>\n");
}

// Identical ids through both paths on a longer, mixed text.
TEST(Vectors, GgufAndJsonAgreeOnMixedText) {
  const Tokenizer& gguf = cached_tokenizer(tokenizer_data(kQwen2));
  const Tokenizer& json = cached_tokenizer(tokenizer_data("qwen3/tokenizer.json"));
  const std::string text =
      "The quick brown fox's 12345 jumps\r\n\tover   the lazy dog — naïve café, 東京タワー, "
      "emoji 🧑‍🚀 and code: for (int i = 0; i < n; ++i) { x += y[i]; }\n\n\n  end";
  EXPECT_EQ(join_ids(gguf.encode(text, false)), join_ids(json.encode(text, false)));
  EXPECT_EQ(json.decode(json.encode(text, false), false), text);
}

// Encoding is const and safe from several threads (shared word cache).
TEST(Vectors, ConcurrentEncodingGivesTheSameIds) {
  for (const std::string& path : {kQwen2, kLlamaSpm}) {
    const auto vectors = read_vectors(tokenizer_data(path));
    const Tokenizer& tok = cached_tokenizer(tokenizer_data(path));
    std::vector<std::vector<int32_t>> expected;
    for (const auto& v : vectors) expected.push_back(tok.encode(v.text, true));
    std::vector<int> mismatches(3, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 20; ++round) {
          for (size_t i = 0; i < vectors.size(); ++i) {
            const size_t k = (i + t * 7 + round) % vectors.size();
            if (tok.encode(vectors[k].text, true) != expected[k]) ++mismatches[t];
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0})) << path;
  }
}

TEST(Vectors, InvalidUtf8ReadsAsReplacementCharacter) {
  const Tokenizer& tok = cached_tokenizer(tokenizer_data(kGpt2));
  EXPECT_EQ(tok.encode("a\xFF b\xE2\x82", false), tok.encode("a\xEF\xBF\xBD b\xEF\xBF\xBD", false));
}

}  // namespace
}  // namespace strata
