// The processes of one batch job started by an MPI launcher (mpirun -np N,
// srun --mpi=pmix): each is a rank with its own engine, and they talk
// through MPI (Open MPI). In a build without MPI, or in a process no launcher
// started, the world is this one process and no MPI call is made, so a
// plain `strata generate` behaves exactly as without MPI.
//
// MPI errors return (MPI_ERRORS_RETURN) and are thrown as Error naming the
// call; abort() ends every rank of the job (MPI_Abort), so a rank that fails
// never leaves the others waiting. Waits sleep between tests of a request
// instead of spinning in MPI, so a rank that waits leaves its core to ranks
// that compute. Calls are serialized by a mutex: one thread may wait for
// messages while another sends.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// True when the environment says an MPI launcher started this process
// (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK or PMI_SIZE set).
bool launched_by_mpi();

class MpiWorld {
 public:
  // Joins the job when launched_by_mpi() and MPI is built; a world of one
  // otherwise. Throws Error when launched by MPI in a build without it
  // (every rank would run the whole job on its own).
  MpiWorld();
  // MPI_Finalize; a rank that hangs there for 2 minutes ends with a message
  // (every rank has finished its work by then).
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The rank among those on this host (picks the GPU of `--device cuda`).
  int local_rank() const { return local_rank_; }
  // The number of ranks on this host.
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  // "rank 1 of 3 on node7" for messages.
  std::string where() const;

  // Every rank's value, in rank order (MPI_Allgather); {value} with one rank.
  std::vector<uint64_t> all_gather(uint64_t value);
  // Every rank's host name, in rank order.
  std::vector<std::string> all_hosts();
  // Rank 0's `bytes` on every rank (MPI_Bcast); `bytes` itself with one rank.
  std::string broadcast(std::string bytes);

  // A message of bytes to rank `dest` with `tag` (>= 0).
  void send(int dest, int tag, std::string_view bytes);
  struct Message {
    int source = -1, tag = -1;
    std::string bytes;
  };
  // The next message that has arrived, from any rank, or none.
  std::optional<Message> poll();
  // Waits for a message with `tag` from `source`, testing every
  // kPollInterval; messages with other tags stay queued.
  Message wait_for(int source, int tag);
  // Between two tests of a request: short enough not to delay a message
  // much, long enough that a waiting rank takes no core from one that
  // computes.
  static constexpr std::chrono::milliseconds kPollInterval{2};

  // Ends every rank of the job with exit status `code` (does not return).
  [[noreturn]] void abort(int code);

 private:
  std::mutex mutex_;
  bool joined_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
};

}  // namespace strata
