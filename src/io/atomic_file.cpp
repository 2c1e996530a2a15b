// Writing files whole or not at all (atomic_file.h).
#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

void check_writable_file(const std::string& path, std::string_view option) {
  std::error_code ec;
  if (path.empty()) fail("{} is empty; name a file", option);
  if (std::filesystem::is_directory(path, ec)) {
    fail("{} {}: is a directory; name a file in it", option, path);
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!std::filesystem::is_directory(dir, ec)) {
    fail("{} {}: cannot write there: the directory {} does not exist; create it or choose another "
         "path",
         option, path, dir.string());
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    fail("{} {}: the directory {} is not writable ({}); choose another path", option, path,
         dir.string(), std::strerror(errno));
  }
}

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      fail("{}: cannot write: {}{}", path, std::strerror(e),
           e == ENOSPC || e == EDQUOT ? "; free some disk space or choose another path" : "");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void replace_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    fail("{}: cannot rename {} to it: {}", to, from, std::strerror(errno));
  }
}

void write_file_atomically(const std::string& path, std::string_view what, bool durable,
                           const std::function<void(int fd, const std::string& tmp)>& write) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fail("{}: cannot write {}: {}; choose a path in a writable directory", path, what,
         std::strerror(errno));
  }
  try {
    write(fd, tmp);
    if (durable && ::fsync(fd) != 0) fail("{}: cannot sync: {}", tmp, std::strerror(errno));
    if (::close(fd) != 0) fail("{}: cannot write {}: {}", path, what, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot write {}: {}", path, what, std::strerror(e));
  }
  if (durable) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
}

void write_file_atomically(const std::string& path, std::string_view content,
                           std::string_view what, bool durable) {
  write_file_atomically(path, what, durable,
                        [&](int fd, const std::string& tmp) { write_all(fd, content, tmp); });
}

}  // namespace strata
