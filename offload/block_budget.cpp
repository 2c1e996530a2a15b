// The block's memory (block_budget.h).
#include "offload/block_budget.h"

#include <algorithm>

#include "kernels/cpu/attention_quant.h"
#include "offload/kv_file.h"

namespace strata {

int64_t largest_group(const std::vector<int64_t>& n_new) {
  int64_t best = 0, cur = 0;
  bool open = false;
  for (int64_t n : n_new) {
    if (!open || cur + n > kMaxGroupTokens) {
      cur = 0;
      open = true;
    }
    cur += n;
    best = std::max(best, cur);
  }
  return best;
}

uint64_t forward_scratch_bytes(const ModelConfig& c, int64_t t) {
  const int64_t q = c.n_head * c.head_dim, kv = c.n_kv_head * c.head_dim;
  const int64_t per_token = 2 * c.n_embd + (q + 2 * kv) + q + 2 * c.n_ff;
  return static_cast<uint64_t>(t * per_token + 5 * 16) * sizeof(float);
}

BlockShape BlockShape::full(int64_t gpu_batch, int64_t n_micro_batches, int64_t prompt,
                            int64_t new_tokens, int64_t decode_tokens) {
  BlockShape s;
  s.decode_tokens = decode_tokens;
  s.stored.assign(static_cast<size_t>(n_micro_batches),
                  std::vector<int64_t>(static_cast<size_t>(gpu_batch), prompt + new_tokens - 1));
  s.prompt.assign(static_cast<size_t>(n_micro_batches),
                  std::vector<int64_t>(static_cast<size_t>(gpu_batch), prompt));
  return s;
}

BlockShape BlockShape::full(int64_t gpu_batch, int64_t n_micro_batches, int64_t prompt,
                            int64_t new_tokens, int64_t decode_tokens, const PlanSharing& sharing) {
  BlockShape s = full(gpu_batch, n_micro_batches, prompt, new_tokens, decode_tokens);
  if (sharing.seqs <= 0 || sharing.pages <= 0) return s;
  s.shared.assign(static_cast<size_t>(n_micro_batches),
                  std::vector<int64_t>(static_cast<size_t>(gpu_batch), 0));
  int64_t left = sharing.seqs;
  for (auto mb = s.shared.rbegin(); mb != s.shared.rend() && left > 0; ++mb) {
    for (auto seq = mb->rbegin(); seq != mb->rend() && left > 0; ++seq, --left) {
      *seq = sharing.pages;
    }
  }
  return s;
}

uint64_t draft_block_bytes(const DraftMemory& d, const BlockShape& shape) {
  if (d.page_bytes == 0) return 0;
  uint64_t pages = 0;
  int64_t n_seqs = 0;
  for (const std::vector<int64_t>& mb : shape.stored) {
    for (const int64_t stored : mb) {
      const int64_t longest = std::min(stored + shape.decode_tokens, d.n_ctx);
      pages += static_cast<uint64_t>((longest + d.page_size - 1) / d.page_size);
      ++n_seqs;
    }
  }
  return std::max<uint64_t>(pages, 1) * d.page_bytes +
         static_cast<uint64_t>(std::min(n_seqs, d.max_rows)) * d.row_bytes;
}

uint64_t kv_dequant_bytes(const KvGeometry& g, const BlockShape& shape) {
  if (!is_quantized(g.dtype)) return 0;
  // K and V of one page as f32.
  const uint64_t page_pair = 2 * static_cast<uint64_t>(g.page_size * g.row()) * sizeof(float);
  uint64_t longest = 0, largest_mb = 0;
  for (const std::vector<int64_t>& mb : shape.stored) {
    uint64_t total = 0;
    for (const int64_t stored : mb) {
      const uint64_t seq =
          static_cast<uint64_t>(g.pages_for(stored + shape.decode_tokens)) * page_pair;
      longest = std::max(longest, seq);
      total += seq;
    }
    largest_mb = std::max(largest_mb, total);
  }
  return std::max(std::min(cpu::kKvDequantBytes, largest_mb), longest);
}

BlockMemory block_memory(const ModelConfig& c, const KvGeometry& g, const Placement& placement,
                         const BlockShape& shape, const DraftMemory& draft) {
  const uint64_t record = KvFile::record_bytes_for(g);
  BlockMemory m;
  m.kv = kv_block_needs(g, placement, shape.stored, shape.decode_tokens, shape.shared,
                        shape.disk_extent);
  m.kv_pages = static_cast<uint64_t>(m.kv.backed_pages) * g.bytes_per_page();
  m.kv_staging = 2 * static_cast<uint64_t>(m.kv.stage_records) * record;
  m.kv_disk = static_cast<uint64_t>(c.n_layer) * static_cast<uint64_t>(m.kv.disk_pages) * record;
  const int64_t q_dim = c.n_head * c.head_dim, qkv_dim = q_dim + 2 * c.n_kv_head * c.head_dim;
  int64_t rows = 0;
  for (const std::vector<int64_t>& p : shape.prompt) {
    int64_t prefill = 0;
    for (int64_t n : p) prefill += n;
    // A decode step feeds each sequence up to decode_tokens tokens, a
    // logits row each (scoring has no decode step).
    const auto n_seq = static_cast<int64_t>(p.size());
    const int64_t decode = shape.all_rows ? 0 : n_seq * shape.decode_tokens;
    const int64_t tokens = std::max(prefill, decode);
    m.hidden_tokens.push_back(tokens);
    m.hidden += static_cast<uint64_t>(tokens * c.n_embd) * sizeof(float);
    m.attention_rows += static_cast<uint64_t>(tokens * (qkv_dim + q_dim)) * sizeof(float);
    m.group_tokens = std::max(
        {m.group_tokens, largest_group(p),
         largest_group(std::vector<int64_t>(static_cast<size_t>(n_seq), shape.decode_tokens))});
    rows += shape.all_rows ? prefill : std::max(n_seq, decode);
  }
  m.scratch = forward_scratch_bytes(c, m.group_tokens);
  m.logits = static_cast<uint64_t>(rows * c.n_vocab) * sizeof(float);
  m.draft = draft_block_bytes(draft, shape);
  m.kv_dequant = kv_dequant_bytes(g, shape);
  return m;
}

BlockTiers block_tiers(const BlockMemory& m, MemoryMode mode) {
  BlockTiers t;
  t.disk = m.kv_disk;
  t.ram = m.draft;  // the draft model computes on the CPU
  switch (mode) {
    case MemoryMode::kHostMemory:
      t.kv_ram = m.kv_pages + m.kv_staging;
      t.ram += t.kv_ram + m.working() + m.kv_dequant;
      break;
    case MemoryMode::kDeviceMemory:
      // The KV cache and its staging in device memory, the staging relayed
      // through RAM; the logits copied back to RAM.
      t.kv_device = m.kv_pages + m.kv_staging;
      t.kv_ram = m.kv_staging;
      t.device = m.working() + t.kv_device;
      t.ram += t.kv_ram + m.logits;
      break;
    case MemoryMode::kCpuAttention:
      // The KV cache and its staging in RAM; each micro-batch's q/k/v and
      // attention rows on the device and in RAM.
      t.kv_device = m.attention_rows;
      t.kv_ram = m.kv_pages + m.kv_staging + m.attention_rows;
      t.device = m.working() + t.kv_device;
      t.ram += t.kv_ram + m.logits + m.kv_dequant;
      break;
  }
  return t;
}

}  // namespace strata
