// Fault injection for the disk I/O layer (disk_faults.h): one armed fault, a
// count of matching requests, and the STRATA_DISK_FAULT variable.
#include "offload/disk_faults.h"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace strata {

namespace {

struct Armed {
  std::mutex mu;
  std::optional<DiskFault> fault;
  uint64_t seen = 0;   // matching requests so far
  uint64_t fired = 0;  // requests given the fault
  std::atomic<bool> active{false};
};

Armed& armed() {
  static Armed a;
  return a;
}

std::vector<std::string> split(const std::string& s, char sep, size_t max_parts) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (parts.size() + 1 < max_parts) {
    const size_t at = s.find(sep, pos);
    if (at == std::string::npos) break;
    parts.push_back(s.substr(pos, at - pos));
    pos = at + 1;
  }
  parts.push_back(s.substr(pos));
  return parts;
}

void arm_from_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("STRATA_DISK_FAULT");
    if (!env || !*env) return;
    arm_disk_fault(parse_disk_fault(env, "STRATA_DISK_FAULT"));
    spdlog::warn("disk faults armed by STRATA_DISK_FAULT={}", env);
  });
}

}  // namespace

DiskFault parse_disk_fault(const std::string& spec, const std::string& what) {
  const auto parts = split(spec, ':', 4);
  auto bad = [&](const std::string& why) -> DiskFault {
    fail(
        "{}={}: {}; expected KIND:OP:N[:PATH_PART] with KIND eio|short|partial|enospc and OP "
        "read|write|any",
        what, spec, why);
  };
  if (parts.size() < 3) return bad("too few fields");
  DiskFault f;
  static const std::pair<const char*, DiskFaultKind> kKinds[] = {
      {"eio", DiskFaultKind::kIoError},
      {"short", DiskFaultKind::kShortRead},
      {"partial", DiskFaultKind::kPartial},
      {"enospc", DiskFaultKind::kNoSpace}};
  static const std::pair<const char*, DiskFaultOp> kOps[] = {
      {"read", DiskFaultOp::kRead}, {"write", DiskFaultOp::kWrite}, {"any", DiskFaultOp::kAny}};
  auto lookup = [](const auto& table, const std::string& name) {
    for (const auto& [n, v] : table)
      if (name == n) return std::optional(v);
    return std::optional<decltype(table[0].second)>();
  };
  const auto kind = lookup(kKinds, parts[0]);
  if (!kind) return bad("unknown kind '" + parts[0] + "'");
  const auto op = lookup(kOps, parts[1]);
  if (!op) return bad("unknown operation '" + parts[1] + "'");
  f.kind = *kind;
  f.op = *op;
  if (f.kind == DiskFaultKind::kShortRead && f.op != DiskFaultOp::kRead)
    return bad("a short read needs OP read");
  if (f.kind == DiskFaultKind::kNoSpace && f.op != DiskFaultOp::kWrite)
    return bad("enospc needs OP write");
  const std::string& n = parts[2];
  const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), f.nth);
  if (ec != std::errc() || end != n.data() + n.size() || f.nth == 0)
    return bad("N '" + n + "' is not a whole number from 1");
  if (parts.size() == 4) f.path_part = parts[3];
  return f;
}

void arm_disk_fault(const DiskFault& f) {
  Armed& a = armed();
  std::lock_guard lk(a.mu);
  a.fault = f;
  a.seen = 0;
  a.fired = 0;
  a.active.store(true, std::memory_order_release);
}

void disarm_disk_fault() {
  Armed& a = armed();
  std::lock_guard lk(a.mu);
  a.fault.reset();
  a.active.store(false, std::memory_order_release);
}

uint64_t disk_faults_fired() {
  Armed& a = armed();
  std::lock_guard lk(a.mu);
  return a.fired;
}

namespace disk_detail {

std::optional<DiskFaultKind> take_disk_fault(bool is_read, const std::string& path) {
  arm_from_environment();
  Armed& a = armed();
  if (!a.active.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard lk(a.mu);
  if (!a.fault) return std::nullopt;
  const DiskFault& f = *a.fault;
  const bool op_matches = f.op == DiskFaultOp::kAny || (f.op == DiskFaultOp::kRead) == is_read;
  if (!op_matches || path.find(f.path_part) == std::string::npos) return std::nullopt;
  if (++a.seen != f.nth) return std::nullopt;
  ++a.fired;
  return f.kind;
}

}  // namespace disk_detail

}  // namespace strata
