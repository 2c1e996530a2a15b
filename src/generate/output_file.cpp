// Crash-safe job output (output_file.h).
#include "generate/output_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "io/atomic_file.h"
#include "io/one_line.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string hex64(uint64_t v) {
  return fmt::format("{:016x}", v);
}

std::string read_all(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  std::string content(static_cast<size_t>(st.st_size), '\0');
  size_t off = 0;
  while (off < content.size()) {
    const ssize_t n =
        ::pread(fd, content.data() + off, content.size() - off, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("{}: cannot read: {}", path, n < 0 ? std::strerror(errno) : "file shrank");
    off += static_cast<size_t>(n);
  }
  return content;
}

}  // namespace

std::string partial_header(const OutputIdentity& id) {
  OrderedJson h;
  h["strata_partial"] = 1;
  h["prompts"] = id.prompts_path;
  h["prompts_hash"] = hex64(id.prompts_hash);
  h["n_prompts"] = id.n_prompts;
  h["settings_hash"] = hex64(id.settings_hash);
  return h.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

OutputFile::OutputFile(std::string output_path, OutputIdentity identity)
    : path_(std::move(output_path)), identity_(std::move(identity)) {
  STRATA_ASSERT(identity_.n_prompts > 0);
  records_.assign(identity_.n_prompts, {});
  check_writable_file(path_, "--output");
  open_partial();
}

// A run that ends before any record (an error, an exception) leaves no
// .partial behind: there is nothing to resume, and a header alone would make
// the next run with other settings refuse it.
OutputFile::~OutputFile() {
  if (partial_.fd >= 0 && n_done_ == 0) {
    ::unlink(partial_path().c_str());
    partial_.reset();
  }
}

OutputFile::Fd::~Fd() {
  reset();
}

void OutputFile::Fd::reset() {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void OutputFile::open_partial() {
  const std::string pp = partial_path();
  partial_.fd = ::open(pp.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (partial_.fd < 0) {
    fail("{}: cannot create the output file: {}; choose an output path in a writable directory", pp,
         std::strerror(errno));
  }
  if (::flock(partial_.fd, LOCK_EX | LOCK_NB) != 0) {
    fail("{}: another strata run is writing this output; wait for it or choose another --output",
         pp);
  }
  const std::string content = read_all(partial_.fd, pp);
  const size_t header_end = content.find('\n');
  if (header_end == std::string::npos) {
    // New, or interrupted before its header was complete: start it afresh.
    if (!content.empty()) spdlog::warn("{}: no complete header line; starting it afresh", pp);
    start_afresh();
    return;
  }
  load_partial(content);
}

void OutputFile::start_afresh() {
  const std::string pp = partial_path();
  if (::ftruncate(partial_.fd, 0) != 0) fail("{}: cannot truncate: {}", pp, std::strerror(errno));
  write_all(partial_.fd, partial_header(identity_) + "\n", pp);
  if (::fdatasync(partial_.fd) != 0) fail("{}: cannot sync: {}", pp, std::strerror(errno));
}

void OutputFile::load_partial(const std::string& content) {
  const std::string pp = partial_path();
  const size_t header_end = content.find('\n');
  OrderedJson header;
  try {
    header = OrderedJson::parse(content.substr(0, header_end));
  } catch (const std::exception&) {
  }
  if (!header.is_object() || !header.contains("strata_partial")) {
    fail(
        "{}: exists but is not a strata partial output (its first line is not a strata header); "
        "move or delete it",
        pp);
  }
  auto field = [&](const char* key) {
    auto it = header.find(key);
    return it != header.end() && it->is_string() ? it->get<std::string>() : std::string("?");
  };
  const bool has_records = content.find('\n', header_end + 1) != std::string::npos;
  if (!has_records && (field("prompts_hash") != hex64(identity_.prompts_hash) ||
                       field("settings_hash") != hex64(identity_.settings_hash))) {
    // Another job's header with no record after it (a run killed before its
    // first record): nothing is lost by starting afresh.
    spdlog::info("{}: holds no records of another job; starting it afresh", pp);
    start_afresh();
    return;
  }
  if (field("prompts_hash") != hex64(identity_.prompts_hash)) {
    fail(
        "{}: was written for another prompt file ({}, hash {}; {} has hash {}); run with the "
        "prompt file it was made from to resume, or delete it to start over",
        pp, one_line(field("prompts"), 200), field("prompts_hash"), identity_.prompts_path,
        hex64(identity_.prompts_hash));
  }
  if (field("settings_hash") != hex64(identity_.settings_hash)) {
    fail(
        "{}: was written with other settings (model, sampling, seed, max tokens, stop strings, "
        "chat, ids or compute dtype differ); rerun with the same options to resume, or delete it "
        "to start over",
        pp);
  }

  size_t pos = header_end + 1;
  int64_t line_no = 1;
  while (pos < content.size()) {
    const size_t end = content.find('\n', pos);
    ++line_no;
    if (end == std::string::npos) {
      // The last record was cut short by an interruption: drop it.
      spdlog::warn(
          "{}: dropping an incomplete last line (line {}, {} bytes): a record cut short by an "
          "interruption; it is generated again",
          pp, line_no, content.size() - pos);
      if (::ftruncate(partial_.fd, static_cast<off_t>(pos)) != 0) {
        fail("{}: cannot truncate: {}", pp, std::strerror(errno));
      }
      break;
    }
    const std::string_view line(content.data() + pos, end - pos);
    pos = end + 1;
    OrderedJson j;
    try {
      j = OrderedJson::parse(line);
    } catch (const std::exception&) {
    }
    const auto idx = j.is_object() ? j.find("index") : j.end();
    const auto rec = j.is_object() ? j.find("record") : j.end();
    if (idx == j.end() || rec == j.end() || !idx->is_number_unsigned() || !rec->is_object()) {
      fail("{}:{}: damaged record line; delete the file to start over", pp, line_no);
    }
    const uint64_t index = idx->get<uint64_t>();
    if (index >= identity_.n_prompts) {
      fail("{}:{}: record index {} is outside the {} prompts; delete the file to start over", pp,
           line_no, index, identity_.n_prompts);
    }
    if (!records_[index].empty()) {
      fail("{}:{}: a second record for prompt index {}; delete the file to start over", pp, line_no,
           index);
    }
    records_[index] = rec->dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    ++n_done_;
  }
  n_resumed_ = n_done_;
  if (n_resumed_ > 0) {
    spdlog::info("{}: resuming, {} of {} prompts already done", pp, n_resumed_,
                 identity_.n_prompts);
  }
}

void OutputFile::append(size_t index, const OrderedJson& record) {
  STRATA_ASSERT(index < records_.size() && records_[index].empty());
  std::string rec = record.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  std::string line = "{\"index\":" + std::to_string(index) + ",\"record\":" + rec + "}\n";
  write_all(partial_.fd, line, partial_path());
  records_[index] = std::move(rec);
  ++n_done_;
}

void OutputFile::finish() {
  STRATA_ASSERT(n_done_ == records_.size());
  write_file_atomically(path_, "the output", true, [&](int fd, const std::string& tmp) {
    std::string buf;
    for (const std::string& r : records_) {
      buf += r;
      buf += '\n';
      if (buf.size() >= (1u << 20)) {
        write_all(fd, buf, tmp);
        buf.clear();
      }
    }
    write_all(fd, buf, tmp);
  });
  ::unlink(partial_path().c_str());
  partial_.reset();
}

}  // namespace strata
