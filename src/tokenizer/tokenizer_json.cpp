// Tokenizer from Hugging Face files: tokenizer.json (model BPE; normalizer,
// pre_tokenizer, decoder, post_processor, added_tokens), tokenizer_config.json
// and generation_config.json beside it, or GPT-2-style vocab.json +
// merges.txt (turned into the equivalent tokenizer.json first, so that both go
// through one builder; the normalizer, pre-tokenizer, decoder and
// post-processor are parsed in json_pipeline.cpp). A field that is missing, of
// the wrong type, or names a
// token that does not exist gives an Error naming the file and the field.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/json_pipeline.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace strata {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using tok::TokenKind;
using Fields = tok::JsonFields;
using tok::DecoderOp;
using tok::DecoderSpec;

constexpr int64_t kMaxUnusedIds = 1024;  // beyond as many unused ids as used ones

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A token named in tokenizer_config.json: "text" or {"content": "text", ...}.
std::string config_token(const Fields& f, const json& cfg, const char* key) {
  const json* v = f.find(cfg, key);
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return f.string(*v, "content", std::string(key) + ".content");
  f.bad(key, "is neither a string nor an object with content");
}

struct HfConfig {
  std::optional<bool> add_bos_token;
  std::optional<bool> add_prefix_space;
  std::string bos, eos, pad, unk;
  std::vector<std::string> additional_special;
  std::string chat_template;
  json added_tokens_decoder;  // {"id": {content, special, ...}} or null
  std::vector<int64_t> generation_eos;
};

HfConfig read_config(const fs::path& dir) {
  HfConfig c;
  const fs::path cfg_path = dir / "tokenizer_config.json";
  if (fs::exists(cfg_path)) {
    const Fields f(cfg_path.string());
    const json cfg = read_json(cfg_path.string());
    if (!cfg.is_object()) f.bad("the top level", "is not an object");
    if (f.find(cfg, "add_bos_token"))
      c.add_bos_token = f.boolean(cfg, "add_bos_token", "add_bos_token", false);
    if (f.find(cfg, "add_prefix_space")) {
      c.add_prefix_space = f.boolean(cfg, "add_prefix_space", "add_prefix_space", false);
    }
    c.bos = config_token(f, cfg, "bos_token");
    c.eos = config_token(f, cfg, "eos_token");
    c.pad = config_token(f, cfg, "pad_token");
    c.unk = config_token(f, cfg, "unk_token");
    if (const json* extra = f.find(cfg, "additional_special_tokens"); extra && extra->is_array()) {
      for (const json& e : *extra) {
        if (e.is_string())
          c.additional_special.push_back(e.get<std::string>());
        else if (e.is_object() && e.contains("content") && e["content"].is_string())
          c.additional_special.push_back(e["content"].get<std::string>());
      }
    }
    if (const json* t = f.find(cfg, "chat_template")) {
      if (t->is_string()) {
        c.chat_template = t->get<std::string>();
      } else if (t->is_array()) {
        // [{"name": ..., "template": ...}]: the one named "default", else the first.
        for (size_t i = 0; i < t->size(); ++i) {
          const json& e = (*t)[i];
          const std::string field = fmt::format("chat_template[{}]", i);
          const std::string name = f.string_or(e, "name", field + ".name", "");
          const std::string body = f.string(e, "template", field + ".template");
          if (c.chat_template.empty() || name == "default") c.chat_template = body;
        }
      } else {
        f.bad("chat_template", "is neither a string nor a list of named templates");
      }
    }
    if (const json* d = f.find(cfg, "added_tokens_decoder"); d && d->is_object()) {
      c.added_tokens_decoder = *d;
    }
  }
  const fs::path jinja = dir / "chat_template.jinja";
  if (c.chat_template.empty() && fs::exists(jinja)) c.chat_template = read_text(jinja.string());
  const fs::path gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path)) {
    const Fields f(gen_path.string());
    const json gen = read_json(gen_path.string());
    if (const json* e = f.find(gen, "eos_token_id")) {
      if (e->is_array()) {
        for (size_t i = 0; i < e->size(); ++i) {
          c.generation_eos.push_back(f.integer((*e)[i], fmt::format("eos_token_id[{}]", i)));
        }
      } else {
        c.generation_eos.push_back(f.integer(*e, "eos_token_id"));
      }
    }
  }
  return c;
}

std::unique_ptr<Tokenizer> build(const json& root, const std::string& file, const fs::path& dir,
                                 const std::string& origin) {
  const Fields f(file);
  if (!root.is_object()) f.bad("the top level", "is not an object");
  auto impl = std::make_unique<tok::TokenizerImpl>();
  impl->source = file;
  const HfConfig cfg = read_config(dir);

  // Model and vocabulary.
  const json& model = f.object(root, "model", "model");
  const std::string model_type = f.string_or(model, "type", "model.type", "BPE");
  if (model_type != "BPE") {
    f.bad("model.type", fmt::format("'{}' is not supported (supported: BPE)", model_type));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!f.string_or(model, key, std::string("model.") + key, "").empty()) {
      f.bad(std::string("model.") + key, "is set, which is not supported");
    }
  }
  if (const json* d = f.find(model, "dropout"); d && d->is_number() && d->get<double>() > 0) {
    spdlog::warn("tokenizer: {}: model.dropout {} ignored; encoding is deterministic", file,
                 d->get<double>());
  }
  const json& vocab_json = f.object(model, "vocab", "model.vocab");
  int64_t max_id = -1;
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    const int32_t id = f.token_id(it.value(), fmt::format("model.vocab['{}']", it.key()));
    max_id = std::max<int64_t>(max_id, id);
  }
  const json* added_json = f.find(root, "added_tokens");
  if (added_json && !added_json->is_array()) f.bad("added_tokens", "is not an array");
  std::vector<tok::AddedToken> added;
  if (added_json) {
    for (size_t i = 0; i < added_json->size(); ++i) {
      const json& a = (*added_json)[i];
      const std::string field = fmt::format("added_tokens[{}]", i);
      if (!a.is_object()) f.bad(field, "is not an object");
      tok::AddedToken t;
      const json* id = f.find(a, "id");
      if (!id) f.bad(field + ".id", "is missing");
      t.id = f.token_id(*id, field + ".id");
      t.content = f.string(a, "content", field + ".content");
      if (t.content.empty()) f.bad(field + ".content", "is empty");
      t.special = f.boolean(a, "special", field + ".special", false);
      t.lstrip = f.boolean(a, "lstrip", field + ".lstrip", false);
      t.rstrip = f.boolean(a, "rstrip", field + ".rstrip", false);
      t.single_word = f.boolean(a, "single_word", field + ".single_word", false);
      t.normalized = f.boolean(a, "normalized", field + ".normalized", !t.special);
      max_id = std::max<int64_t>(max_id, t.id);
      added.push_back(std::move(t));
    }
  }
  if (max_id < 0) f.bad("model.vocab", "is empty");
  // Every id up to the largest gets an entry: a vocabulary whose ids are
  // mostly unused (a few tokens with ids in the millions) would cost memory
  // and time for nothing and is no real tokenizer's.
  const int64_t n_given = static_cast<int64_t>(vocab_json.size() + added.size());
  if (max_id + 1 > 2 * n_given + kMaxUnusedIds) {
    f.bad("model.vocab", fmt::format("and added_tokens give {} tokens with ids up to {}: more than "
                                     "half of the ids would be unused",
                                     n_given, max_id));
  }
  const int32_t n = static_cast<int32_t>(max_id + 1);
  tok::Vocab& vocab = impl->vocab;
  vocab.text.assign(n, std::string());
  vocab.kind.assign(n, TokenKind::kUnused);
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    if (vocab.kind[id] != TokenKind::kUnused) {
      f.bad("model.vocab",
            fmt::format("gives id {} to both '{}' and '{}'", id, vocab.text[id], it.key()));
    }
    vocab.text[id] = it.key();
    vocab.kind[id] = TokenKind::kNormal;
  }
  for (const tok::AddedToken& t : added) {
    vocab.text[t.id] = t.content;
    vocab.kind[t.id] = t.special ? TokenKind::kControl : TokenKind::kUserDefined;
  }
  vocab.index();

  // Normalizer, pre-tokenizer, decoder.
  if (const json* j = f.find(root, "normalizer"))
    parse_normalizer(f, *j, "normalizer", impl->normalizer);
  if (const json* j = f.find(root, "pre_tokenizer")) {
    parse_pre_tokenizer(f, *j, "pre_tokenizer", impl->pre_tokenizer);
  }
  DecoderSpec decoder;
  if (const json* j = f.find(root, "decoder")) parse_decoder(f, *j, "decoder", decoder);
  const bool byte_level = impl->pre_tokenizer.has_byte_level();
  if (byte_level && !decoder.byte_level) {
    // The model works on raw bytes, so pieces must be raw bytes too.
    decoder.ops.insert(decoder.ops.begin(), {DecoderOp::Kind::kByteLevel, {}, {}});
  }
  vocab.piece.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    const TokenKind k = vocab.kind[i];
    vocab.piece[i] = (k == TokenKind::kControl || k == TokenKind::kUserDefined)
                         ? vocab.text[i]
                         : apply_decoder(decoder, vocab.text[i]);
  }
  impl->strip_leading_space = decoder.strip_leading_space;

  // Merges: "a b" strings or [a, b] pairs, in rank order.
  std::vector<tok::BpeMerge> merges;
  if (const json* mj = f.find(model, "merges")) {
    if (!mj->is_array()) f.bad("model.merges", "is not an array");
    merges.reserve(mj->size());
    std::string a, b;
    for (size_t r = 0; r < mj->size(); ++r) {
      const json& m = (*mj)[r];
      const std::string field = fmt::format("model.merges[{}]", r);
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) {
          f.bad(field, fmt::format("= '{}' is not two tokens separated by a space", s));
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        f.bad(field, "is neither \"a b\" nor [\"a\", \"b\"]");
      }
      const int32_t ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
      if (ia < 0 || ib < 0 || im < 0) {
        f.bad(field, fmt::format("merges '{}' and '{}', but '{}' is not in model.vocab", a, b,
                                 ia < 0   ? a
                                 : ib < 0 ? b
                                          : a + b));
      }
      merges.push_back({ia, ib, im});
    }
  }
  tok::BpeOptions opts;
  opts.byte_level = byte_level;
  opts.byte_fallback = f.boolean(model, "byte_fallback", "model.byte_fallback", false);
  opts.ignore_merges = f.boolean(model, "ignore_merges", "model.ignore_merges", false);
  opts.fuse_unk = f.boolean(model, "fuse_unk", "model.fuse_unk", false);
  const std::string unk = f.string_or(model, "unk_token", "model.unk_token", "");
  if (!unk.empty()) {
    opts.unk_id = vocab.find(unk);
    if (opts.unk_id < 0) f.bad("model.unk_token", fmt::format("'{}' is not in model.vocab", unk));
  }
  impl->unk_id = opts.unk_id;
  impl->bpe = std::make_unique<tok::BpeModel>(vocab, merges, opts);

  // Added tokens; the special tokens the config names count as special too.
  for (tok::AddedToken& t : added) impl->added.add(std::move(t));

  // Template, BOS / EOS.
  if (const json* j = f.find(root, "post_processor")) {
    parse_post_processor(f, *j, "post_processor", vocab, impl->bos_prefix, impl->eos_suffix);
  }
  auto config_id = [&](const std::string& text, const char* what) {
    if (text.empty()) return -1;
    const int32_t id = vocab.find(text);
    if (id < 0) {
      spdlog::warn("tokenizer: {}: tokenizer_config.json {} '{}' is not in the vocabulary; ignored",
                   file, what, text);
    }
    return id;
  };
  impl->bos_id = config_id(cfg.bos, "bos_token");
  if (impl->bos_id < 0 && !impl->bos_prefix.empty()) impl->bos_id = impl->bos_prefix.front();
  impl->pad_id = config_id(cfg.pad, "pad_token");
  const int32_t eos = config_id(cfg.eos, "eos_token");
  if (eos >= 0) impl->eos_ids.push_back(eos);
  for (int64_t id : cfg.generation_eos) {
    if (id >= 0 && id < n) {
      impl->eos_ids.push_back(static_cast<int32_t>(id));
    } else {
      spdlog::warn(
          "tokenizer: {}: generation_config.json eos_token_id {} is outside the "
          "vocabulary of {} tokens; ignored",
          file, id, n);
    }
  }
  impl->add_bos_default = cfg.add_bos_token.value_or(!impl->bos_prefix.empty());
  if (impl->bos_prefix.empty() && cfg.add_bos_token.value_or(false) && impl->bos_id >= 0) {
    impl->bos_prefix = {impl->bos_id};
  }
  impl->chat_template = cfg.chat_template;

  const bool fallback = opts.byte_fallback;
  impl->kind =
      fmt::format("{} ({}; pre-tokenizer {}{}{})",
                  byte_level ? "byte-level BPE"
                  : fallback ? "BPE with byte fallback"
                             : "BPE",
                  origin, impl->pre_tokenizer.describe(),
                  impl->normalizer.empty() ? "" : "; normalizer ", impl->normalizer.describe());
  impl->finish();
  return std::make_unique<Tokenizer>(std::move(impl));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_json_file(const std::string& path) {
  const json root = read_json(path);
  return build(root, path, fs::path(path).parent_path(), "tokenizer.json");
}

std::unique_ptr<Tokenizer> Tokenizer::from_vocab_merges(const std::string& dir) {
  const fs::path d(dir);
  const std::string vocab_path = (d / "vocab.json").string();
  const std::string merges_path = (d / "merges.txt").string();
  json root;
  root["model"] = {{"type", "BPE"}, {"vocab", read_json(vocab_path)}};
  json merges = json::array();
  {
    const std::string text = read_text(merges_path);
    size_t pos = 0;
    size_t line_no = 0;
    while (pos < text.size()) {
      size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      std::string line = text.substr(pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
      if (line.find(' ', 1) == std::string::npos) {
        fail("{}: line {} = '{}' is not two tokens separated by a space", merges_path, line_no,
             line);
      }
      merges.push_back(line);
    }
  }
  root["model"]["merges"] = std::move(merges);
  const HfConfig cfg = read_config(d);
  root["pre_tokenizer"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", cfg.add_prefix_space.value_or(false)},
                           {"use_regex", true}};
  root["decoder"] = {{"type", "ByteLevel"}};
  // Added tokens: tokenizer_config.json's added_tokens_decoder, else the
  // special tokens it names, else GPT-2's <|endoftext|>.
  json added = json::array();
  const json& vocab = root["model"]["vocab"];
  if (cfg.added_tokens_decoder.is_object()) {
    for (auto it = cfg.added_tokens_decoder.begin(); it != cfg.added_tokens_decoder.end(); ++it) {
      json t = it.value();
      int64_t id = 0;
      try {
        id = std::stoll(it.key());
      } catch (const std::exception&) {
        fail("{}: added_tokens_decoder key '{}' is not a token id",
             (d / "tokenizer_config.json").string(), it.key());
      }
      t["id"] = id;
      added.push_back(std::move(t));
    }
  } else {
    std::vector<std::string> names = {cfg.bos, cfg.eos, cfg.unk, cfg.pad};
    names.insert(names.end(), cfg.additional_special.begin(), cfg.additional_special.end());
    if (cfg.bos.empty() && cfg.eos.empty()) names.push_back("<|endoftext|>");
    for (const std::string& name : names) {
      if (name.empty() || !vocab.is_object() || !vocab.contains(name)) continue;
      added.push_back({{"id", vocab[name]}, {"content", name}, {"special", true}});
    }
  }
  root["added_tokens"] = std::move(added);
  return build(root, vocab_path, d, "vocab.json + merges.txt");
}

}  // namespace strata
