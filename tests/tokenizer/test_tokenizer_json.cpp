// tokenizer.json features on small hand-made files whose ids can be worked
// out by hand: merge priority by rank, added tokens, templates, config files
// beside tokenizer.json, character BPE with byte fallback (Llama 2 style),
// Metaspace, NFC; and the errors malformed files give.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/tokenizer_test_util.h"

namespace strata {
namespace {

using json = nlohmann::json;
using test::ScratchDir;

// Byte-level BPE: ids 0..255 are the bytes (in GPT-2's alphabet), then merges.
json byte_level_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b)
    vocab[tok::byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"},   {"he", "ll"}, {"hell", "o"},  {"Ġ", "w"},
      {"o", "r"}, {"Ġw", "or"}, {"l", "d"},   {"Ġwor", "ld"}, {"e", "l"}};
  json merge_list = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next++;
    merge_list.push_back(a + " " + b);
  }
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<|bos|>"}, {"special", true}},
                                   {{"id", 301}, {"content", "<|eos|>"}, {"special", true}},
                                   {{"id", 302},
                                    {"content", "[tool]"},
                                    {"special", false},
                                    {"lstrip", true},
                                    {"rstrip", true}}});
  return j;
}

std::unique_ptr<Tokenizer> load(const ScratchDir& dir, const json& j) {
  dir.write("tokenizer.json", j.dump());
  return Tokenizer::from_json_file(dir.file("tokenizer.json"));
}

std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

TEST(TokenizerJson, MergesByRankNotLeftToRight) {
  ScratchDir dir("merge");
  const auto tok = load(dir, byte_level_tokenizer());
  EXPECT_EQ(tok->encode("hello world", false), (std::vector<int32_t>{259, 264}));
  // "ell": (e,l) has rank 9, (l,l) rank 1, so l+l merges first: e | ll.
  EXPECT_EQ(tok->encode("ell", false), (std::vector<int32_t>{'e', 257}));
  // Unknown to the merges: bytes.
  EXPECT_EQ(tok->encode("xyz", false), bytes_of("xyz"));
  EXPECT_EQ(tok->encode("caf\xC3\xA9", false), bytes_of("caf\xC3\xA9"));
  EXPECT_EQ(tok->decode(tok->encode("hello world caf\xC3\xA9\n", false), false),
            "hello world caf\xC3\xA9\n");
  EXPECT_EQ(tok->encode("", false), std::vector<int32_t>{});
  EXPECT_EQ(tok->n_vocab(), 303);
  EXPECT_EQ(tok->piece(260), " w");
  EXPECT_EQ(tok->token_text(260), "\xC4\xA0w");  // Ġw
  EXPECT_EQ(tok->find_token("hello"), 259);
  EXPECT_FALSE(tok->find_token("nope").has_value());
}

TEST(TokenizerJson, AddedTokensSpecialAndNot) {
  ScratchDir dir("added");
  const auto tok = load(dir, byte_level_tokenizer());
  EXPECT_EQ(tok->encode("<|bos|>hello<|eos|>", false), (std::vector<int32_t>{300, 259, 301}));
  // lstrip / rstrip on [tool] swallow the spaces around it.
  EXPECT_EQ(tok->encode("hello  [tool]  world", false),
            (std::vector<int32_t>{259, 302, 'w', 261, 263}));
  EXPECT_TRUE(tok->is_special(300));
  EXPECT_FALSE(tok->is_special(302));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{300, 259, 302, 301}, true), "hello[tool]");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{300, 259, 302, 301}, false),
            "<|bos|>hello[tool]<|eos|>");
  // No template and no config: nothing is added for BOS.
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_EQ(tok->encode("hello", true), (std::vector<int32_t>{259}));
}

TEST(TokenizerJson, TemplateAddsBosAndConfigOverridesDefaults) {
  ScratchDir dir("template");
  json j = byte_level_tokenizer();
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array(
           {{{"type", "ByteLevel"}},
            {{"type", "TemplateProcessing"},
             {"single", json::array({{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
             {"special_tokens",
              {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {300}}, {"tokens", {"<|bos|>"}}}}}}}})}};
  {
    const auto tok = load(dir, j);
    EXPECT_TRUE(tok->add_bos_default());
    EXPECT_EQ(tok->bos_id(), 300);
    EXPECT_EQ(tok->encode("hello", true), (std::vector<int32_t>{300, 259}));
    EXPECT_EQ(tok->encode("hello", false), (std::vector<int32_t>{259}));
    EXPECT_EQ(tok->chat_template(), "");
  }
  dir.write("tokenizer_config.json",
            json{{"add_bos_token", false},
                 {"bos_token", {{"content", "<|bos|>"}, {"__type", "AddedToken"}}},
                 {"eos_token", "<|eos|>"},
                 {"chat_template", "{{ messages }}"}}
                .dump());
  dir.write("generation_config.json", json{{"eos_token_id", {301, 259}}}.dump());
  const auto tok = load(dir, j);
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_EQ(tok->chat_template(), "{{ messages }}");
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{301, 259}));
}

TEST(TokenizerJson, ChatTemplateFromJinjaFile) {
  ScratchDir dir("jinja");
  dir.write("chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const auto tok = load(dir, byte_level_tokenizer());
  EXPECT_EQ(tok->chat_template(), "{% for m in messages %}{{ m.content }}{% endfor %}");
}

// Llama 2 style: character BPE over U+2581 text, byte fallback, Strip decoder.
json char_bpe_tokenizer(bool metaspace_pre_tokenizer) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  vocab["\xE2\x96\x81"] = 259;  // ▁
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab["\xE2\x96\x81h"] = 262;
  vocab["\xE2\x96\x81hi"] = 263;
  json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", json::array({json::array({"▁", "h"}), json::array({"▁h", "i"})})},
                {"byte_fallback", true},
                {"unk_token", "<unk>"}};
  if (metaspace_pre_tokenizer) {
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}};
    j["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         json::array(
             {{{"type", "ByteFallback"}},
              {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}}})}};
  } else {
    j["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers",
         json::array({{{"type", "Prepend"}, {"prepend", "▁"}},
                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}};
    j["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  }
  j["added_tokens"] = json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 2}, {"content", "</s>"}, {"special", true}}});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  return j;
}

TEST(TokenizerJson, CharacterBpeWithByteFallback) {
  for (bool metaspace : {false, true}) {
    SCOPED_TRACE(metaspace ? "Metaspace pre-tokenizer" : "Prepend/Replace normalizer");
    ScratchDir dir("charbpe");
    const auto tok = load(dir, char_bpe_tokenizer(metaspace));
    EXPECT_NE(tok->kind().find("BPE with byte fallback"), std::string::npos) << tok->kind();
    EXPECT_EQ(tok->encode("hi hi", false), (std::vector<int32_t>{263, 263}));
    // é is not in the vocabulary: its two bytes.
    const std::vector<int32_t> ids = tok->encode("hi \xC3\xA9", true);
    EXPECT_EQ(ids, (std::vector<int32_t>{1, 263, 259, 3 + 0xC3, 3 + 0xA9}));
    EXPECT_EQ(tok->decode(ids, true), "hi \xC3\xA9");
    EXPECT_EQ(tok->decode(ids, false), "<s> hi \xC3\xA9");
    EXPECT_EQ(tok->piece(3 + 0x41), "A");
    EXPECT_EQ(tok->piece(263), " hi");
  }
}

TEST(TokenizerJson, NfcNormalizerComposesBeforeMerging) {
  ScratchDir dir("nfc");
  json j = byte_level_tokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  const auto tok = load(dir, j);
  EXPECT_EQ(tok->encode("cafe\xCC\x81", false), tok->encode("caf\xC3\xA9", false));
  EXPECT_NE(tok->kind().find("NFC"), std::string::npos) << tok->kind();
}

TEST(TokenizerJson, SplitAndDigitsPreTokenizers) {
  ScratchDir dir("split");
  json j = byte_level_tokenizer();
  // Digits one by one, then split off "-" (removed), then bytes.
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Digits"}, {"individual_digits", true}},
                    {{"type", "Split"},
                     {"pattern", {{"String", "-"}}},
                     {"behavior", "Removed"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}})}};
  const auto tok = load(dir, j);
  // Words: " hello", " 1", " 2", " world" (ByteLevel prefixes every piece with a space).
  EXPECT_EQ(tok->encode("hello-12-world", false),
            (std::vector<int32_t>{' ', 259, ' ', '1', ' ', '2', 264}));
}

std::string error_of(const ScratchDir& dir, const std::string& content) {
  dir.write("tokenizer.json", content);
  try {
    Tokenizer::from_json_file(dir.file("tokenizer.json"));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void expect_error(const std::string& msg, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(TokenizerJson, MalformedFilesNameTheFileAndField) {
  ScratchDir dir("errors");
  const std::string path = dir.file("tokenizer.json");
  expect_error(error_of(dir, "{\"model\": "), {path, "not valid JSON"});
  expect_error(error_of(dir, "[1, 2]"), {path, "top level"});
  expect_error(error_of(dir, "{}"), {path, "model is missing"});
  expect_error(error_of(dir, R"({"model": {"type": "Unigram", "vocab": {}}})"),
               {path, "model.type", "Unigram"});
  expect_error(error_of(dir, R"({"model": {"type": "BPE", "vocab": {"a": -4}}})"),
               {path, "model.vocab['a']", "-4"});
  expect_error(error_of(dir, R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}}})"),
               {path, "model.vocab", "id 0"});
  // A few tokens with ids in the millions: refused before anything the size
  // of the id range is allocated. Ids with a few gaps are fine.
  expect_error(error_of(dir, R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 7846761}}})"),
               {path, "model.vocab", "2 tokens", "7846761"});
  expect_error(error_of(dir, R"({"model": {"type": "BPE", "vocab": {"a": 0}},
                                 "added_tokens": [{"id": 1028, "content": "<s>"}]})"),
               {path, "model.vocab", "2 tokens", "1028"});
  dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}},
                                 "added_tokens": [{"id": 1027, "content": "<s>"}]})");
  EXPECT_EQ(Tokenizer::from_json_file(dir.file("tokenizer.json"))->n_vocab(), 1028);
  expect_error(
      error_of(
          dir,
          R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", "a c"]}})"),
      {path, "model.merges[1]", "'c'"});
  expect_error(error_of(dir, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}})"),
               {path, "model.merges[0]"});
  expect_error(
      error_of(
          dir,
          R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "BertPreTokenizer"}]}})"),
      {path, "pre_tokenizer.pretokenizers[0].type", "BertPreTokenizer"});
  expect_error(
      error_of(
          dir,
          R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"}})"),
      {path, "pre_tokenizer.pattern", "cannot compile regex"});
  expect_error(
      error_of(
          dir,
          R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"}})"),
      {path, "pre_tokenizer.behavior", "Sideways"});
  expect_error(
      error_of(dir,
               R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": [{"id": 1}]})"),
      {path, "added_tokens[0].content"});
  expect_error(
      error_of(
          dir,
          R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}}})"),
      {path, "post_processor.special_tokens['<s>'].ids[0]", "7"});
  expect_error(
      error_of(dir, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "unk_token": "<unk>"}})"),
      {path, "model.unk_token", "<unk>"});
  EXPECT_THROW(Tokenizer::from_json_file(dir.file("missing.json")), Error);
}

TEST(TokenizerJson, FromPathDispatch) {
  ScratchDir dir("path");
  dir.write("tokenizer.json", byte_level_tokenizer().dump());
  EXPECT_EQ(Tokenizer::from_path(dir.path())->encode("hello", false), (std::vector<int32_t>{259}));
  EXPECT_EQ(Tokenizer::from_path(dir.file("tokenizer.json"))->n_vocab(), 303);
  ScratchDir empty("empty");
  expect_error(
      [&] {
        try {
          Tokenizer::from_path(empty.path());
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string("no error");
      }(),
      {empty.path(), "no tokenizer.json"});
  EXPECT_THROW(Tokenizer::from_path(empty.file("nothing-here")), Error);
}

}  // namespace
}  // namespace strata
