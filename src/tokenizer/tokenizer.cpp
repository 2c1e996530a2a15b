// Encoding and decoding over the loaded parts; from_path dispatch.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace strata {

namespace tok {

const std::vector<std::string>& end_of_generation_texts() {
  static const std::vector<std::string> texts = {
      "<|eot_id|>", "<|eom_id|>",      "<|im_end|>",
      "<|end|>",    "<end_of_turn>",   "<|endoftext|>",
      "<EOT>",      "<|end_of_text|>", "<｜end▁of▁sentence｜>"};
  return texts;
}

void TokenizerImpl::finish() {
  const int32_t n = vocab.size();
  STRATA_ASSERT(n > 0);
  STRATA_ASSERT(static_cast<int32_t>(vocab.piece.size()) == n);
  STRATA_ASSERT(static_cast<int32_t>(vocab.kind.size()) == n);
  STRATA_ASSERT((bpe != nullptr) != (spm != nullptr));
  special.assign(n, false);
  for (int32_t i = 0; i < n; ++i) {
    special[i] = vocab.kind[i] == TokenKind::kControl || vocab.kind[i] == TokenKind::kUnknown;
  }
  for (const AddedToken& t : added.tokens()) {
    STRATA_ASSERT(t.id >= 0 && t.id < n);
    if (t.special) special[t.id] = true;
  }
  for (const std::string& text : end_of_generation_texts()) {
    const int32_t id = vocab.find(text);
    if (id >= 0 && special[id]) eos_ids.push_back(id);
  }
  std::vector<int32_t> uniq;
  for (int32_t id : eos_ids) {
    if (id >= 0 && std::find(uniq.begin(), uniq.end(), id) == uniq.end()) uniq.push_back(id);
  }
  eos_ids = std::move(uniq);
  for (int32_t id : bos_prefix) STRATA_ASSERT(id >= 0 && id < n);
  for (int32_t id : eos_suffix) STRATA_ASSERT(id >= 0 && id < n);
  for (int32_t id : eos_ids) STRATA_ASSERT(id < n);
  STRATA_ASSERT(bos_id < n && pad_id < n && unk_id < n);
}

}  // namespace tok

Tokenizer::Tokenizer(std::unique_ptr<tok::TokenizerImpl> impl) : impl_(std::move(impl)) {
  STRATA_ASSERT(impl_ != nullptr);
}

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    fail("{}: no such file or directory; give a GGUF file, a tokenizer.json or a model directory",
         path);
  }
  if (fs::is_directory(st)) {
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json"))
      return from_json_file((dir / "tokenizer.json").string());
    if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
      return from_vocab_merges(path);
    }
    fail("{}: the directory has no tokenizer.json (nor vocab.json with merges.txt)", path);
  }
  char magic[4] = {0, 0, 0, 0};
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open the file", path);
    in.read(magic, 4);
  }
  if (std::string_view(magic, 4) == "GGUF") return from_gguf_file(path);
  if (fs::path(path).extension() == ".json") return from_json_file(path);
  fail("{}: not a GGUF file (no GGUF magic) nor a .json tokenizer file", path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  const tok::TokenizerImpl& t = *impl_;
  std::string sanitized;
  if (!tok::utf8_is_valid(text)) {
    sanitized = tok::utf8_sanitize(text);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_bos) ids.insert(ids.end(), t.bos_prefix.begin(), t.bos_prefix.end());

  std::vector<tok::Fragment> fragments;
  if (t.added.empty()) {
    fragments.push_back({-1, 0, text.size()});
  } else {
    t.added.split(text, fragments);
  }
  std::vector<std::string> words;
  for (const tok::Fragment& f : fragments) {
    if (f.id >= 0) {
      ids.push_back(f.id);
      continue;
    }
    const std::string_view raw = text.substr(f.begin, f.end - f.begin);
    std::string normalized;
    std::string_view frag = raw;
    if (!t.normalizer.empty()) {
      normalized = t.normalizer.apply(raw);
      frag = normalized;
    }
    if (t.spm) {
      t.spm->encode(frag, ids);
      continue;
    }
    words.clear();
    if (t.pre_tokenizer.empty()) {
      if (!frag.empty()) words.emplace_back(frag);
    } else {
      t.pre_tokenizer.split(frag, f.begin == 0, words);
    }
    for (const std::string& w : words) t.bpe->encode_word(w, ids);
  }
  if (add_bos) ids.insert(ids.end(), t.eos_suffix.begin(), t.eos_suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const tok::TokenizerImpl& t = *impl_;
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    const std::string& p = piece(id);
    if (skip_special && t.special[id]) continue;
    if (first && t.strip_leading_space && !p.empty() && p[0] == ' ') {
      out.append(p, 1, std::string::npos);
    } else {
      out += p;
    }
    first = false;
  }
  if (!tok::utf8_is_valid(out)) return tok::utf8_sanitize(out);
  return out;
}

const std::string& Tokenizer::piece(int32_t id) const {
  if (id < 0 || id >= impl_->vocab.size()) {
    fail("token id {} is outside the vocabulary of {} tokens ({})", id, impl_->vocab.size(),
         impl_->source);
  }
  return impl_->vocab.piece[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= impl_->vocab.size()) {
    fail("token id {} is outside the vocabulary of {} tokens ({})", id, impl_->vocab.size(),
         impl_->source);
  }
  return impl_->vocab.text[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = impl_->vocab.find(text);
  if (id < 0) return std::nullopt;
  return id;
}

int32_t Tokenizer::n_vocab() const {
  return impl_->vocab.size();
}
int32_t Tokenizer::bos_id() const {
  return impl_->bos_id;
}
int32_t Tokenizer::pad_id() const {
  return impl_->pad_id;
}
std::vector<int32_t> Tokenizer::eos_ids() const {
  return impl_->eos_ids;
}
bool Tokenizer::add_bos_default() const {
  return impl_->add_bos_default;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->vocab.size() && impl_->special[id];
}

const std::string& Tokenizer::chat_template() const {
  return impl_->chat_template;
}
std::string Tokenizer::kind() const {
  return impl_->kind;
}
const std::string& Tokenizer::source() const {
  return impl_->source;
}

}  // namespace strata
