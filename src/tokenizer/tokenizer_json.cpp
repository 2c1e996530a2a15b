// Tokenizer from Hugging Face files: tokenizer.json (model BPE; normalizer,
// pre_tokenizer, decoder, post_processor, added_tokens), tokenizer_config.json
// and generation_config.json beside it, or GPT-2-style vocab.json +
// merges.txt (turned into the equivalent tokenizer.json first, so that both go
// through one builder). A field that is missing, of the wrong type, or names a
// token that does not exist gives an Error naming the file and the field.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace strata {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using tok::TokenKind;

constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;  // 16.7M: far above any real vocabulary
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

// Field access with messages that name the file and the field path.
class Fields {
 public:
  explicit Fields(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  [[noreturn]] void bad(std::string_view field, std::string_view what) const {
    fail("{}: {} {}", file_, field, what);
  }
  // The member, or nullptr when absent or null.
  const json* find(const json& obj, const char* key) const {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }
  const json& object(const json& obj, const char* key, const std::string& field) const {
    const json* v = find(obj, key);
    if (!v) bad(field, "is missing");
    if (!v->is_object()) bad(field, "is not an object");
    return *v;
  }
  std::string string(const json& obj, const char* key, const std::string& field) const {
    const json* v = find(obj, key);
    if (!v) bad(field, "is missing");
    if (!v->is_string()) bad(field, "is not a string");
    return v->get<std::string>();
  }
  std::string string_or(const json& obj, const char* key, const std::string& field,
                        std::string dflt) const {
    const json* v = find(obj, key);
    if (!v) return dflt;
    if (!v->is_string()) bad(field, "is not a string");
    return v->get<std::string>();
  }
  bool boolean(const json& obj, const char* key, const std::string& field, bool dflt) const {
    const json* v = find(obj, key);
    if (!v) return dflt;
    if (!v->is_boolean()) bad(field, "is not true or false");
    return v->get<bool>();
  }
  int64_t integer(const json& v, const std::string& field) const {
    if (!v.is_number_integer()) bad(field, "is not an integer");
    return v.get<int64_t>();
  }
  int32_t token_id(const json& v, const std::string& field) const {
    const int64_t id = integer(v, field);
    if (id < 0 || id > kMaxTokenId) bad(field, fmt::format("= {} is not a valid token id", id));
    return static_cast<int32_t>(id);
  }

 private:
  std::string file_;
};

std::string type_of(const Fields& f, const json& j, const std::string& field) {
  if (!j.is_object()) f.bad(field, "is not an object");
  return f.string(j, "type", field + ".type");
}

// {"Regex": "..."} or {"String": "..."}.
std::shared_ptr<const tok::Regex> pattern_regex(const Fields& f, const json& obj,
                                                const std::string& field) {
  const json& p = f.object(obj, "pattern", field + ".pattern");
  const std::string ctx = fmt::format("{}: {}.pattern", f.file(), field);
  if (const json* r = f.find(p, "Regex")) {
    if (!r->is_string()) f.bad(field + ".pattern.Regex", "is not a string");
    return std::make_shared<tok::Regex>(r->get<std::string>(), false, ctx);
  }
  if (const json* s = f.find(p, "String")) {
    if (!s->is_string()) f.bad(field + ".pattern.String", "is not a string");
    return std::make_shared<tok::Regex>(s->get<std::string>(), true, ctx);
  }
  f.bad(field + ".pattern", "has neither Regex nor String");
}

void parse_normalizer(const Fields& f, const json& j, const std::string& field,
                      tok::Normalizer& out) {
  const std::string type = type_of(f, j, field);
  tok::NormalizerStep step;
  if (type == "Sequence") {
    const json* list = f.find(j, "normalizers");
    if (!list || !list->is_array()) f.bad(field + ".normalizers", "is missing or not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      parse_normalizer(f, (*list)[i], fmt::format("{}.normalizers[{}]", field, i), out);
    }
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = tok::NormalizerStep::Kind::kForm;
    step.form = type == "NFC"    ? tok::NormalForm::kNfc
                : type == "NFD"  ? tok::NormalForm::kNfd
                : type == "NFKC" ? tok::NormalForm::kNfkc
                                 : tok::NormalForm::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = tok::NormalizerStep::Kind::kLowercase;
  } else if (type == "Prepend") {
    step.kind = tok::NormalizerStep::Kind::kPrepend;
    step.text = f.string(j, "prepend", field + ".prepend");
  } else if (type == "Replace") {
    step.kind = tok::NormalizerStep::Kind::kReplace;
    step.regex = pattern_regex(f, j, field);
    step.text = f.string(j, "content", field + ".content");
  } else if (type == "Strip") {
    step.kind = tok::NormalizerStep::Kind::kStrip;
    step.strip_left = f.boolean(j, "strip_left", field + ".strip_left", true);
    step.strip_right = f.boolean(j, "strip_right", field + ".strip_right", true);
  } else {
    f.bad(field + ".type",
          fmt::format("'{}' is not supported (supported: Sequence, NFC, NFD, NFKC, "
                      "NFKD, Lowercase, Prepend, Replace, Strip)",
                      type));
  }
  out.add(std::move(step));
}

tok::SplitBehavior parse_behavior(const Fields& f, const json& j, const std::string& field,
                                  tok::SplitBehavior dflt) {
  const std::string b = f.string_or(j, "behavior", field + ".behavior", "");
  if (b.empty()) return dflt;
  if (b == "Removed") return tok::SplitBehavior::kRemoved;
  if (b == "Isolated") return tok::SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return tok::SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return tok::SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return tok::SplitBehavior::kContiguous;
  f.bad(field + ".behavior", fmt::format("'{}' is not one of Removed, Isolated, "
                                         "MergedWithPrevious, MergedWithNext, Contiguous",
                                         b));
}

tok::PreTokenizerStep::Prepend parse_prepend_scheme(const Fields& f, const json& j,
                                                    const std::string& field) {
  if (const json* s = f.find(j, "prepend_scheme")) {
    if (!s->is_string()) f.bad(field + ".prepend_scheme", "is not a string");
    const std::string v = s->get<std::string>();
    if (v == "always") return tok::PreTokenizerStep::Prepend::kAlways;
    if (v == "first") return tok::PreTokenizerStep::Prepend::kFirst;
    if (v == "never") return tok::PreTokenizerStep::Prepend::kNever;
    f.bad(field + ".prepend_scheme", fmt::format("'{}' is not one of always, first, never", v));
  }
  return f.boolean(j, "add_prefix_space", field + ".add_prefix_space", true)
             ? tok::PreTokenizerStep::Prepend::kAlways
             : tok::PreTokenizerStep::Prepend::kNever;
}

std::shared_ptr<const tok::Regex> make_regex(const std::string& pattern, bool literal,
                                             const std::string& ctx) {
  return std::make_shared<tok::Regex>(pattern, literal, ctx);
}

void parse_pre_tokenizer(const Fields& f, const json& j, const std::string& field,
                         tok::PreTokenizer& out) {
  const std::string type = type_of(f, j, field);
  const std::string ctx = fmt::format("{}: {}", f.file(), field);
  tok::PreTokenizerStep step;
  step.label = type;
  if (type == "Sequence") {
    const json* list = f.find(j, "pretokenizers");
    if (!list || !list->is_array()) f.bad(field + ".pretokenizers", "is missing or not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      parse_pre_tokenizer(f, (*list)[i], fmt::format("{}.pretokenizers[{}]", field, i), out);
    }
    return;
  } else if (type == "Split") {
    step.kind = tok::PreTokenizerStep::Kind::kSplit;
    step.regex = pattern_regex(f, j, field);
    step.behavior = parse_behavior(f, j, field, tok::SplitBehavior::kIsolated);
    step.invert = f.boolean(j, "invert", field + ".invert", false);
  } else if (type == "ByteLevel") {
    step.kind = tok::PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = f.boolean(j, "add_prefix_space", field + ".add_prefix_space", true);
    if (f.boolean(j, "use_regex", field + ".use_regex", true)) {
      step.regex = make_regex(tok::kGpt2Pattern, false, ctx);
    }
  } else if (type == "Digits") {
    step.kind = tok::PreTokenizerStep::Kind::kSplit;
    const bool individual = f.boolean(j, "individual_digits", field + ".individual_digits", false);
    step.regex = make_regex(R"(\p{N})", false, ctx);
    step.behavior = individual ? tok::SplitBehavior::kIsolated : tok::SplitBehavior::kContiguous;
  } else if (type == "Metaspace") {
    step.kind = tok::PreTokenizerStep::Kind::kMetaspace;
    step.replacement = f.string_or(j, "replacement", field + ".replacement", "\xE2\x96\x81");
    if (step.replacement.empty()) f.bad(field + ".replacement", "is empty");
    step.prepend = parse_prepend_scheme(f, j, field);
    step.split = f.boolean(j, "split", field + ".split", true);
    step.regex = make_regex(step.replacement, true, ctx);
  } else if (type == "Whitespace") {
    step.kind = tok::PreTokenizerStep::Kind::kSplit;
    step.regex = make_regex(R"(\w+|[^\w\s]+)", false, ctx);
    step.behavior = tok::SplitBehavior::kRemoved;
    step.invert = true;
  } else if (type == "WhitespaceSplit") {
    step.kind = tok::PreTokenizerStep::Kind::kSplit;
    step.regex = make_regex(R"(\s+)", false, ctx);
    step.behavior = tok::SplitBehavior::kRemoved;
  } else if (type == "Punctuation") {
    step.kind = tok::PreTokenizerStep::Kind::kSplit;
    step.regex = make_regex(R"([\p{P}!-/:-@\[-`{-~])", false, ctx);
    step.behavior = parse_behavior(f, j, field, tok::SplitBehavior::kIsolated);
  } else {
    f.bad(field + ".type", fmt::format("'{}' is not supported (supported: Sequence, Split, "
                                       "ByteLevel, Digits, Metaspace, Whitespace, "
                                       "WhitespaceSplit, Punctuation)",
                                       type));
  }
  out.add(std::move(step));
}

// Decoders: per-token rewrites that give each token's raw bytes, plus how many
// leading spaces the decoded text loses.
struct DecoderOp {
  enum class Kind { kByteLevel, kReplace, kByteFallback } kind;
  std::string from, to;
};
struct DecoderSpec {
  std::vector<DecoderOp> ops;
  bool strip_leading_space = false;
  bool byte_level = false;
};

void parse_decoder(const Fields& f, const json& j, const std::string& field, DecoderSpec& out) {
  const std::string type = type_of(f, j, field);
  if (type == "Sequence") {
    const json* list = f.find(j, "decoders");
    if (!list || !list->is_array()) f.bad(field + ".decoders", "is missing or not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      parse_decoder(f, (*list)[i], fmt::format("{}.decoders[{}]", field, i), out);
    }
  } else if (type == "ByteLevel") {
    out.ops.push_back({DecoderOp::Kind::kByteLevel, {}, {}});
    out.byte_level = true;
  } else if (type == "Replace") {
    const json& p = f.object(j, "pattern", field + ".pattern");
    const json* s = f.find(p, "String");
    if (!s || !s->is_string())
      f.bad(field + ".pattern", "is not a String pattern (only those are supported)");
    out.ops.push_back({DecoderOp::Kind::kReplace, s->get<std::string>(),
                       f.string(j, "content", field + ".content")});
  } else if (type == "ByteFallback") {
    out.ops.push_back({DecoderOp::Kind::kByteFallback, {}, {}});
  } else if (type == "Fuse") {
    // Concatenation is what decode does anyway.
  } else if (type == "Strip") {
    const std::string content = f.string_or(j, "content", field + ".content", " ");
    const json* start = f.find(j, "start");
    const json* stop = f.find(j, "stop");
    const int64_t n_start = start ? f.integer(*start, field + ".start") : 0;
    const int64_t n_stop = stop ? f.integer(*stop, field + ".stop") : 0;
    if (content != " " || n_start > 1 || n_stop != 0) {
      f.bad(field, "is a Strip other than one leading space, which is not supported");
    }
    out.strip_leading_space = out.strip_leading_space || n_start == 1;
  } else if (type == "Metaspace") {
    const std::string rep = f.string_or(j, "replacement", field + ".replacement", "\xE2\x96\x81");
    out.ops.push_back({DecoderOp::Kind::kReplace, rep, " "});
    if (parse_prepend_scheme(f, j, field) != tok::PreTokenizerStep::Prepend::kNever) {
      out.strip_leading_space = true;
    }
  } else {
    f.bad(field + ".type", fmt::format("'{}' is not supported (supported: Sequence, ByteLevel, "
                                       "Replace, ByteFallback, Fuse, Strip, Metaspace)",
                                       type));
  }
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::string apply_decoder(const DecoderSpec& d, const std::string& text) {
  std::string s = text;
  for (const DecoderOp& op : d.ops) {
    switch (op.kind) {
      case DecoderOp::Kind::kByteLevel:
        s = tok::byte_level_decode(s);
        break;
      case DecoderOp::Kind::kReplace:
        s = replace_all(s, op.from, op.to);
        break;
      case DecoderOp::Kind::kByteFallback:
        if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>') {
          const std::string hex = s.substr(3, 2);
          char* end = nullptr;
          const long v = std::strtol(hex.c_str(), &end, 16);
          if (end == hex.c_str() + 2) s = std::string(1, static_cast<char>(v));
        }
        break;
    }
  }
  return s;
}

// Post-processor: the ids placed before and after one sequence.
void parse_post_processor(const Fields& f, const json& j, const std::string& field,
                          const tok::Vocab& vocab, std::vector<int32_t>& prefix,
                          std::vector<int32_t>& suffix) {
  const std::string type = type_of(f, j, field);
  auto check = [&](int32_t id, const std::string& where) {
    if (id >= vocab.size()) {
      f.bad(where, fmt::format("= {} is outside the vocabulary of {} tokens", id, vocab.size()));
    }
    return id;
  };
  if (type == "Sequence") {
    const json* list = f.find(j, "processors");
    if (!list || !list->is_array()) f.bad(field + ".processors", "is missing or not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      parse_post_processor(f, (*list)[i], fmt::format("{}.processors[{}]", field, i), vocab, prefix,
                           suffix);
    }
  } else if (type == "ByteLevel") {
    // Offsets only.
  } else if (type == "TemplateProcessing") {
    const json* single = f.find(j, "single");
    if (!single || !single->is_array()) f.bad(field + ".single", "is missing or not an array");
    const json& specials = f.object(j, "special_tokens", field + ".special_tokens");
    bool after_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const std::string item_field = fmt::format("{}.single[{}]", field, i);
      const json& item = (*single)[i];
      if (f.find(item, "Sequence")) {
        after_sequence = true;
        continue;
      }
      const json& st = f.object(item, "SpecialToken", item_field + ".SpecialToken");
      const std::string name = f.string(st, "id", item_field + ".SpecialToken.id");
      const json* entry = f.find(specials, name.c_str());
      if (!entry) f.bad(field + ".special_tokens", fmt::format("has no entry '{}'", name));
      const json* ids = f.find(*entry, "ids");
      const std::string ids_field = fmt::format("{}.special_tokens['{}'].ids", field, name);
      if (!ids || !ids->is_array()) f.bad(ids_field, "is missing or not an array");
      for (size_t k = 0; k < ids->size(); ++k) {
        const std::string id_field = fmt::format("{}[{}]", ids_field, k);
        const int32_t id = check(f.token_id((*ids)[k], id_field), id_field);
        (after_sequence ? suffix : prefix).push_back(id);
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const std::string kf = field + "." + key;
      const json* pair = f.find(j, key);
      if (!pair || !pair->is_array() || pair->size() != 2) f.bad(kf, "is not a [token, id] pair");
      const int32_t id = check(f.token_id((*pair)[1], kf + "[1]"), kf + "[1]");
      (std::string_view(key) == "cls" ? prefix : suffix).push_back(id);
    }
  } else {
    f.bad(field + ".type", fmt::format("'{}' is not supported (supported: Sequence, ByteLevel, "
                                       "TemplateProcessing, RobertaProcessing, BertProcessing)",
                                       type));
  }
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
