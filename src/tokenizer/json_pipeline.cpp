// The pipeline parsers of a tokenizer.json (json_pipeline.h).
#include "tokenizer/json_pipeline.h"

#include <fmt/format.h>

#include <memory>
#include <string_view>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace strata::tok {

namespace {

// {"Regex": "..."} or {"String": "..."}.
std::shared_ptr<const tok::Regex> pattern_regex(const JsonFields& f, const json& obj,
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

}  // namespace

void parse_normalizer(const JsonFields& f, const json& j, const std::string& field,
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

namespace {

tok::SplitBehavior parse_behavior(const JsonFields& f, const json& j, const std::string& field,
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

tok::PreTokenizerStep::Prepend parse_prepend_scheme(const JsonFields& f, const json& j,
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

}  // namespace

void parse_pre_tokenizer(const JsonFields& f, const json& j, const std::string& field,
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

void parse_decoder(const JsonFields& f, const json& j, const std::string& field, DecoderSpec& out) {
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

namespace {

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

}  // namespace

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
void parse_post_processor(const JsonFields& f, const json& j, const std::string& field,
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

}  // namespace strata::tok
