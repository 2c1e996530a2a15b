// Stopping: EOS ids, max_new_tokens, and stop strings that span several
// tokens or end inside a multi-byte character, on the fixture tokenizer.
#include <gtest/gtest.h>

#include "generate/stop.h"
#include "generate/generate_test_util.h"
#include "tokenizer/unicode.h"

namespace strata {
namespace {

using test::fixture_tokenizer;

struct Expect {
  size_t n_tokens;   // tokens pushed when it stops
  std::string text;  // the completion
};

// Where pushing encode(text) must stop for `stop`: at the first token after
// which the decoded text contains it, with the text cut before it.
Expect expected_stop(const Tokenizer& tok, const std::vector<int32_t>& ids,
                     const std::string& stop) {
  for (size_t k = 1; k <= ids.size(); ++k) {
    const std::string so_far =
        tok.decode(std::span<const int32_t>(ids.data(), k), /*skip_special=*/true);
    // Only whole characters count: a trailing U+FFFD is a partial character.
    std::string complete = so_far;
    if (complete.size() >= 3 && complete.compare(complete.size() - 3, 3, "\xEF\xBF\xBD") == 0) {
      complete.resize(complete.size() - 3);
    }
    const size_t pos = complete.find(stop);
    if (pos != std::string::npos) return {k, complete.substr(0, pos)};
  }
  return {0, ""};
}

TEST(Stop, StopStringAcrossTokenBoundaries) {
  const Tokenizer& tok = fixture_tokenizer();
  const std::string text = "The quick brown fox jumps over the lazy dog, again and again.";
  const std::vector<int32_t> ids = tok.encode(text, false);
  for (const std::string stop : {"k brown f", "over the", "dog,", "again.", "e"}) {
    const Expect want = expected_stop(tok, ids, stop);
    ASSERT_GT(want.n_tokens, 0u) << stop;
    StopChecker sc(tok, tok.eos_ids(), {stop}, 1000);
    size_t pushed = 0;
    for (int32_t id : ids) {
      ++pushed;
      if (sc.push(id) != FinishReason::kNone) break;
    }
    EXPECT_EQ(sc.reason(), FinishReason::kStop) << stop;
    EXPECT_EQ(pushed, want.n_tokens) << stop;
    EXPECT_EQ(sc.text(), want.text) << stop;
    EXPECT_EQ(sc.text(), text.substr(0, text.find(stop))) << stop;
    EXPECT_EQ(sc.ids().size(), pushed) << "every sampled id is kept";
  }
}

TEST(Stop, AStopStringReallySpansTokens) {
  // Guards the test above: "k brown f" is not inside any one token.
  const Tokenizer& tok = fixture_tokenizer();
  const std::vector<int32_t> ids = tok.encode("The quick brown fox", false);
  for (int32_t id : ids) EXPECT_EQ(tok.piece(id).find("k brown f"), std::string::npos);
  EXPECT_GE(ids.size(), 3u);
}

TEST(Stop, EarliestStopStringWins) {
  const Tokenizer& tok = fixture_tokenizer();
  const std::string text = "one two three four five";
  StopChecker sc(tok, {}, {"four", "two", "zzz"}, 1000);
  for (int32_t id : tok.encode(text, false)) {
    if (sc.push(id) != FinishReason::kNone) break;
  }
  EXPECT_EQ(sc.reason(), FinishReason::kStop);
  EXPECT_EQ(sc.text(), "one ");
}

TEST(Stop, StopStringEndingInAMultiByteCharacter) {
  const Tokenizer& tok = fixture_tokenizer();
  const std::string text = "llama \xF0\x9F\xA6\x99 farm";  // llama 🦙 farm
  const std::vector<int32_t> ids = tok.encode(text, false);
  size_t partial = 0;
  for (int32_t id : ids) partial += tok::utf8_is_valid(tok.piece(id)) ? 0 : 1;
  ASSERT_GT(partial, 0u) << "the emoji should need byte tokens in this small vocabulary";
  StopChecker sc(tok, {}, {"\xF0\x9F\xA6\x99"}, 1000);
  for (int32_t id : ids) {
    if (sc.push(id) != FinishReason::kNone) break;
  }
  EXPECT_EQ(sc.reason(), FinishReason::kStop);
  EXPECT_EQ(sc.text(), "llama ");
}

TEST(Stop, EosStopsWithoutText) {
  const Tokenizer& tok = fixture_tokenizer();
  const std::vector<int32_t> eos = tok.eos_ids();
  ASSERT_FALSE(eos.empty());
  const std::vector<int32_t> ids = tok.encode("hello there", false);
  StopChecker sc(tok, eos, {}, 1000);
  for (int32_t id : ids) EXPECT_EQ(sc.push(id), FinishReason::kNone);
  EXPECT_EQ(sc.push(eos.back()), FinishReason::kStop);
  EXPECT_EQ(sc.text(), "hello there");
  EXPECT_EQ(sc.ids().size(), ids.size() + 1);
  EXPECT_EQ(sc.ids().back(), eos.back());
}

TEST(Stop, EosIgnoredWhenNotListed) {
  const Tokenizer& tok = fixture_tokenizer();
  StopChecker sc(tok, {}, {}, 3);
  EXPECT_EQ(sc.push(tok.eos_ids().front()), FinishReason::kNone);
  EXPECT_EQ(sc.push(5), FinishReason::kNone);
  EXPECT_EQ(sc.push(6), FinishReason::kLength);
}

TEST(Stop, LengthAfterMaxNewTokens) {
  const Tokenizer& tok = fixture_tokenizer();
  const std::vector<int32_t> ids = tok.encode("a b c d e f g", false);
  ASSERT_GE(ids.size(), 4u);
  StopChecker sc(tok, tok.eos_ids(), {"zzz"}, 4);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sc.push(ids[i]), FinishReason::kNone);
  EXPECT_EQ(sc.push(ids[3]), FinishReason::kLength);
  EXPECT_EQ(sc.text(), tok.decode(std::span<const int32_t>(ids.data(), 4), true));
  EXPECT_EQ(std::string(finish_reason_name(sc.reason())), "length");
  EXPECT_EQ(std::string(finish_reason_name(FinishReason::kStop)), "stop");
}

TEST(Stop, LengthFlushesAPartialCharacter) {
  // Cut inside 🦙: the held-back bytes come out as U+FFFD.
  const Tokenizer& tok = fixture_tokenizer();
  const std::vector<int32_t> ids = tok.encode("\xF0\x9F\xA6\x99", false);
  ASSERT_GE(ids.size(), 2u);
  StopChecker sc(tok, {}, {}, 1);
  EXPECT_EQ(sc.push(ids[0]), FinishReason::kLength);
  EXPECT_EQ(sc.text(), "\xEF\xBF\xBD");
}

TEST(Stop, StopStringFoundInTheFirstToken) {
  const Tokenizer& tok = fixture_tokenizer();
  const std::vector<int32_t> ids = tok.encode("hello", false);
  StopChecker sc(tok, {}, {"h"}, 10);
  EXPECT_EQ(sc.push(ids[0]), FinishReason::kStop);
  EXPECT_EQ(sc.text(), "");
}

}  // namespace
}  // namespace strata
