// StreamDecoder: multi-byte characters split across tokens are held back
// until complete, never emitted in halves; the pushes add up to decode().
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/tokenizer_test_util.h"

namespace strata {
namespace {

using test::cached_tokenizer;
using test::tokenizer_data;

const std::string kText =
    "\xF0\x9F\xA6\x99 na\xC3\xAFve \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F"
    "\x8C\xAB\xEF\xB8\x8F \xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B end";  // 🦙 naïve 東京
                                                                                  // 😶‍🌫️ កាន់
                                                                                  // end

void check_stream(const Tokenizer& tok, bool add_bos) {
  const std::vector<int32_t> ids = tok.encode(kText, add_bos);
  size_t split_pieces = 0;  // tokens whose bytes are not whole characters
  StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) {
    if (!tok.is_special(id) && !tok::utf8_is_valid(tok.piece(id))) ++split_pieces;
    const std::string part = stream.push(id);
    EXPECT_TRUE(tok::utf8_is_valid(part)) << "half a character emitted after id " << id;
    EXPECT_EQ(part.find("\xEF\xBF\xBD"), std::string::npos) << "replacement char after id " << id;
    streamed += part;
  }
  streamed += stream.finish();
  EXPECT_GT(split_pieces, 0u) << "the text should need tokens that split characters";
  EXPECT_EQ(streamed, kText);
  EXPECT_EQ(streamed, tok.decode(ids, true));
}

TEST(StreamDecoder, ByteLevelBpeHoldsBackPartialCharacters) {
  check_stream(cached_tokenizer(tokenizer_data("gguf-vocab/ggml-vocab-gpt-2.gguf")), false);
}

TEST(StreamDecoder, SentencePieceByteFallback) {
  // Byte-fallback tokens <0xF0> <0x9F> ... and the leading-space strip.
  check_stream(cached_tokenizer(tokenizer_data("gguf-vocab/ggml-vocab-llama-spm.gguf")), true);
}

TEST(StreamDecoder, FinishFlushesAnIncompleteTailAsReplacement) {
  const Tokenizer& tok = cached_tokenizer(tokenizer_data("gguf-vocab/ggml-vocab-gpt-2.gguf"));
  // The first token of 🦙 is a byte-level token for a partial sequence.
  const std::vector<int32_t> ids = tok.encode("\xF0\x9F\xA6\x99", false);
  ASSERT_GE(ids.size(), 2u);
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
  // After finish() the decoder starts clean.
  std::string all;
  for (int32_t id : ids) all += stream.push(id);
  all += stream.finish();
  EXPECT_EQ(all, "\xF0\x9F\xA6\x99");
  // decode() of the partial id alone also gives U+FFFD, never invalid UTF-8.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{ids[0]}, false), "\xEF\xBF\xBD");
}

TEST(StreamDecoder, SkipsSpecialTokensUnlessAsked) {
  const Tokenizer& tok = cached_tokenizer(tokenizer_data("gguf-vocab/ggml-vocab-qwen2.gguf"));
  const std::vector<int32_t> ids = tok.encode("<|im_start|>hi<|im_end|>", false);
  StreamDecoder skip(tok);
  StreamDecoder keep(tok, false);
  std::string a, b;
  for (int32_t id : ids) {
    a += skip.push(id);
    b += keep.push(id);
  }
  a += skip.finish();
  b += keep.finish();
  EXPECT_EQ(a, "hi");
  EXPECT_EQ(b, "<|im_start|>hi<|im_end|>");
}

}  // namespace
}  // namespace strata
