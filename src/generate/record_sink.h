// Where the records of a batch job go, as run_jobs (driver.h) sees it: which
// prompts it must still compute, and where each finished record is handed.
// OutputFile (output_file.h) is the one of a single process; an MPI job's
// ranks have their own (cluster/rank_records.h): a rank's sink says "done"
// for every prompt outside its share and forwards its records to rank 0.
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

namespace strata {

using OrderedJson = nlohmann::ordered_json;

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // True when prompt `index` (input order) needs no compute here: recorded
  // already, or another process's.
  virtual bool is_done(size_t index) const = 0;
  // The record of prompt `index`, as soon as it finished.
  virtual void append(size_t index, const OrderedJson& record) = 0;
  // After the last append of this process's prompts.
  virtual void finish() = 0;
};

}  // namespace strata
