#include "offload/schedule.h"

#include <algorithm>

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
        st.weights_column = st.column;
        st.weights_step = st.step;
        out.push_back(std::move(st));
      }
    }
  }
  return out;
}

std::vector<ScheduleStep> make_block_schedule(const ScheduleShape& s, const TransferPlan& plan) {
  std::vector<ScheduleStep> out = make_block_schedule(s);
  const int64_t n_col = s.n_columns();
  if (!plan.weights_off.empty() && static_cast<int64_t>(plan.weights_off.size()) != n_col) {
    fail("transfer plan names weights of {} columns; the schedule has {}", plan.weights_off.size(),
         n_col);
  }
  if (plan.kv_first_load_step != 0 && plan.kv_first_load_step != 1) {
    fail("transfer plan loads KV from step {}; use 0 or 1", plan.kv_first_load_step);
  }
  auto index = [&](int64_t i, int64_t j, int64_t k) {
    return static_cast<size_t>((i * n_col + j) * s.n_micro_batches + k);
  };
  auto transfer = [](Transfer::What what, int64_t i, int64_t j, int64_t k) {
    return Transfer{what, static_cast<int32_t>(j), static_cast<int32_t>(k),
                    static_cast<int32_t>(i)};
  };
  const bool any_weights =
      std::find(plan.weights_off.begin(), plan.weights_off.end(), true) != plan.weights_off.end();
  const auto off = [&](int64_t j) {
    return any_weights && plan.weights_off[static_cast<size_t>(j)];
  };
  // Tied embeddings with the table off the device: decode steps' embed
  // columns read the head's load of the step before.
  const bool tied = plan.tied_embeddings && off(0);
  if (plan.tied_embeddings && off(0) != off(n_col - 1)) {
    fail("transfer plan ties the embeddings but places the embed column and the head apart");
  }
  for (int64_t i = 0; i < s.n_steps; ++i) {
    for (int64_t j = 0; j < n_col; ++j) {
      // Weights of column j, once per step, by the first micro-batch of the
      // column before it (tied: none for a decode step's embed column, whose
      // next column's load rides on the head of the step before).
      if (tied && i > 0 && j == 0) {
        for (int64_t k = 0; k < s.n_micro_batches; ++k) {
          out[index(i, 0, k)].weights_column = static_cast<int32_t>(n_col - 1);
          out[index(i, 0, k)].weights_step = static_cast<int32_t>(i - 1);
        }
      } else if (off(j)) {
        size_t at = index(i, j, 0);
        if (j > 1 || (j == 1 && !(tied && i > 0))) {
          at = index(i, j - 1, 0);
        } else if (i > 0) {
          at = index(i - 1, n_col - 1, 0);
        }
        out[at].loads.push_back(transfer(Transfer::What::kWeights, i, j, 0));
      }
      for (int64_t k = 0; k < s.n_micro_batches; ++k) {
        const size_t here = index(i, j, k);
        const bool layer = j >= 1 && j <= s.n_layer;
        // here > 0 for every layer step: the embed column comes first.
        if (plan.kv_off && layer && i >= plan.kv_first_load_step) {
          out[here - 1].loads.push_back(transfer(Transfer::What::kKv, i, j, k));
        }
        if (plan.act_off && j >= 1) {
          out[here - 1].loads.push_back(transfer(Transfer::What::kActivations, i, j, k));
        }
        // here + 1 exists for every layer and embed step: the head comes last.
        if (plan.kv_off && layer) {
          out[here + 1].stores.push_back(transfer(Transfer::What::kKv, i, j, k));
        }
        if (plan.act_off && j < n_col - 1) {
          out[here + 1].stores.push_back(transfer(Transfer::What::kActivations, i, j, k));
        }
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
    auto text = [&](const char* verb, const Transfer& t) {
      const std::string step =
          t.step >= 0 && t.step != st.step ? fmt::format("i={} ", t.step) : std::string();
      return fmt::format(" {}({} {}j={} k={})", verb, transfer_name(t.what), step, t.column,
                         t.micro_batch);
    };
    if (st.weights_column != st.column || st.weights_step != st.step) {
      out += fmt::format(" weights(i={} j={})", st.weights_step, st.weights_column);
    }
    for (const Transfer& t : st.loads) out += text("load", t);
    for (const Transfer& t : st.stores) out += text("store", t);
    out += '\n';
  }
  return out;
}

}  // namespace strata
