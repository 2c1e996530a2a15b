// The output of a batch job, written so that nothing is lost and nothing
// half-written looks complete:
//
//   OUTPUT.partial  created (or reopened) before any compute. Line 1 is a
//                   header naming the prompt file, its content hash, the
//                   number of prompts and a hash of the generation settings;
//                   then one line per finished prompt, in completion order:
//                   {"index": <input index>, "record": {...}}. Each line goes
//                   to the file in one write() as soon as its prompt
//                   finishes, so a killed run keeps every finished record.
//   OUTPUT          written only at the end, records in input order, through
//                   OUTPUT.tmp + fsync + rename; then OUTPUT.partial is removed.
//
// Rerunning the same command finds OUTPUT.partial and resumes: finished
// prompts are skipped. A .partial made from another prompt file or with
// other settings is refused with a message saying what differs, unless it
// holds no record (then it is started afresh). A last line cut short by an
// interruption is dropped with a warning. A run that ends with an error
// before its first record removes its .partial. The .partial is locked
// (flock) while a run writes it, so two runs cannot interleave their records.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "generate/record_sink.h"
#include "io/atomic_file.h"

namespace strata {

// What a .partial must match to be resumed.
struct OutputIdentity {
  std::string prompts_path;    // for messages only
  uint64_t prompts_hash = 0;   // content hash of the prompt file
  uint64_t settings_hash = 0;  // hash of everything that changes the records
  size_t n_prompts = 0;
};

class OutputFile final : public RecordSink {
 public:
  // Checks that `output_path` can be written and opens OUTPUT.partial,
  // resuming it when it matches `identity`. Throws Error (naming the path and
  // what to do) when the directory is missing or not writable, the path is a
  // directory, the .partial belongs to another job, is damaged, or is in use.
  OutputFile(std::string output_path, OutputIdentity identity);
  ~OutputFile() override;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  const std::string& path() const { return path_; }
  std::string partial_path() const { return path_ + ".partial"; }

  bool is_done(size_t index) const override { return !records_[index].empty(); }
  size_t n_done() const { return n_done_; }
  size_t n_resumed() const { return n_resumed_; }
  // The stored record of a finished prompt (its JSON text).
  const std::string& record(size_t index) const { return records_[index]; }

  // Appends the record of prompt `index` to the .partial, one write().
  void append(size_t index, const OrderedJson& record) override;

  // Writes OUTPUT in input order (tmp + fsync + rename) and removes the
  // .partial. Every prompt must be done.
  void finish() override;

 private:
  void open_partial();
  void load_partial(const std::string& content);
  // Truncates the partial file to a fresh header of this job.
  void start_afresh();

  // Closes the .partial (and so releases its lock) however the object ends,
  // a constructor that throws included.
  struct Fd {
    int fd = -1;
    ~Fd();
    void reset();
  };

  std::string path_;
  OutputIdentity identity_;
  Fd partial_;
  std::vector<std::string> records_;  // [n_prompts], "" while not done
  size_t n_done_ = 0;
  size_t n_resumed_ = 0;
};

// The header line of a .partial for `identity` (without the newline).
std::string partial_header(const OutputIdentity& identity);

}  // namespace strata
