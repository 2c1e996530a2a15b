#include "offload/schedule.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

std::vector<ScheduleStep> make_block_schedule(const ScheduleShape& s) {
  if (s.n_steps < 1 || s.n_layer < 1 || s.n_micro_batches < 1) {
    fail(
        "schedule shape {} steps x {} layers x {} micro-batches is not valid; each must be 1 or "
        "more",
        s.n_steps, s.n_layer, s.n_micro_batches);
  }
  if (s.n_compute() > (int64_t{1} << 31)) {
    fail("schedule of {} steps x {} layers x {} micro-batches has too many steps", s.n_steps,
         s.n_layer, s.n_micro_batches);
  }
  std::vector<ScheduleStep> out;
  out.reserve(static_cast<size_t>(s.n_compute()));
  const int64_t n_col = s.n_columns();
  for (int64_t i = 0; i < s.n_steps; ++i) {
    for (int64_t j = 0; j < n_col; ++j) {
      for (int64_t k = 0; k < s.n_micro_batches; ++k) {
        ScheduleStep st;
        st.step = static_cast<int32_t>(i);
        st.column = static_cast<int32_t>(j);
        st.micro_batch = static_cast<int32_t>(k);
        st.kind = j == 0           ? StageKind::kEmbed
                  : j == n_col - 1 ? StageKind::kHead
                                   : StageKind::kLayer;
        st.layer = st.kind == StageKind::kLayer ? static_cast<int32_t>(j - 1) : -1;
        out.push_back(std::move(st));
      }
    }
  }
  return out;
}

namespace {

const char* transfer_name(Transfer::What w) {
  switch (w) {
    case Transfer::What::kWeights:
      return "weights";
    case Transfer::What::kKv:
      return "kv";
    case Transfer::What::kActivations:
      return "activations";
  }
  return "unknown";
}

}  // namespace

std::string format_schedule(const std::vector<ScheduleStep>& steps) {
  std::string out;
  for (const ScheduleStep& st : steps) {
    const std::string what = st.kind == StageKind::kEmbed  ? "embed"
                             : st.kind == StageKind::kHead ? "head"
                                                           : fmt::format("layer {}", st.layer);
    out += fmt::format("i={} j={} ({}) k={}", st.step, st.column, what, st.micro_batch);
    for (const Transfer& t : st.loads) {
      out += fmt::format(" load({} j={} k={})", transfer_name(t.what), t.column, t.micro_batch);
    }
    for (const Transfer& t : st.stores) {
      out += fmt::format(" store({} j={} k={})", transfer_name(t.what), t.column, t.micro_batch);
    }
    out += '\n';
  }
  return out;
}

}  // namespace strata
