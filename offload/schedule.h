// The zig-zag block schedule (docs/DESIGN.md §3) as plain data: the ordered list of
// steps of one block, generated once by a pure function, printed, tested and
// consumed by the engine (and later by the executor, a dry run and the
// tracer). For generation step i (0 = prefill), for column j (the input
// embedding, the n_layer transformer layers, the head), for micro-batch k:
// compute(i, j, k). A column visits every micro-batch before the next column
// starts, so a column's weights serve the whole block once per step.
//
// Each step carries the transfers that overlap its compute, derived from a
// TransferPlan (which data lives off the compute device): its loads are
// issued before it computes and serve a later step; its stores are issued
// before it computes and save what an earlier step produced:
//   - weights of column j (when some of them are off the device): loaded
//     once per generation step, by the first micro-batch of column j-1 (of
//     column n_columns-1 of the previous step for j = 0; the very first
//     column by step (0, 0, 0) itself, which has nothing to overlap with).
//     With double buffers, column j's buffer is column j-2's, and column
//     j-1 starts after column j-2 has finished with it;
//   - KV of layer step (i, j, k) with i >= 1 (decode; a prefill reads no
//     earlier KV, but for pages kept from an earlier block:
//     TransferPlan::kv_first_load_step): loaded by the compute step just before it, (j, k-1) or
//     the last micro-batch of column j-1; the KV a layer step writes is
//     stored by the compute step just after it, (j, k+1) or the first
//     micro-batch of column j+1;
//   - activations (the hidden state of micro-batch k between columns) when
//     they live off the device: stored after the column that produced them
//     (embed and layers) like KV, and loaded before the next column
//     computes on them, also by the step just before.
// With tied embeddings (TransferPlan::tied_embeddings) the head's weights
// are the embed column's: the embed column of a decode step loads nothing
// and computes from the buffer the head's load of the step before filled
// (ScheduleStep::weights_step), and column 1's load moves up to the head's
// first micro-batch of the step before (the embed column's compute is too
// short to hide it), overlapping the head's compute; its buffer is the last
// layer's, done by then, and the head's stays untouched until column 2's
// load, after the embed column.
// Nothing is loaded twice within a column of one step. The executor
// decides at run time which bytes a transfer moves (a micro-batch whose
// pages are all in RAM moves none).
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

// A data movement attached to a step.
struct Transfer {
  enum class What : uint8_t { kWeights, kKv, kActivations };
  What what = What::kWeights;
  int32_t column = 0;       // whose weights / KV / activations
  int32_t micro_batch = 0;  // KV and activations only
  int32_t step = -1;        // generation step of the data; -1: the step it is attached to
};

struct ScheduleStep {
  int32_t step = 0;         // i: 0 = prefill, then decode steps
  int32_t column = 0;       // j: 0 = embed, 1..n_layer = layers, n_layer + 1 = head
  int32_t micro_batch = 0;  // k
  StageKind kind = StageKind::kLayer;
  int32_t layer = -1;  // transformer layer (column - 1) for kLayer, else -1
  // The weights load whose buffer this compute reads (when its column's
  // weights are off the device): column weights_column's of generation step
  // weights_step; the step's own column and step but for a tied embed column.
  int32_t weights_column = 0;
  int32_t weights_step = 0;
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

// Which data the placement keeps off the compute device (on the CPU device:
// on disk), so that it must be loaded before use and stored after it.
struct TransferPlan {
  std::vector<bool> weights_off;  // [n_columns] or empty (nothing); column j has weights off
  bool kv_off = false;            // some KV pages live off the device
  bool act_off = false;           // activations live off the device between columns
  bool tied_embeddings = false;   // the head's weights are the embed column's
  // The first generation step whose layers load KV: 1 (a prefill reads no
  // earlier KV), or 0 when the block's prompts take pages stored before it
  // (a shared prefix kept from the block before, offload/block_state.h).
  int32_t kv_first_load_step = 1;
};

// Steps in schedule order: index ((i * n_columns) + j) * n_micro_batches + k,
// with no transfers. Throws Error for a shape with a non-positive count.
std::vector<ScheduleStep> make_block_schedule(const ScheduleShape& shape);
// The same steps with the transfers of `plan` attached (rules above).
// Throws Error when plan.weights_off is neither empty nor n_columns long, or
// when tied embeddings have the embed column and the head placed apart.
std::vector<ScheduleStep> make_block_schedule(const ScheduleShape& shape, const TransferPlan& plan);

// One line per step, "i=0 j=3 (layer 2) k=1", then its transfers
// ("load(weights j=4 k=0)", "store(kv j=2 k=0)", with " i=N" before j when
// the data belongs to another generation step), and "weights(i=N j=M)" when
// it computes from another column's load, for dry runs and tests.
std::string format_schedule(const std::vector<ScheduleStep>& steps);

}  // namespace strata
