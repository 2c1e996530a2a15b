// Measuring this machine into a hardware profile (policy/hardware.h) that
// the cost model plans with: disk read and write bandwidth with io_uring and
// O_DIRECT at depth in the offload directory, host<->device copies, the
// compute backend's GEMM rate at a prefill and a decode shape, its paged
// attention rate in decode and prefill, the RAM read rate, and the memory
// sizes (offload/measure.h). `strata profile` writes it; `--policy auto`
// measures this machine once and caches it.
//
// Every rate the cost model divides by is measured or derived here, on the
// CPU backend `strata generate` computes with by default: the profile has
// `device: cpu`, the gpu tier is RAM, and host<->device copies are memcpy
// (recorded in the header only: the cost model never reads them for a CPU
// device). It does not measure a GPU (`--device cuda`): a GPU machine's
// profile is written by hand (policies/hardware/t4-flexgen.yaml). Each rate
// is the achieved rate of a representative shape (FLOPs counted as the cost
// model counts them), so the cost model reproduces that shape's time; the
// RAM read rate is the roofline of shapes that read more bytes per FLOP.
// Nothing is measured before the inputs are checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "policy/hardware.h"

namespace strata {

struct ProfileRequest {
  std::string offload_dir;  // the disk to measure; "" chooses (choose_profile_dir)
  std::optional<uint64_t> disk_bytes;  // the temporary file (default 1G; quick: 256M)
  std::string name = "this-machine";
  std::string compute_dtype;  // "", "f32" or "bf16" ("": what generate picks)
  int threads = 0;            // 0: all cores
  bool quick = false;         // fewer repeats, no f32/bf16 comparison
};

// The directory whose disk a profile measures: `dir` when given (Error
// when it cannot hold the file), else the current directory when it can,
// else /tmp.
std::string choose_profile_dir(const std::string& dir, uint64_t disk_bytes);

// What measure_machine measures and how: raised whenever a change makes
// profiles measured before it wrong or incomplete for the cost model (a new
// table, a new way of timing), so that --policy auto measures again instead
// of reading a cached profile of an earlier version. 2: disk reads beside
// compute (links.disk_to_cpu_beside_compute).
inline constexpr int kMachineProfileVersion = 2;

// Checks the request (Error naming the flag and value), measures, and
// returns the profile's YAML with a header saying the machine, the date, the
// commit and how each number was measured (progress lines on the log).
std::string measure_machine(const ProfileRequest& request);

// This machine's profile for --policy auto: cached under
// $XDG_CACHE_HOME/strata (or ~/.cache/strata, else the offload directory),
// keyed by host, CPU, RAM, the offload directory's filesystem and
// kMachineProfileVersion; measured once (quick, a 1G disk file in
// `offload_dir`) when absent or unreadable.
HardwareProfile this_machine_profile(const std::string& offload_dir);
// The file this_machine_profile caches it in:
// hardware-v<version>-<key>.yaml.
std::string this_machine_profile_path(const std::string& offload_dir,
                                      int version = kMachineProfileVersion);

// Where measurements of this machine are cached: $XDG_CACHE_HOME/strata or
// ~/.cache/strata when writable, else `offload_dir`.
std::string profile_cache_dir(const std::string& offload_dir);
// Host name, CPU model and RAM, as one string: what a cached measurement of
// the compute belongs to.
std::string host_key();
// FNV-1a of a string, for cache file names.
uint64_t fnv1a(const std::string& s);

}  // namespace strata
