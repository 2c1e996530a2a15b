// The zig-zag block schedule (DESIGN §4) as plain data: the ordered list of
// steps of one block, generated once by a pure function, printed, tested and
// consumed by the engine (and later by the executor, a dry run and the
// tracer). For generation step i (0 = prefill), for column j (the input
// embedding, the n_layer transformer layers, the head), for micro-batch k:
// compute(i, j, k). A column visits every micro-batch before the next column
// starts, so a column's weights serve the whole block once per step.
//
// Each step has room for the transfers that overlap its compute (loads of
// the next column's weights and the next micro-batch's KV and activations,
// stores of the previous micro-batch's): this generator leaves them empty;
// the offload work fills them from the placement policy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// What a column of the grid computes.
enum class StageKind : uint8_t {
  kEmbed,  // token (+ position) embedding into the micro-batch's hidden
  kLayer,  // one transformer layer
  kHead,   // final norm + lm_head for the rows whose logits are wanted
};

// A data movement attached to a step (filled by the offload work).
struct Transfer {
  enum class What : uint8_t { kWeights, kKv, kActivations };
  What what = What::kWeights;
  int32_t column = 0;       // whose weights / KV / activations
  int32_t micro_batch = 0;  // KV and activations only
};

struct ScheduleStep {
  int32_t step = 0;         // i: 0 = prefill, then decode steps
  int32_t column = 0;       // j: 0 = embed, 1..n_layer = layers, n_layer + 1 = head
  int32_t micro_batch = 0;  // k
  StageKind kind = StageKind::kLayer;
  int32_t layer = -1;            // transformer layer (column - 1) for kLayer, else -1
  std::vector<Transfer> loads;   // issued before / overlapping this compute
  std::vector<Transfer> stores;  // issued after this compute
};

struct ScheduleShape {
  int64_t n_steps = 1;          // prefill + decode steps (the block's longest generation)
  int64_t n_layer = 0;          // transformer layers
  int64_t n_micro_batches = 1;  // micro-batches per block
  int64_t n_columns() const { return n_layer + 2; }
  int64_t n_compute() const { return n_steps * n_columns() * n_micro_batches; }
};

// Steps in schedule order: index ((i * n_columns) + j) * n_micro_batches + k.
// Throws Error for a shape with a non-positive count.
std::vector<ScheduleStep> make_block_schedule(const ScheduleShape& shape);

// One line per step, "i=0 j=3 (layer 2) k=1", for dry runs and tests.
std::string format_schedule(const std::vector<ScheduleStep>& steps);

}  // namespace strata
