// The draft model (draft_model.h).
#include "draft/draft_model.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "generate/sampler.h"
#include "io/one_line.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

KvGeometry draft_geometry(const ModelConfig& c) {
  KvGeometry g;
  g.n_layer = c.n_layer;
  g.n_kv_head = c.n_kv_head;
  g.head_dim = c.head_dim;
  g.dtype = DType::kF32;
  g.page_size = 16;
  return g;
}

}  // namespace

void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft,
                           const std::string& draft_path) {
  if (draft.n_vocab() != target.n_vocab()) {
    fail(
        "--draft-model {}: its tokenizer has {} tokens, the model's {}; a draft model needs the "
        "model's tokenizer",
        draft_path, draft.n_vocab(), target.n_vocab());
  }
  for (int32_t id = 0; id < target.n_vocab(); ++id) {
    if (draft.token_text(id) != target.token_text(id)) {
      fail(
          "--draft-model {}: token {} is {} in its tokenizer, {} in the model's; a draft model "
          "needs the model's tokenizer",
          draft_path, id, one_line(draft.token_text(id), 40), one_line(target.token_text(id), 40));
    }
  }
  if (draft.bos_id() != target.bos_id() || draft.eos_ids() != target.eos_ids()) {
    fail("--draft-model {}: its tokenizer's BOS or EOS tokens differ from the model's", draft_path);
  }
}

DraftModel::DraftModel(const Model& model, const DraftModelOptions& options)
    : model_(model), opt_(options), backend_(std::make_unique<CpuBackend>(options.threads)) {
  const ModelConfig& c = model.config();
  if (opt_.n_sample <= 0 || opt_.n_sample > c.n_vocab) opt_.n_sample = c.n_vocab;
  opt_.max_pass_tokens = std::max<int64_t>(opt_.max_pass_tokens, 1);
  weights_ = std::make_unique<ResidentWeights>(model, *backend_);
  fwd_ = std::make_unique<Forward>(*backend_, c, opt_.compute);
  fwd_->reserve(opt_.max_pass_tokens);  // its largest pass: memory() counts it
  const KvGeometry g = draft_geometry(c);
  kv_ = std::make_unique<KvCache>(*backend_, g, g.bytes_per_page());
}

DraftModel::~DraftModel() = default;

DraftMemory DraftModel::memory() const {
  const ModelConfig& c = model_.config();
  const KvGeometry& g = kv_->geometry();
  // The forward's working memory (reserved for its largest pass when made)
  // and the hidden state of that pass.
  DraftMemory d;
  d.fixed = weights_->matrix_bytes() + weights_->vector_bytes() + fwd_->workspace_bytes() +
            static_cast<uint64_t>(opt_.max_pass_tokens * c.n_embd) * sizeof(float);
  d.page_bytes = g.bytes_per_page();
  d.page_size = g.page_size;
  d.n_ctx = c.n_ctx;
  d.row_bytes = static_cast<uint64_t>(c.n_vocab) * sizeof(float);
  d.max_rows = opt_.max_pass_tokens;
  return d;
}

void DraftModel::begin_block(std::span<const SeqInput> seqs, int64_t max_draft) {
  for (const Seq& s : seqs_) {
    if (s.kv >= 0) kv_->remove_sequence(s.kv);
  }
  seqs_.assign(seqs.size(), Seq{});
  // Every sequence at its longest: its context and a draft (the last draft
  // token is never fed), within the draft's context.
  const KvGeometry& g = kv_->geometry();
  int64_t pages = 0;
  for (const SeqInput& s : seqs) {
    const int64_t longest = static_cast<int64_t>(s.prompt.size()) + s.max_new_tokens + max_draft;
    pages += g.pages_for(std::min(longest, model_.config().n_ctx));
  }
  kv_->pool().set_budget(static_cast<uint64_t>(std::max<int64_t>(pages, 1)) * g.bytes_per_page());
}

void DraftModel::finished(int32_t seq) {
  STRATA_ASSERT(seq >= 0 && static_cast<size_t>(seq) < seqs_.size());
  Seq& s = seqs_[static_cast<size_t>(seq)];
  if (s.kv >= 0) kv_->remove_sequence(s.kv);
  s = Seq{};
}

std::span<const int32_t> DraftModel::cached(int32_t seq) const {
  STRATA_ASSERT(seq >= 0 && static_cast<size_t>(seq) < seqs_.size());
  return seqs_[static_cast<size_t>(seq)].cached;
}

int64_t DraftModel::pages_in_use() const {
  return kv_->pool().n_used();
}

void DraftModel::propose(std::span<const Request> requests, std::span<std::vector<int32_t>> out) {
  STRATA_ASSERT(out.size() == requests.size());
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n_ctx = model_.config().n_ctx;
  std::vector<std::vector<int32_t>> feed(requests.size());
  std::vector<size_t> live;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& q = requests[i];
    out[i].clear();
    STRATA_ASSERT(q.seq >= 0 && static_cast<size_t>(q.seq) < seqs_.size());
    const auto n = static_cast<int64_t>(q.context.size());
    // The draft feeds positions 0 .. n + k - 2.
    if (n == 0 || q.k <= 0 || n + q.k - 1 > n_ctx) continue;
    Seq& s = seqs_[static_cast<size_t>(q.seq)];
    if (s.kv < 0) s.kv = kv_->add_sequence();
    // Keep the keys of the common prefix (at least the last token is fed:
    // its logits give the first draft token).
    const auto common = static_cast<int64_t>(
        std::mismatch(s.cached.begin(), s.cached.end(), q.context.begin(), q.context.end()).first -
        s.cached.begin());
    const int64_t keep = std::min(common, n - 1);
    kv_->truncate(s.kv, static_cast<int64_t>(s.cached.size()) - keep);
    s.cached.resize(static_cast<size_t>(keep));
    feed[i].assign(q.context.begin() + keep, q.context.end());
    live.push_back(i);
  }
  // Pass 0 feeds what each sequence lacks; every later pass the token the
  // one before chose, for the sequences that want more.
  while (!live.empty()) {
    pass(live, requests, feed, out);
    std::erase_if(live,
                  [&](size_t i) { return static_cast<int64_t>(out[i].size()) >= requests[i].k; });
    for (size_t i : live) feed[i].assign(1, out[i].back());
  }
  for (const auto& o : out) stats_.proposed += static_cast<int64_t>(o.size());
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DraftModel::pass(std::span<const size_t> which, std::span<const Request> requests,
                      std::span<std::vector<int32_t>> feed, std::span<std::vector<int32_t>> out) {
  const int64_t most = opt_.max_pass_tokens;
  size_t begin = 0;
  while (begin < which.size()) {
    // Sequences in order until the pass has `most` tokens (at least one).
    size_t end = begin;
    int64_t tokens = 0;
    while (end < which.size() &&
           (end == begin || tokens + static_cast<int64_t>(feed[which[end]].size()) <= most)) {
      tokens += static_cast<int64_t>(feed[which[end]].size());
      ++end;
    }
    // A prompt longer than a pass: its first tokens alone, then the rest.
    const size_t i = which[begin];
    if (end == begin + 1 && tokens > most) {
      std::vector<int32_t> rest(feed[i].begin() + most, feed[i].end());
      feed[i].resize(static_cast<size_t>(most));
      forward_chunk(which.subspan(begin, 1), requests, feed, out, /*choose=*/false);
      feed[i] = std::move(rest);
      continue;  // the same sequence again, with what is left
    }
    forward_chunk(which.subspan(begin, end - begin), requests, feed, out, /*choose=*/true);
    begin = end;
  }
}

void DraftModel::forward_chunk(std::span<const size_t> chunk, std::span<const Request> requests,
                               std::span<std::vector<int32_t>> feed,
                               std::span<std::vector<int32_t>> out, bool choose) {
  const ModelConfig& c = model_.config();
  const int64_t page = kv_->geometry().page_size;
  const int64_t pos_offset = c.learned_pos ? c.pos_offset : -1;
  host_.clear();
  host_.track_touched = false;  // dense attention: no key min/max
  for (size_t i : chunk) {
    Seq& s = seqs_[static_cast<size_t>(requests[i].seq)];
    const int64_t start = kv_->extend(s.kv, static_cast<int64_t>(feed[i].size()));
    STRATA_ASSERT(start == static_cast<int64_t>(s.cached.size()));
    host_.add_sequence(feed[i], start, kv_->pages(s.kv), page, false, pos_offset);
    s.cached.insert(s.cached.end(), feed[i].begin(), feed[i].end());
  }
  const int64_t n_tokens = host_.n_tokens(), n_out = host_.n_seq();
  const size_t hidden_bytes = static_cast<size_t>(n_tokens * c.n_embd) * sizeof(float);
  const size_t logits_bytes = static_cast<size_t>(n_out * c.n_vocab) * sizeof(float);
  if (hidden_.size() < hidden_bytes) hidden_ = backend_->alloc(hidden_bytes);
  if (logits_.size() < logits_bytes) logits_ = backend_->alloc(logits_bytes);
  fwd_->reserve(n_tokens);
  const MicroBatch mb = upload_micro_batch(*backend_, host_, meta_);
  float* hidden = hidden_.as<float>();
  fwd_->embed(weights_->global(), mb, hidden);
  for (int64_t j = 0; j < c.n_layer; ++j) {
    fwd_->layer(j, weights_->layer(j), kv_->pool().layer(j), mb, hidden);
  }
  fwd_->head(weights_->global(), mb, hidden, logits_.as<float>());
  const float* logits = logits_.as<float>();
  for (size_t r = 0; choose && r < chunk.size(); ++r) {
    out[chunk[r]].push_back(argmax(std::span<const float>(
        logits + static_cast<int64_t>(r) * c.n_vocab, static_cast<size_t>(opt_.n_sample))));
  }
  ++stats_.passes;
  stats_.fed_tokens += n_tokens;
}

}  // namespace strata
