#include "kernels/cuda/launch_plan.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/dispatch.h"

namespace strata::cuda {

namespace {

thread_local std::string g_detail;

}  // namespace

void note_unsupported(std::string_view what, int64_t value, std::string_view supported) {
  note_unsupported(what, std::string_view(std::to_string(value)), supported);
}

void note_unsupported(std::string_view what, std::string_view value, std::string_view supported) {
  g_detail.assign(what);
  g_detail += ' ';
  g_detail += value;
  g_detail += " (supported: ";
  g_detail += supported;
  g_detail += ')';
}

void note_detail(std::string_view detail) {
  g_detail.assign(detail);
}

void clear_detail() {
  g_detail.clear();
}

std::string_view last_detail() {
  return g_detail;
}

int64_t grid_blocks(int64_t n, int64_t per_block, int64_t max_blocks) {
  if (n <= 0) return 0;
  return std::min(max_blocks, (n + per_block - 1) / per_block);
}

Status plan_matmul(DType w_dtype, DType compute, int64_t m, int64_t n, int64_t k,
                   MatmulPlan* plan) {
  *plan = MatmulPlan{};
  if (compute != DType::kF32 && compute != DType::kBF16) {
    note_unsupported("compute dtype", dtype_name(compute), "f32, bf16");
    return Status::kUnsupported;
  }
  const bool quantized = is_quantized(w_dtype);
  if (!quantized && w_dtype != DType::kF32 && w_dtype != DType::kF16 && w_dtype != DType::kBF16) {
    note_unsupported("weight dtype", dtype_name(w_dtype), "f32, f16, bf16, quantized");
    return Status::kUnsupported;
  }
  if (m < 0 || n < 0 || k < 0 || !row_elems_ok(w_dtype, k)) return Status::kInvalidArgument;

  if (w_dtype == DType::kF16 || w_dtype == DType::kBF16) {
    plan->path = MatmulPath::kGemm;
    plan->operand = w_dtype;
  } else if (w_dtype == DType::kF32 && compute == DType::kF32) {
    plan->path = MatmulPath::kGemm;
    plan->operand = DType::kF32;
  } else if (quantized && m <= kGemvMaxM) {
    plan->path = MatmulPath::kGemv;
    plan->operand = compute;
  } else {
    plan->path = MatmulPath::kGemmPanels;
    plan->operand = compute;
  }
  if (plan->path == MatmulPath::kGemv || m == 0 || n == 0 || k == 0) return Status::kOk;

  const size_t op_bytes = plan->operand == DType::kF32 ? 4 : 2;
  plan->convert_x = plan->operand != DType::kF32;
  if (plan->convert_x) {
    plan->x_bytes = align_workspace(static_cast<size_t>(m) * static_cast<size_t>(k) * op_bytes);
  }
  if (plan->path == MatmulPath::kGemmPanels) {
    const size_t row = static_cast<size_t>(k) * op_bytes;
    plan->panel_rows = std::clamp<int64_t>(static_cast<int64_t>(kPanelBytes / row), 1, n);
    plan->panel_bytes = align_workspace(static_cast<size_t>(plan->panel_rows) * row);
  }
  return Status::kOk;
}

AttentionPlan plan_attention(int64_t n_seq, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                             int n_sm) {
  AttentionPlan p;
  p.n_seq = n_seq;
  p.n_head = n_head;
  p.head_dim = head_dim;
  const int64_t items = std::max<int64_t>(1, n_seq * std::max<int64_t>(1, n_kv_head));
  const int64_t target = kAttnBlocksPerSm * std::max(1, n_sm);
  const int64_t want = (target + items - 1) / items;
  p.decode_splits = std::clamp<int64_t>(want, 1, kMaxDecodeSplits);
  p.prefill_splits = std::clamp<int64_t>(want, 1, kMaxPrefillSplits);
  if (p.decode_splits > 1) {
    p.partial_bytes =
        align_workspace(static_cast<size_t>(n_seq * n_head * p.decode_splits * (head_dim + 2)) * 4);
  }
  return p;
}

}  // namespace strata::cuda
