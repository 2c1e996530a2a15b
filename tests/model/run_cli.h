// Runs the strata executable (STRATA_BIN) with arguments and captures its
// exit status, stdout and stderr, for end-to-end tests of subcommands.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace strata::test_files {

struct CliResult {
  int exit_code = -1;  // -1: did not exit normally (signal)
  std::string out;
  std::string err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Starts the strata executable with `args`, its stdout and stderr going to
// files in `scratch_dir`, and `extra_env` ("NAME=value") added to this
// process's environment. Returns its pid, or -1 when it cannot start.
inline pid_t start_strata(const std::vector<std::string>& args, const std::string& scratch_dir,
                          const std::vector<std::string>& extra_env = {}) {
  const std::string out_path = scratch_dir + "/cli.stdout", err_path = scratch_dir + "/cli.stderr";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_s = {STRATA_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s(extra_env);
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

// Waits for a process of start_strata and collects what it printed.
inline CliResult finish_strata(pid_t pid, const std::string& scratch_dir) {
  CliResult r;
  if (pid < 0) {
    r.err = std::string("cannot start ") + STRATA_BIN;
    return r;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = slurp(scratch_dir + "/cli.stdout");
  r.err = slurp(scratch_dir + "/cli.stderr");
  return r;
}

inline CliResult run_strata(const std::vector<std::string>& args, const std::string& scratch_dir,
                            const std::vector<std::string>& extra_env = {}) {
  return finish_strata(start_strata(args, scratch_dir, extra_env), scratch_dir);
}

}  // namespace strata::test_files
