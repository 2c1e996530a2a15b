// Writing a file so that a reader sees either the old file or the whole new
// one, never a part: the content goes to a temporary file beside it
// (PATH.tmp.PID), which is renamed over PATH when complete. However the
// write fails the temporary file is removed, and the Error names PATH, what
// the file is and the reason. Reports, traces, policies, profiles, the
// generation output and the weight pack are written this way.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace strata {

// `what`: "the report", "the trace", ... for messages. `durable`: fsync the
// file before the rename and its directory after (the generation output).
void write_file_atomically(const std::string& path, std::string_view content,
                           std::string_view what, bool durable = false);
// The same with the content written by `write` to the open descriptor `fd`
// of the temporary file (named `tmp`), for content too large to hold.
void write_file_atomically(const std::string& path, std::string_view what, bool durable,
                           const std::function<void(int fd, const std::string& tmp)>& write);
// Throws Error (naming `option` and the path) unless a file `path` could be
// created: its directory exists and is writable, and it is not a directory.
void check_writable_file(const std::string& path, std::string_view option);
// Renames `from` over `to`; Error naming both and the reason.
void replace_file(const std::string& from, const std::string& to);
// Writes all of `data` to `fd` (the file `path`), retrying short writes;
// Error naming `path` and the reason (a full disk says so).
void write_all(int fd, std::string_view data, const std::string& path);

}  // namespace strata
