// Building blocks: UTF-8 decoding with maximal-subpart replacement, the
// byte-level alphabet, normalization, regex splitting with HF's delimiter
// behaviours, added-token matching.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace strata::tok {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, DecodesValidSequences) {
  const std::string s = "a\xC3\xA9\xE6\x9D\xB1\xF0\x9F\xA6\x99";  // a é 東 🦙
  std::vector<char32_t> cps;
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s, i);
    ASSERT_EQ(st.kind, Utf8Step::kValid);
    cps.push_back(st.cp);
    i += st.len;
  }
  EXPECT_EQ(cps, (std::vector<char32_t>{U'a', 0xE9, 0x6771, 0x1F999}));
  EXPECT_TRUE(utf8_is_valid(s));
}

TEST(Utf8, ReplacesMaximalSubparts) {
  // Unicode's examples: each maximal invalid subpart is one U+FFFD.
  EXPECT_EQ(utf8_sanitize("\x80"), kFffd);
  EXPECT_EQ(utf8_sanitize("a\xC0\xAF"
                          "b"),
            "a" + kFffd + kFffd + "b");                             // overlong lead
  EXPECT_EQ(utf8_sanitize("\xE0\x80\x80"), kFffd + kFffd + kFffd);  // E0 needs A0..BF
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(utf8_sanitize("\xF0\x9F\xA6"
                          "x"),
            kFffd + "x");  // truncated, one subpart
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(utf8_sanitize("\xE2\x82"), kFffd);                                  // incomplete tail
  EXPECT_EQ(utf8_sanitize("ok"), "ok");
  EXPECT_FALSE(utf8_is_valid("\xC3"));
}

TEST(Utf8, CompletePrefixHoldsOnlyAnIncompleteTail) {
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\xA6"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\xA6\x99"), 6u);
  EXPECT_EQ(utf8_complete_prefix("\xC3"), 0u);
  EXPECT_EQ(utf8_complete_prefix("\x80\x80"), 2u);  // invalid bytes are complete
  EXPECT_EQ(utf8_complete_prefix("\xE2\x82"
                                 "a"),
            3u);  // broken by 'a': complete (invalid)
  EXPECT_EQ(utf8_complete_prefix(std::string(100, 'x') + "\xE6\x9D"), 100u);
}

TEST(ByteLevel, AlphabetIsABijectionOntoPrintableCodePoints) {
  const auto& alpha = byte_level_alphabet();
  std::set<char32_t> seen(alpha.begin(), alpha.end());
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(alpha[' '], 0x120u);   // Ġ
  EXPECT_EQ(alpha['\n'], 0x10Au);  // Ċ
  EXPECT_EQ(alpha['A'], U'A');
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string enc = byte_level_encode(all);
  EXPECT_TRUE(utf8_is_valid(enc));
  bool in_alphabet = false;
  EXPECT_EQ(byte_level_decode(enc, &in_alphabet), all);
  EXPECT_TRUE(in_alphabet);
  // Code points outside the alphabet are kept as their bytes.
  EXPECT_EQ(byte_level_decode("\xE6\x9D\xB1", &in_alphabet), "\xE6\x9D\xB1");
  EXPECT_FALSE(in_alphabet);
}

TEST(Normalize, ComposesAndDecomposes) {
  const std::string decomposed = "e\xCC\x81";  // e + U+0301
  const std::string composed = "\xC3\xA9";     // é
  EXPECT_EQ(normalize(decomposed, NormalForm::kNfc), composed);
  EXPECT_EQ(normalize(composed, NormalForm::kNfd), decomposed);
  EXPECT_EQ(normalize("\xEF\xAC\x81", NormalForm::kNfkc), "fi");  // ligature
  EXPECT_EQ(normalize("plain", NormalForm::kNfc), "plain");
  EXPECT_EQ(lowercase("HeLLo \xC3\x89"), "hello \xC3\xA9");
}

std::vector<std::string> split(const std::string& pattern, bool literal, SplitBehavior b,
                               bool invert, const std::string& text) {
  Regex re(pattern, literal, "test");
  std::vector<std::string> out;
  split_with(re, b, invert, text, out);
  return out;
}

using Words = std::vector<std::string>;

TEST(SplitWith, FollowsTheFiveDelimiterBehaviours) {
  const std::string t = "a-b--c-";
  EXPECT_EQ(split("-", true, SplitBehavior::kRemoved, false, t), (Words{"a", "b", "c"}));
  EXPECT_EQ(split("-", true, SplitBehavior::kIsolated, false, t),
            (Words{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(split("-", true, SplitBehavior::kMergedWithPrevious, false, t),
            (Words{"a-", "b-", "-", "c-"}));
  EXPECT_EQ(split("-", true, SplitBehavior::kMergedWithNext, false, t),
            (Words{"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(split("-", true, SplitBehavior::kContiguous, false, t),
            (Words{"a", "-", "b", "--", "c", "-"}));
  // invert: the matches are the words.
  EXPECT_EQ(split("[a-z]+", false, SplitBehavior::kRemoved, true, "ab, cd!"), (Words{"ab", "cd"}));
  EXPECT_EQ(split("x", true, SplitBehavior::kIsolated, false, ""), Words{});
}

TEST(SplitWith, Gpt2PatternOnWhitespaceAndContractions) {
  EXPECT_EQ(split(kGpt2Pattern, false, SplitBehavior::kIsolated, false, "I'll go  now\n\n ok"),
            (Words{"I", "'ll", " go", " ", " now", "\n\n", " ok"}));
  EXPECT_EQ(split(R"(\p{N})", false, SplitBehavior::kIsolated, false, "a123b"),
            (Words{"a", "1", "2", "3", "b"}));
  EXPECT_EQ(split(R"(\p{N})", false, SplitBehavior::kContiguous, false, "a123b4"),
            (Words{"a", "123", "b", "4"}));
  // Unicode classes: \p{L} covers Cyrillic and CJK; \s covers U+3000.
  EXPECT_EQ(split(kGpt2Pattern, false, SplitBehavior::kIsolated, false,
                  "\xD0\xBD\xD0\xB0 \xE6\x9D\xB1\xE3\x80\x80x"),
            (Words{"\xD0\xBD\xD0\xB0", " \xE6\x9D\xB1", "\xE3\x80\x80", "x"}));
}

TEST(SplitWith, LongWhitespaceRunDoesNotExhaustTheMatcher) {
  const std::string text = std::string(200000, ' ') + "x" + std::string(50000, '\n');
  const Words w = split(kGpt2Pattern, false, SplitBehavior::kIsolated, false, text);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].size(), 199999u);
  EXPECT_EQ(w[1], " x");
  EXPECT_EQ(w[2].size(), 50000u);
}

TEST(Regex, BadPatternNamesContextAndPattern) {
  try {
    Regex re("(unclosed", false, "file.json: pre_tokenizer.pattern");
    FAIL() << "compiled";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("file.json: pre_tokenizer.pattern"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(unclosed"), std::string::npos) << msg;
  }
}

std::vector<Fragment> fragments(const AddedTokenMatcher& m, const std::string& text) {
  std::vector<Fragment> out;
  m.split(text, out);
  return out;
}

std::string show(const std::vector<Fragment>& fr, const std::string& text) {
  std::string s;
  for (const Fragment& f : fr) {
    s += f.id >= 0 ? "[" + std::to_string(f.id) + "]"
                   : "'" + text.substr(f.begin, f.end - f.begin) + "'";
  }
  return s;
}

TEST(AddedTokens, LeftmostLongestWithStripAndSingleWord) {
  AddedTokenMatcher m;
  m.add({1, "<s>", true});
  m.add({2, "<s>x", true});  // longer token sharing a prefix
  m.add({3, "<mask>", true, /*lstrip=*/true});
  m.add({4, "<end>", true, false, /*rstrip=*/true});
  m.add({5, "cat", false, false, false, /*single_word=*/true});
  std::string t = "a<s>b<s>xc";
  EXPECT_EQ(show(fragments(m, t), t), "'a'[1]'b'[2]'c'");
  t = "hi  <mask> there";
  EXPECT_EQ(show(fragments(m, t), t), "'hi'[3]' there'");
  t = "go<end> \n next";
  EXPECT_EQ(show(fragments(m, t), t), "'go'[4]'next'");
  t = "cat concat cats cat";
  EXPECT_EQ(show(fragments(m, t), t), "[5]' concat cats '[5]");
  t = "no tokens";
  EXPECT_EQ(show(fragments(m, t), t), "'no tokens'");
  t = "";
  EXPECT_EQ(show(fragments(m, t), t), "");
}

}  // namespace
}  // namespace strata::tok
