// Tokenizer from GGUF metadata (tokenizer.ggml.*): "gpt2" byte-level BPE with
// the pre-tokenizer that tokenizer.ggml.pre names, "llama" SentencePiece BPE
// by score. Every array length and token id read from the file is checked
// against the vocabulary before use.
#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace strata {

namespace {

using tok::TokenKind;

constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581

TokenKind kind_from_gguf(int64_t type) {
  switch (type) {
    case 2:
      return TokenKind::kUnknown;
    case 3:
      return TokenKind::kControl;
    case 4:
      return TokenKind::kUserDefined;
    case 5:
      return TokenKind::kUnused;
    case 6:
      return TokenKind::kByte;
    default:
      return TokenKind::kNormal;  // 1 normal, 0 undefined
  }
}

// An optional token id; Error when it is present and outside the vocabulary
// and `required_valid`, otherwise a warning and -1.
int32_t read_token_id(const GgufFile& g, const char* key, int32_t n_vocab, bool required_valid) {
  const std::optional<int64_t> v = g.get_int(key);
  if (!v) return -1;
  if (*v >= 0 && *v < n_vocab) return static_cast<int32_t>(*v);
  if (required_valid) {
    fail(
        "{}: {} = {} is outside the vocabulary of {} tokens; the file is malformed, convert the "
        "model again",
        g.path(), key, *v, n_vocab);
  }
  spdlog::warn("tokenizer: {}: {} = {} is outside the vocabulary of {} tokens; ignored", g.path(),
               key, *v, n_vocab);
  return -1;
}

// <0xXX> -> the byte, or -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[k];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
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

std::unique_ptr<Tokenizer> Tokenizer::from_gguf_file(const std::string& path) {
  GgufFile gguf(path);
  return from_gguf(gguf);
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& g) {
  auto impl = std::make_unique<tok::TokenizerImpl>();
  impl->source = g.path();
  const std::string& path = g.path();

  const std::optional<std::string_view> model = g.get_string("tokenizer.ggml.model");
  if (!model) {
    fail(
        "{}: no tokenizer.ggml.model metadata, so the file carries no tokenizer; use a GGUF "
        "converted with its vocabulary",
        path);
  }
  const bool is_bpe = *model == "gpt2";
  const bool is_spm = *model == "llama";
  if (!is_bpe && !is_spm) {
    fail("{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama)", path, *model);
  }
  std::optional<std::vector<std::string_view>> tokens = g.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) {
    fail("{}: tokenizer.ggml.tokens is missing or empty; the file carries no vocabulary", path);
  }
  if (tokens->size() > static_cast<size_t>(INT32_MAX)) {
    fail("{}: tokenizer.ggml.tokens has {} entries, more than token ids can address", path,
         tokens->size());
  }
  const int32_t n = static_cast<int32_t>(tokens->size());
  const std::optional<std::vector<int64_t>> types = g.get_int_array("tokenizer.ggml.token_type");
  if (types && types->size() != tokens->size()) {
    fail("{}: tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}", path,
         types->size(), tokens->size());
  }
  std::optional<std::vector<float>> scores = g.get_float_array("tokenizer.ggml.scores");
  if (scores && scores->size() != tokens->size()) {
    fail("{}: tokenizer.ggml.scores has {} entries but tokenizer.ggml.tokens has {}", path,
         scores->size(), tokens->size());
  }

  tok::Vocab& vocab = impl->vocab;
  vocab.text.resize(n);
  vocab.kind.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    vocab.text[i] = std::string((*tokens)[i]);
    vocab.kind[i] = types ? kind_from_gguf((*types)[i]) : TokenKind::kNormal;
  }
  if (is_spm && scores) vocab.score = std::move(*scores);
  vocab.index();

  impl->bos_id = read_token_id(g, "tokenizer.ggml.bos_token_id", n, true);
  const int32_t eos = read_token_id(g, "tokenizer.ggml.eos_token_id", n, true);
  impl->unk_id = read_token_id(g, "tokenizer.ggml.unknown_token_id", n, false);
  impl->pad_id = read_token_id(g, "tokenizer.ggml.padding_token_id", n, false);
  const int32_t eot = read_token_id(g, "tokenizer.ggml.eot_token_id", n, false);
  const int32_t eom = read_token_id(g, "tokenizer.ggml.eom_token_id", n, false);
  impl->eos_ids = {eos, eot, eom};
  const std::optional<bool> add_bos = g.get_bool("tokenizer.ggml.add_bos_token");
  if (const auto tmpl = g.get_string("tokenizer.chat_template")) impl->chat_template = *tmpl;

  vocab.piece.resize(n);
  if (is_bpe) {
    std::string pre_name = "default";
    if (const auto pre = g.get_string("tokenizer.ggml.pre")) {
      pre_name = std::string(*pre);
    } else {
      spdlog::warn(
          "tokenizer: {}: no tokenizer.ggml.pre; using llama.cpp's 'default' "
          "pre-tokenizer, which may split text differently from the original model",
          path);
    }
    const std::optional<tok::GgufPreTokenizer> pre = tok::gguf_pre_tokenizer(pre_name);
    if (!pre) {
      fail("{}: tokenizer.ggml.pre '{}' is not supported (known: {})", path, pre_name,
           tok::gguf_pre_names());
    }
    for (const std::string& pattern : pre->patterns) {
      tok::PreTokenizerStep step;
      step.kind = tok::PreTokenizerStep::Kind::kSplit;
      step.regex =
          std::make_shared<tok::Regex>(pattern, false, fmt::format("{}: tokenizer.ggml.pre", path));
      step.label = "regex";
      impl->pre_tokenizer.add(std::move(step));
    }
    const std::optional<std::vector<std::string_view>> merges =
        g.get_string_array("tokenizer.ggml.merges");
    if (!merges)
      fail("{}: tokenizer.ggml.merges is missing; a gpt2 tokenizer needs its merges", path);
    std::vector<tok::BpeMerge> bpe_merges;
    bpe_merges.reserve(merges->size());
    size_t n_skipped = 0;
    std::string joined;
    for (size_t r = 0; r < merges->size(); ++r) {
      const std::string_view m = (*merges)[r];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string_view::npos) {
        fail("{}: tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space", path, r,
             m);
      }
      const std::string_view a = m.substr(0, sp);
      const std::string_view b = m.substr(sp + 1);
      joined.assign(a);
      joined.append(b);
      const int32_t ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(joined);
      if (ia < 0 || ib < 0 || im < 0) {
        ++n_skipped;
        continue;
      }
      bpe_merges.push_back({ia, ib, im});
    }
    if (n_skipped > 0) {
      spdlog::warn("tokenizer: {}: skipped {} of {} merges whose tokens are not in the vocabulary",
                   path, n_skipped, merges->size());
    }
    for (int32_t i = 0; i < n; ++i) {
      const TokenKind k = vocab.kind[i];
      vocab.piece[i] = (k == TokenKind::kControl || k == TokenKind::kUserDefined)
                           ? vocab.text[i]
                           : tok::byte_level_decode(vocab.text[i]);
    }
    tok::BpeOptions opts;
    opts.byte_level = true;
    opts.ignore_merges = pre->ignore_merges;
    opts.unk_id = impl->unk_id;
    impl->bpe = std::make_unique<tok::BpeModel>(vocab, bpe_merges, opts);
    impl->add_bos_default = add_bos.value_or(pre->add_bos);
    impl->kind = fmt::format("byte-level BPE ({} pattern)", pre->family);
  } else {
    if (vocab.score.empty()) {
      spdlog::warn("tokenizer: {}: no tokenizer.ggml.scores; merging leftmost first", path);
    }
    const bool add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    if (add_space_prefix) {
      tok::NormalizerStep prepend;
      prepend.kind = tok::NormalizerStep::Kind::kPrepend;
      prepend.text = kMetaspace;
      impl->normalizer.add(std::move(prepend));
    }
    tok::NormalizerStep escape;
    escape.kind = tok::NormalizerStep::Kind::kReplace;
    escape.regex = std::make_shared<tok::Regex>(" ", true, path);
    escape.text = kMetaspace;
    impl->normalizer.add(std::move(escape));
    for (int32_t i = 0; i < n; ++i) {
      const int byte = vocab.kind[i] == TokenKind::kByte ? parse_byte_token(vocab.text[i]) : -1;
      if (byte >= 0) {
        vocab.piece[i] = std::string(1, static_cast<char>(byte));
      } else if (vocab.kind[i] == TokenKind::kControl) {
        vocab.piece[i] = vocab.text[i];
      } else {
        vocab.piece[i] = replace_all(vocab.text[i], kMetaspace, " ");
      }
    }
    if (impl->unk_id < 0) {
      for (int32_t i = 0; i < n && impl->unk_id < 0; ++i) {
        if (vocab.kind[i] == TokenKind::kUnknown) impl->unk_id = i;
      }
    }
    impl->spm = std::make_unique<tok::SpmModel>(vocab, impl->unk_id);
    impl->strip_leading_space = add_space_prefix;
    impl->add_bos_default = add_bos.value_or(true);
    impl->kind = "SentencePiece BPE (llama)";
  }
  if (impl->bos_id >= 0) impl->bos_prefix = {impl->bos_id};

  // Control, user-defined and unknown tokens are recognised in raw text.
  for (int32_t i = 0; i < n; ++i) {
    const TokenKind k = vocab.kind[i];
    if (k != TokenKind::kControl && k != TokenKind::kUserDefined && k != TokenKind::kUnknown)
      continue;
    tok::AddedToken t;
    t.id = i;
    t.content = vocab.text[i];
    t.special = k != TokenKind::kUserDefined;
    impl->added.add(std::move(t));
  }
  impl->finish();
  return std::make_unique<Tokenizer>(std::move(impl));
}

}  // namespace strata
