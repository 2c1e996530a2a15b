// Runs the strata executable (STRATA_BIN) with arguments and captures its
// exit status, stdout and stderr, for end-to-end tests of subcommands:
// started and collected separately (to kill it midway), with variables added
// to its environment, and with a hook run in the child before exec (only
// async-signal-safe calls: setrlimit, signal, prctl).
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "support/files.h"

extern char** environ;

namespace strata::test {

struct CliResult {
  int exit_code = -1;  // -1: did not exit normally (signal)
  std::string out;
  std::string err;
};

// Starts the program argv[0] with its arguments, its stdout and stderr going
// to files in `scratch_dir`, `extra_env` ("NAME=value") added to this
// process's environment. Returns its pid, or -1 when it cannot start.
inline pid_t start_program(std::vector<std::string> argv_s, const std::string& scratch_dir,
                           const std::vector<std::string>& extra_env = {},
                           void (*in_child)() = nullptr) {
  const std::string out_path = scratch_dir + "/cli.stdout", err_path = scratch_dir + "/cli.stderr";
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s(extra_env);
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) {
    if (out_fd >= 0) ::close(out_fd);
    if (err_fd >= 0) ::close(err_fd);
    return -1;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    if (in_child) in_child();
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  return pid;
}

// The same for strata (STRATA_BIN) with `args`.
inline pid_t start_strata(const std::vector<std::string>& args, const std::string& scratch_dir,
                          const std::vector<std::string>& extra_env = {},
                          void (*in_child)() = nullptr) {
  std::vector<std::string> argv_s = {STRATA_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  return start_program(std::move(argv_s), scratch_dir, extra_env, in_child);
}

// Waits for a process of start_program or start_strata and collects what it
// printed.
inline CliResult finish_strata(pid_t pid, const std::string& scratch_dir) {
  CliResult r;
  if (pid < 0) {
    r.err = "cannot start the program (scratch files in " + scratch_dir + ")";
    return r;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_text(scratch_dir + "/cli.stdout");
  r.err = read_text(scratch_dir + "/cli.stderr");
  return r;
}

inline CliResult run_strata(const std::vector<std::string>& args, const std::string& scratch_dir,
                            const std::vector<std::string>& extra_env = {},
                            void (*in_child)() = nullptr) {
  return finish_strata(start_strata(args, scratch_dir, extra_env, in_child), scratch_dir);
}

// A command line split into arguments as a shell would for the simple
// cases tests write: words separated by spaces, '...' quoting (no escapes
// inside).
inline std::vector<std::string> split_args(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '\'') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any) out.push_back(cur);
      cur.clear();
      any = false;
    } else {
      cur += c;
      any = true;
    }
  }
  if (any) out.push_back(cur);
  return out;
}

// The same as run_strata with the arguments of `line` (split_args), in a
// scratch directory of its own.
inline CliResult run_strata_line(const std::string& line) {
  const ScratchDir dir("strata-cli");
  return run_strata(split_args(line), dir.path());
}

// The whole content of a file (what a run wrote).
inline std::string slurp(const std::string& path) {
  return read_text(path);
}

}  // namespace strata::test
