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

namespace strata::offload_test {

// Byte i of a pattern seeded by `seed`: no period shorter than 2^32.
inline std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<std::byte>(x >> 32);
  }
  return v;
}

inline std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

inline void write_file(const std::string& path, const std::vector<std::byte>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

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

struct Run {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs strata with `args`; `in_child` runs in the child before exec (only
// async-signal-safe calls: setrlimit, signal, prctl).
inline Run run_strata(const std::vector<std::string>& args, const std::string& scratch,
                      void (*in_child)() = nullptr) {
  const std::string out_path = scratch + "/cli.stdout", err_path = scratch + "/cli.stderr";
  std::vector<std::string> argv_s = {STRATA_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  Run r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    if (in_child) in_child();
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
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
