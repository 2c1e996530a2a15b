// Pre-tokenizer steps and the GGUF pre-tokenizer table. The regexes are the
// ones the models' tokenizer.json files carry (PCRE2 reads them as written,
// (?i:...) included).
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

namespace strata::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4oPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekkenPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kBloomPattern = R"( ?[^(\s|.,!?…。，、।۔،)]+)";

struct PreEntry {
  std::vector<std::string_view> names;
  GgufPreTokenizer pre;
};

const std::vector<PreEntry>& pre_table() {
  static const std::vector<PreEntry> table = {
      {{"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es",
        "jina-v2-de", "gigachat", "exaone4", "roberta-bpe", "trillion", "granite-docling"},
       {"gpt-2", {kGpt2Pattern}, false, false}},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {"llama-bpe", {kLlama3Pattern}, true, true}},
      {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, {"llama-bpe", {kLlama3Pattern}, false, false}},
      {{"qwen2", "qwen2.5", "deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan", "kormo",
        "grok-2"},
       {"qwen2", {kQwen2Pattern}, false, false}},
      {{"qwen35"}, {"qwen35", {kQwen35Pattern}, false, false}},
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {"smollm", {R"(\p{N})", kGpt2Pattern}, false, false}},
      {{"gpt-4o", "llama4"}, {"gpt-4o", {kGpt4oPattern}, false, false}},
      {{"tekken"}, {"tekken", {kTekkenPattern}, true, true}},
      {{"bloom", "poro-chat", "gpt3-finnish"}, {"bloom", {kBloomPattern}, false, false}},
      {{"viking"}, {"viking", {kBloomPattern, R"(\p{N})"}, false, false}},
      {{"default"},
       {"default",
        {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Pattern, R"(\p{N}+)", "[0-9][0-9][0-9]"},
        false,
        false}},
  };
  return table;
}

}  // namespace

std::optional<GgufPreTokenizer> gguf_pre_tokenizer(std::string_view pre) {
  for (const PreEntry& e : pre_table()) {
    for (std::string_view n : e.names) {
      if (n == pre) return e.pre;
    }
  }
  return std::nullopt;
}

std::string gguf_pre_names() {
  std::string out;
  for (const PreEntry& e : pre_table()) {
    for (std::string_view n : e.names) {
      if (!out.empty()) out += ", ";
      out += n;
    }
  }
  return out;
}

void split_with(const Regex& regex, SplitBehavior behavior, bool invert, std::string_view text,
                std::vector<std::string>& out) {
  // Segments covering the text: (span, is_match), as HF's find_matches.
  thread_local std::vector<Span> matches;
  thread_local std::vector<std::pair<Span, bool>> segs;
  matches.clear();
  segs.clear();
  regex.find_all(text, matches);
  size_t prev = 0;
  for (const Span& m : matches) {
    if (m.begin != prev) segs.push_back({{prev, m.begin}, false});
    segs.push_back({m, true});
    prev = m.end;
  }
  if (prev != text.size()) segs.push_back({{prev, text.size()}, false});
  if (invert) {
    for (auto& s : segs) s.second = !s.second;
  }

  // Pieces as spans, each flagged whether it is dropped.
  thread_local std::vector<std::pair<Span, bool>> pieces;  // (span, removed)
  pieces.clear();
  switch (behavior) {
    case SplitBehavior::kRemoved:
    case SplitBehavior::kIsolated:
      for (const auto& [span, is_match] : segs) {
        pieces.push_back({span, behavior == SplitBehavior::kRemoved && is_match});
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& [span, is_match] : segs) {
        if (is_match && !previous_match && !pieces.empty()) {
          pieces.back().first.end = span.end;
        } else {
          pieces.push_back({span, false});
        }
        previous_match = is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool next_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const auto& [span, is_match] = segs[k];
        if (is_match && !next_match && !pieces.empty()) {
          pieces.back().first.begin = span.begin;
        } else {
          pieces.push_back({span, false});
        }
        next_match = is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      bool first = true;
      for (const auto& [span, is_match] : segs) {
        if (!first && is_match == previous_match) {
          pieces.back().first.end = span.end;
        } else {
          pieces.push_back({span, false});
        }
        previous_match = is_match;
        first = false;
      }
      break;
    }
  }
  for (const auto& [span, removed] : pieces) {
    if (!removed && span.end > span.begin)
      out.emplace_back(text.substr(span.begin, span.end - span.begin));
  }
}

bool PreTokenizer::has_byte_level() const {
  for (const auto& s : steps_) {
    if (s.kind == PreTokenizerStep::Kind::kByteLevel) return true;
  }
  return false;
}

void PreTokenizer::split(std::string_view text, bool at_input_start,
                         std::vector<std::string>& words) const {
  std::vector<std::string> cur;
  cur.emplace_back(text);
  std::vector<std::string> next;
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    next.reserve(cur.size() * 2);
    for (size_t i = 0; i < cur.size(); ++i) {
      std::string& piece = cur[i];
      switch (step.kind) {
        case PreTokenizerStep::Kind::kSplit:
          split_with(*step.regex, step.behavior, step.invert, piece, next);
          break;
        case PreTokenizerStep::Kind::kByteLevel:
          if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
          if (step.regex) {
            split_with(*step.regex, SplitBehavior::kIsolated, false, piece, next);
          } else {
            next.push_back(std::move(piece));
          }
          break;
        case PreTokenizerStep::Kind::kMetaspace: {
          std::string s;
          s.reserve(piece.size() + step.replacement.size());
          for (char c : piece) {
            if (c == ' ') {
              s += step.replacement;
            } else {
              s.push_back(c);
            }
          }
          const bool starts = s.compare(0, step.replacement.size(), step.replacement) == 0;
          const bool prepend =
              !starts &&
              (step.prepend == PreTokenizerStep::Prepend::kAlways ||
               (step.prepend == PreTokenizerStep::Prepend::kFirst && at_input_start && i == 0));
          if (prepend) s.insert(0, step.replacement);
          if (step.split) {
            split_with(*step.regex, SplitBehavior::kMergedWithNext, false, s, next);
          } else if (!s.empty()) {
            next.push_back(std::move(s));
          }
          break;
        }
      }
    }
    std::swap(cur, next);
  }
  for (auto& w : cur) {
    if (!w.empty()) words.push_back(std::move(w));
  }
}

std::string PreTokenizer::describe() const {
  std::string out;
  for (const auto& s : steps_) {
    if (!out.empty()) out += " + ";
    out += s.label;
  }
  return out.empty() ? "none" : out;
}

}  // namespace strata::tok
