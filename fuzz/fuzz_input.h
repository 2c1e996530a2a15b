// What every fuzz target shares: the input written to a scratch file (for
// the parsers whose entry point is a path, as the program calls them) and
// the one rule of the targets: a strata::Error is the expected answer to bad
// input; any other exception, a crash, a sanitizer report, a leak or a hang
// is a finding.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/log.h"

namespace strata::fuzz {

// A directory of this process's own under /dev/shm (or TMPDIR), made once
// and removed at exit. The path is never destroyed (the exit handler runs
// after static destructors would have).
inline const std::string& scratch_dir() {
  static const std::string* dir = [] {
    namespace fs = std::filesystem;
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path d = base / ("strata-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    auto* s = new std::string(d.string());
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return s;
  }();
  return *dir;
}

// Writes `size` bytes to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `f`; a strata::Error (bad input, reported as the program would) ends
// the input quietly. Logging is off: the targets run millions of inputs.
template <typename F>
int guarded(F&& f) {
  static const bool quiet = [] {
    set_log_level("off");
    return true;
  }();
  (void)quiet;
  try {
    f();
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace strata::fuzz
