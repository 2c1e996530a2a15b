// `strata profile [--offload-dir DIR] [-o FILE.yaml] [--quick] [--disk-bytes 1G]`:
// measures this machine into a hardware profile (plan/machine_profile.h)
// that `strata policy --hardware FILE` reads. Progress lines go to stderr;
// the YAML goes to -o or stdout. Nothing is measured before the inputs are
// checked (offload directory, output file, sizes), so a bad argument fails at
// once with one line, and the output is written through a temporary file and
// a rename: an interrupted run leaves no half-written profile.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "io/atomic_file.h"
#include "plan/machine_profile.h"

namespace strata::cli {
namespace {

struct ProfileArgs {
  ProfileRequest request;
  std::string output;
  std::string disk_bytes;
};

int run_profile(ProfileArgs a) {
  const auto t_start = std::chrono::steady_clock::now();
  if (!a.disk_bytes.empty()) a.request.disk_bytes = parse_bytes(a.disk_bytes, "--disk-bytes");
  if (!a.output.empty()) check_writable_file(a.output, "-o");
  const std::string yaml = measure_machine(a.request);
  if (a.output.empty()) {
    std::fwrite(yaml.data(), 1, yaml.size(), stdout);
    std::fflush(stdout);
  } else {
    write_file_atomically(a.output, yaml, "the profile");
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (a.output.empty()) {
    spdlog::info("profile: done in {:.1f} s", took);
  } else {
    spdlog::info("profile: done in {:.1f} s; wrote {}", took, a.output);
  }
  return 0;
}

const Command kProfile{
    "profile",
    "Measure this machine (disk, memory, compute) into a hardware profile YAML for `strata "
    "policy --hardware`",
    50, [](CLI::App& sub) -> Runner {
      auto a = std::make_shared<ProfileArgs>();
      sub.add_option("--offload-dir", a->request.offload_dir,
                     "Directory on the disk to offload to; a temporary file is written and "
                     "removed (default: the current directory, else /tmp)");
      sub.add_option("-o,--output", a->output,
                     "Write the profile to this YAML file (default: stdout)");
      sub.add_flag(
          "--quick", a->request.quick,
          "Fewer repeats, a 256M disk file, no f32/bf16 comparison: about 15 s on 2 cores");
      sub.add_option(
          "--disk-bytes", a->disk_bytes,
          "Size of the temporary file the disk is measured with (default 1G; --quick 256M)");
      sub.add_option("--name", a->request.name, "The profile's name")->capture_default_str();
      sub.add_option("--compute-dtype", a->request.compute_dtype,
                     "f32 or bf16 (default: what `strata generate` picks: bf16 where the CPU "
                     "multiplies bf16 natively)");
      sub.add_option("--threads", a->request.threads, "CPU threads (default: all cores)");
      return [a]() { return run_profile(*a); };
    }};

}  // namespace
}  // namespace strata::cli
