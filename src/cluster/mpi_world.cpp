#include "cluster/mpi_world.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"

#if STRATA_HAVE_MPI
// The C API only: Open MPI's deprecated C++ bindings would need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace strata {
namespace {

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

#if STRATA_HAVE_MPI
constexpr auto kFinalizeTimeout = std::chrono::seconds(120);

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("{} failed: {}", call, std::string(text, static_cast<size_t>(len)));
}
#endif

}  // namespace

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

std::string MpiWorld::where() const {
  return fmt::format("rank {} of {} on {}", rank_, size_, host_);
}

#if STRATA_HAVE_MPI

MpiWorld::MpiWorld() : host_(this_host()) {
  if (!launched_by_mpi()) return;
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  joined_ = true;
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  if (provided < MPI_THREAD_SERIALIZED) {
    fail("this MPI library gives thread level {}; strata needs MPI_THREAD_SERIALIZED", provided);
  }
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  MPI_Comm local;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type");
  check(MPI_Comm_rank(local, &local_rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(local, &local_size_), "MPI_Comm_size");
  MPI_Comm_free(&local);
}

MpiWorld::~MpiWorld() {
  if (!joined_) return;
  // MPI_Finalize waits for every rank. All have said they are done by now,
  // so a wait past kFinalizeTimeout means a rank hangs: say so and end.
  std::mutex m;
  std::condition_variable cv;
  bool finalized = false;
  std::thread watchdog([&] {
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, kFinalizeTimeout, [&] { return finalized; })) {
      std::fprintf(stderr,
                   "strata: error: %s: MPI_Finalize did not return in %lld s; a rank hangs\n",
                   where().c_str(), static_cast<long long>(kFinalizeTimeout.count()));
      std::_Exit(1);
    }
  });
  MPI_Finalize();
  {
    std::lock_guard lock(m);
    finalized = true;
  }
  cv.notify_all();
  watchdog.join();
}

std::vector<uint64_t> MpiWorld::all_gather(uint64_t value) {
  if (!joined_) return {value};
  std::lock_guard lock(mutex_);
  std::vector<uint64_t> all(static_cast<size_t>(size_));
  check(MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD),
        "MPI_Allgather");
  return all;
}

std::vector<std::string> MpiWorld::all_hosts() {
  if (!joined_) return {host_};
  constexpr int kLen = 256;
  std::string mine = host_.substr(0, kLen - 1);
  mine.resize(kLen, '\0');
  std::string all(static_cast<size_t>(kLen) * static_cast<size_t>(size_), '\0');
  {
    std::lock_guard lock(mutex_);
    check(MPI_Allgather(mine.data(), kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, MPI_COMM_WORLD),
          "MPI_Allgather");
  }
  std::vector<std::string> hosts;
  for (int r = 0; r < size_; ++r) hosts.emplace_back(all.c_str() + static_cast<size_t>(r) * kLen);
  return hosts;
}

std::string MpiWorld::broadcast(std::string bytes) {
  if (!joined_) return bytes;
  std::lock_guard lock(mutex_);
  uint64_t n = bytes.size();
  check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
  bytes.resize(n);
  check(MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return bytes;
}

void MpiWorld::send(int dest, int tag, std::string_view bytes) {
  STRATA_ASSERT(joined_ && tag >= 0);
  std::lock_guard lock(mutex_);
  check(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD),
        "MPI_Send");
}

namespace {

// Receives the message a probe found (the caller holds the mutex).
MpiWorld::Message receive(const MPI_Status& probed) {
  MpiWorld::Message m;
  int count = 0;
  check(MPI_Get_count(&probed, MPI_BYTE, &count), "MPI_Get_count");
  m.source = probed.MPI_SOURCE;
  m.tag = probed.MPI_TAG;
  m.bytes.resize(static_cast<size_t>(count));
  check(
      MPI_Recv(m.bytes.data(), count, MPI_BYTE, m.source, m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
      "MPI_Recv");
  return m;
}

}  // namespace

std::optional<MpiWorld::Message> MpiWorld::poll() {
  if (!joined_) return std::nullopt;
  std::lock_guard lock(mutex_);
  int flag = 0;
  MPI_Status status;
  check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status), "MPI_Iprobe");
  if (!flag) return std::nullopt;
  return receive(status);
}

MpiWorld::Message MpiWorld::wait_for(int source, int tag) {
  STRATA_ASSERT(joined_);
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      int flag = 0;
      MPI_Status status;
      check(MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &status), "MPI_Iprobe");
      if (flag) return receive(status);
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void MpiWorld::abort(int code) {
  if (joined_) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

#else  // no MPI: a world of this process alone

MpiWorld::MpiWorld() : host_(this_host()) {
  if (launched_by_mpi()) {
    fail(
        "this process was started by an MPI launcher, but this strata was built without MPI; "
        "install Open MPI (scripts/install-deps.sh) and rebuild, or run strata without mpirun");
  }
}

MpiWorld::~MpiWorld() = default;

std::vector<uint64_t> MpiWorld::all_gather(uint64_t value) {
  return {value};
}
std::vector<std::string> MpiWorld::all_hosts() {
  return {host_};
}
std::string MpiWorld::broadcast(std::string bytes) {
  return bytes;
}

void MpiWorld::send(int, int, std::string_view) {
  STRATA_ASSERT_MSG(false, "MpiWorld::send in a world of one process");
}

std::optional<MpiWorld::Message> MpiWorld::poll() {
  return std::nullopt;
}

MpiWorld::Message MpiWorld::wait_for(int, int) {
  STRATA_ASSERT_MSG(false, "MpiWorld::wait_for in a world of one process");
  return {};
}

void MpiWorld::abort(int code) {
  std::exit(code);
}

#endif

}  // namespace strata
