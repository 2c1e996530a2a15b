// The forward pass of both families (OPT, Llama incl. Qwen2 and Mistral)
// written once against the Backend, over one micro-batch: a flat batch of
// the new tokens of several sequences of different lengths, no padding, with
// per-token positions and per-sequence page tables into the paged KV cache.
//
//   embed:  hidden = token_embd[token] (+ position_embd[pos + pos_offset], OPT)
//   layer:  h = norm(hidden); q,k,v = h.W^T (+ b); RoPE(q, k) (Llama);
//           append k, v to the cache; a = attention(q, cached + new keys);
//           hidden += a.Wo^T (+ b); h = norm(hidden);
//           hidden += down(silu(gate(h)) * up(h))       (Llama, SwiGLU)
//           hidden += fc2(act(fc1(h) + b1)) + b2        (OPT)
//   head:   logits = norm(hidden[rows]).output^T, for the listed rows only
//
// (layer is also offered in two halves around the KV append and attention,
// layer_qkv and layer_out, for a caller that runs those elsewhere.)
// Activations between the calls live in the caller's `hidden`
// ([n_tokens, n_embd] f32, device); everything else is scratch owned here,
// grown to the largest micro-batch seen. The forward reads weights where
// the views point and never loads anything; it does not know about steps,
// blocks or schedules.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/kv_layout.h"  // kSparseFirstLayer
#include "kernels/backend.h"
#include "model/config.h"
#include "model/layer_weights.h"

namespace strata {

// One micro-batch as the engine builds it on the host. Sequence s owns the
// token rows [q_indptr[s], q_indptr[s+1]); its first new token sits at
// position kv_len[s] - (q_indptr[s+1] - q_indptr[s]).
struct MicroBatchHost {
  std::vector<int32_t> tokens;       // [n_tokens] token ids
  std::vector<int32_t> positions;    // [n_tokens]
  std::vector<int32_t> pos_ids;      // [n_tokens] positions + pos_offset (learned positions only)
  std::vector<int32_t> q_indptr{0};  // [n_seq + 1]
  std::vector<int32_t> kv_len;       // [n_seq] keys after this step's tokens
  std::vector<int32_t> page_indptr{0};  // [n_seq + 1]
  std::vector<int32_t> page_ids;        // [page_indptr[n_seq]]
  std::vector<int64_t> slots;           // [n_tokens] page * page_size + offset of each new token
  std::vector<int32_t> touched;         // [n_touched] pages written by this step's tokens
  std::vector<int32_t> n_filled;        // [n_touched] tokens in each touched page after the step
  std::vector<int32_t> out_rows;        // [n_out] token rows whose logits the head computes
  // Pages whose key min/max are stale (a truncation dropped keys folded into
  // them: speculation's rejected drafts), each with its keys before this
  // step: recomputed (Backend::key_minmax) before the step's keys are folded.
  std::vector<int32_t> stale, stale_filled;
  // Sparse decode attention (plan_sparse): the layout of each sequence's
  // page selections (kernels/cpu/page_select.h), empty when every layer runs
  // dense; sel_ids receives the selections (the op writes it).
  std::vector<int32_t> sel_indptr, sel_kv_len;
  mutable std::vector<int32_t> sel_ids;
  // A decode step that feeds a sequence more than one token (speculation's
  // draft tokens) selects per row: row i is a sequence of its own that holds
  // the keys up to its position (the row view: identity q_indptr, kv_len
  // positions[i] + 1, its sequence's pages up to that key), so each row
  // selects and attends as the step that fed it alone would. Empty when
  // every sequence has one row (the selection reads the sequences).
  std::vector<int32_t> row_q_indptr, row_kv_len, row_page_indptr, row_page_ids;
  int64_t sparse_budget_pages = 0;
  bool sparse_keep_first = false;
  int64_t sparse_lists = 1;  // n_kv_head when planned

  int64_t n_seq() const { return static_cast<int64_t>(kv_len.size()); }
  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // Whether add_sequence lists the pages it writes (touched, n_filled): their
  // key min/max serve sparse attention only, so a run without it lists none
  // and kv_append folds nothing. A setting: clear() keeps it.
  bool track_touched = true;
  void clear();
  // Appends a sequence whose new tokens `tokens` start at position `start`
  // (tokens 0..start-1 are cached); `pages` is its page table covering
  // start + tokens.size() keys. all_rows: every new token's logits are
  // wanted (scoring), else only the last one's. pos_offset < 0: no learned
  // positions.
  // stale_minmax: the key min/max of the page holding position start - 1
  // are stale (listed in `stale` when track_touched and the page is partly
  // filled).
  void add_sequence(std::span<const int32_t> tokens, int64_t start, std::span<const int32_t> pages,
                    int64_t page_size, bool all_rows, int64_t pos_offset,
                    bool stale_minmax = false);
  // After the sequences of a decode step are added: layers from
  // kSparseFirstLayer on select `budget_pages` pages per sequence (per row
  // when a sequence has several: the row view) and kv head, keeping the
  // first page too when keep_first and the budget has room, when one of them
  // has more pages than the budget; otherwise every layer stays dense.
  void plan_sparse(int64_t budget_pages, bool keep_first, int64_t n_kv_head, int64_t page_size);

 private:
  void clear_sparse();  // every layer dense: no selections, no row view
};

struct MicroBatch;

// Told of a sparse layer's page selections between the selection and the
// attention that reads them (the offload engine reads the selected pages
// whose KV is on disk and not yet in memory). Selections are in host
// memory: only a backend that computes on host memory selects pages.
class SelectionListener {
 public:
  virtual void selected(int64_t layer, const MicroBatch& mb) = 0;

 protected:
  ~SelectionListener() = default;
};

// The same arrays on the device.
struct MicroBatch {
  int64_t n_tokens = 0;
  int64_t n_touched = 0;
  int64_t n_out = 0;
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* pos_ids = nullptr;
  AttentionSeqs seqs;
  const int64_t* slots = nullptr;
  const int32_t* touched = nullptr;
  const int32_t* n_filled = nullptr;
  const int32_t* out_rows = nullptr;
  int64_t n_stale = 0;
  const int32_t* stale = nullptr;
  const int32_t* stale_filled = nullptr;
  // Sparse decode attention: n_seq 0 when every layer is dense; else the
  // selections' batch (lists = n_kv_head, page ids in sel_ids, written by
  // Backend::select_pages from the layer's query), one sequence per row of
  // `select` (the batch the selection reads: seqs, or the row view).
  AttentionSeqs sparse;
  AttentionSeqs select;
  int32_t* sel_ids = nullptr;
  int64_t sparse_budget_pages = 0;
  bool sparse_keep_first = false;
  SelectionListener* on_selected = nullptr;  // set by the caller after upload; may stay null
};

// Points a MicroBatch at the host arrays when the backend computes on host
// memory; otherwise copies them into `storage` (grown as needed) and points
// there. The host arrays must outlive the MicroBatch.
MicroBatch upload_micro_batch(Backend& backend, const MicroBatchHost& host, DeviceBuffer& storage);

// inv_freq[i] = theta^(-2i/rot_dim), scaled as transformers does (linear,
// llama3) and divided by GGUF's rope_freq_factors; [rot_dim / 2].
std::vector<float> rope_inv_freq(const ModelConfig& c, int64_t rot_dim);

class Forward {
 public:
  // compute: f32 or bf16 (the matmul inputs; everything else is f32).
  // Throws Error for a model shape the forward cannot run.
  Forward(Backend& backend, const ModelConfig& config, DType compute);

  const ModelConfig& config() const { return c_; }
  DType compute() const { return compute_; }

  // hidden: [mb.n_tokens, n_embd]
  void embed(const GlobalWeights& w, const MicroBatch& mb, float* hidden);
  // Layer j over the micro-batch: appends its k/v to kv, updates hidden in place.
  void layer(int64_t j, const LayerWeights& w, const KvLayer& kv, const MicroBatch& mb,
             float* hidden);
  // The same layer in two halves around its KV append and attention, for a
  // caller that runs those elsewhere (attention on the CPU beside a GPU):
  // layer_qkv writes the rows of q, k, v after RoPE to qkv ([n_tokens,
  // qkv_dim()], device); layer_out takes the attention rows ([n_tokens,
  // q_dim()], device) and finishes the layer on hidden. The scale the
  // attention must use is attention_scale().
  void layer_qkv(const LayerWeights& w, const MicroBatch& mb, const float* hidden, float* qkv);
  void layer_out(const LayerWeights& w, const MicroBatch& mb, const float* attn, float* hidden);
  int64_t q_dim() const { return q_dim_; }
  int64_t qkv_dim() const { return qkv_dim_; }
  float attention_scale() const { return attn_scale_; }
  // logits: [mb.n_out, n_vocab], row r for token row mb.out_rows[r].
  void head(const GlobalWeights& w, const MicroBatch& mb, const float* hidden, float* logits);

  // Scratch bytes held now.
  size_t workspace_bytes() const { return ws_.size(); }
  // Grows the scratch for micro-batches of up to n_tokens tokens.
  void reserve(int64_t n_tokens);

 private:
  void norm(float* y, const float* x, const float* w, const float* b, int64_t n_rows);

  Backend& be_;
  ModelConfig c_;
  DType compute_;
  int64_t q_dim_ = 0, kv_dim_ = 0, qkv_dim_ = 0;
  int64_t rot_dim_ = 0;
  RopePairs pairs_ = RopePairs::kHalf;
  ActFn act_ = ActFn::kSilu;
  float attn_scale_ = 1.0f;
  DeviceBuffer inv_freq_;  // [rot_dim / 2]
  DeviceBuffer ws_;
  int64_t ws_tokens_ = 0;
  float* normed_ = nullptr;  // [ws_tokens, n_embd]
  float* qkv_ = nullptr;     // [ws_tokens, q_dim + 2 kv_dim]
  float* attn_ = nullptr;    // [ws_tokens, q_dim]
  float* proj_ = nullptr;    // [ws_tokens, n_embd]
  float* ffn_ = nullptr;     // [ws_tokens, 2 n_ff]
};

}  // namespace strata
