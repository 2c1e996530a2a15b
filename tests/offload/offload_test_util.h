// Helpers for the offload tests: deterministic byte patterns, whole-file
// reads and writes outside the engine (the oracle), a guard that takes away
// root's permission override on this thread so a read-only directory is
// read-only, and running the strata executable with a hook in the child
// (a file size limit, dropped capabilities).
#pragma once

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/random.h"
#include "support/run_cli.h"

namespace strata::offload_test {

using test::pattern;
using test::read_file;
using test::slurp;
using test::write_file;
using Run = test::CliResult;

// While alive, this thread has no CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH in
// its effective set, so permission bits apply to it even as root.
class NoPermissionOverride {
 public:
  NoPermissionOverride() {
    if (::geteuid() != 0) return;
    hdr_.version = _LINUX_CAPABILITY_VERSION_3;
    hdr_.pid = 0;
    if (::syscall(SYS_capget, &hdr_, saved_) != 0) return;
    __user_cap_data_struct d[2];
    std::memcpy(d, saved_, sizeof(d));
    d[0].effective &= ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
    active_ = ::syscall(SYS_capset, &hdr_, d) == 0;
  }
  ~NoPermissionOverride() {
    if (active_) ::syscall(SYS_capset, &hdr_, saved_);
  }

 private:
  __user_cap_header_struct hdr_{};
  __user_cap_data_struct saved_[2]{};
  bool active_ = false;
};

// True when this thread cannot create a file in `dir`.
inline bool dir_is_unwritable(const std::filesystem::path& dir) {
  const std::string probe = (dir / ".probe").string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY, 0644);
  if (fd < 0) return true;
  ::close(fd);
  ::unlink(probe.c_str());
  return false;
}


// Runs strata with `args`; `in_child` runs in the child before exec
// (support/run_cli.h).
inline Run run_strata(const std::vector<std::string>& args, const std::string& scratch,
                      void (*in_child)() = nullptr) {
  return test::run_strata(args, scratch, {}, in_child);
}

// In a child: files may grow to 64 KiB at most (SIGXFSZ left at its default,
// which kills the process unless strata ignores it).
inline void limit_file_size_64k() {
  struct rlimit rl = {64 << 10, 64 << 10};
  ::setrlimit(RLIMIT_FSIZE, &rl);
}

// In a child running as root: permission bits apply after exec.
inline void drop_permission_override() {
  if (::geteuid() != 0) return;
  ::prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0);
  ::prctl(PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, 0, 0, 0);
}

// While alive, this process may grow files to `bytes` at most and gets EFBIG
// (not SIGXFSZ) beyond that.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {bytes, saved_.rlim_max};
    ok_ = ::setrlimit(RLIMIT_FSIZE, &rl) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  struct rlimit saved_ {};
  sighandler_t old_handler_ = SIG_DFL;
  bool ok_ = false;
};

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace strata::offload_test
