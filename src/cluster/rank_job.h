// One rank's part of a batch job run by several MPI ranks (mpi_world.h).
//
// Records flow to rank 0, which writes them through the job's one
// OutputFile (OUTPUT.partial, then OUTPUT in input order), rather than each
// rank keeping a .partial of its own for rank 0 to merge: the output and its
// resume stay exactly those of one process (a job may be resumed with
// another number of ranks, or without MPI), there is one file lock, and
// nothing needs merging after a failure. A record is a small message sent as
// soon as its prompt finishes, so a rank that dies loses only the prompts it
// had not finished, as one process would.
//
// In order, on every rank:
//   1. the job check: a hash of the prompt file, the settings and the number
//      of prompts from every rank; a rank that differs from rank 0 makes
//      every rank refuse the job with one line naming it;
//   2. rank 0 opens the output (resuming its .partial) and sends which
//      prompts are recorded already; every rank then computes the same
//      split (job_shares.h);
//   3. sink(): what run_jobs writes to. On rank 0, a thread receives the
//      other ranks' records (polling, so it takes no core from the engine)
//      and appends them, drawing the job's progress line; finish() waits
//      for every rank's last message, then writes OUTPUT. On the other
//      ranks, records are sent to rank 0;
//   4. finish_ranks(): every rank's report reaches rank 0.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/mpi_world.h"
#include "generate/driver.h"
#include "generate/output_file.h"

namespace strata {

class RankJob {
 public:
  // Steps 1 and 2. `job_hash`: this rank's hash of the job; `open_output`
  // is called on rank 0 only. Throws Error on a mismatch. Rank 0 shows the
  // job's progress (every rank's records) on stderr: a line redrawn in place
  // with `progress` (a terminal), else a line every 30 s.
  RankJob(MpiWorld& world, std::span<const Job> jobs, uint64_t job_hash,
          const std::function<std::unique_ptr<OutputFile>()>& open_output, bool progress);
  ~RankJob();
  RankJob(const RankJob&) = delete;
  RankJob& operator=(const RankJob&) = delete;

  // The rank of each job (by position).
  const std::vector<int>& owners() const { return owner_; }
  // The number of hosts the ranks run on.
  size_t n_hosts() const;
  // The output (rank 0) or null.
  OutputFile* output() { return out_.get(); }

  // Runs `fn` on the first rank of this host, then on the host's other
  // ranks together, which wait for it without spinning. For planning and
  // building the engine: the first measures the machine (the profile and the
  // engine's compute times, cached per host) and builds the weight pack in
  // the offload directory; the others then find both made.
  void first_on_host_then_others(const std::function<void()>& fn);

  // Step 3.
  RecordSink& sink();

  // Step 4, after run_jobs: sends this rank's report to rank 0. On rank 0,
  // returns every rank's report (rank order, its own first); elsewhere {}.
  std::vector<nlohmann::ordered_json> finish_ranks(const nlohmann::ordered_json& report);

  class Sink;

 private:
  MpiWorld& world_;
  bool progress_;
  std::vector<int> owner_;
  std::vector<std::string> hosts_;  // of every rank
  std::unique_ptr<OutputFile> out_;
  std::unique_ptr<Sink> sink_;
};

// Message tags between ranks.
enum RankTag : int { kTagRecord = 1, kTagDone = 2, kTagBye = 3, kTagTurn = 4 };

}  // namespace strata
