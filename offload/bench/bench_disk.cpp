// Disk bandwidth of the disk I/O layer beside fio, measured in the same run on
// the same directory: sequential write then read of one file with O_DIRECT,
// block size and queue depth equal for both (fio: ioengine=io_uring,
// direct=1). A program, not a test: prints a table with the machine, the
// commit, the median and the spread of the repeats.
//
//   strata_bench_disk [--dir DIR] [--size 1G] [--block 1M] [--depths 1,8,32] [--repeats 3]
#include <sys/utsname.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/bench.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "offload/disk_io.h"

namespace {

using namespace strata;

struct Pair {
  double write = 0, read = 0;  // GB/s
};

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ::pclose(p);
  return out;
}

// One fio job: bytes per second of the rw direction, or -1 when fio failed.
double fio_job(const std::string& file, uint64_t size, size_t block, int depth, const char* rw) {
  const std::string cmd = fmt::format(
      "fio --name=strata --filename={} --size={} --bs={} --iodepth={} --ioengine=io_uring "
      "--direct=1 "
      "--rw={} --output-format=json 2>/dev/null",
      file, size, block, depth, rw);
  const std::string out = run_capture(cmd);
  const auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("jobs") || j["jobs"].empty()) return -1;
  const char* dir = std::string(rw) == "write" ? "write" : "read";
  return j["jobs"][0][dir]["bw_bytes"].get<double>();
}

Pair fio_pair(const std::string& dir, uint64_t size, size_t block, int depth) {
  const std::string file =
      (std::filesystem::path(dir) / fmt::format(".strata-fio-{}.tmp", ::getpid())).string();
  Pair p;
  p.write = fio_job(file, size, block, depth, "write") / 1e9;
  p.read = fio_job(file, size, block, depth, "read") / 1e9;
  std::filesystem::remove(file);
  return p;
}

// "median [lo-hi]" of rates (core/bench.h), "n/a" when the tool failed.
std::string cell(std::vector<double> v) {
  const Spread s = spread_of(std::move(v));
  if (s.median < 0) return "      n/a      ";
  return fmt::format("{:5.2f} [{:4.2f}-{:4.2f}]", s.median, s.lo, s.hi);
}

}  // namespace

int main(int argc, char** argv) {
  init_logging();
  CLI::App app{"Disk I/O layer bandwidth next to fio (sequential, O_DIRECT)"};
  std::string dir = std::filesystem::temp_directory_path().string();
  std::string size_text = "1G", block_text = "1M";
  std::vector<int> depths = {1, 8, 32};
  int repeats = 3;
  bool no_fio = false, threads = false;
  app.add_option("--dir", dir, "Directory on the disk to measure")->capture_default_str();
  app.add_option("--size", size_text, "File size")->capture_default_str();
  app.add_option("--block", block_text, "Block (request) size")->capture_default_str();
  app.add_option("--depths", depths, "Queue depths")->delimiter(',');
  app.add_option("--repeats", repeats, "Repeats per configuration (median reported)")
      ->capture_default_str();
  app.add_flag("--no-fio", no_fio, "Skip fio");
  app.add_flag("--threads", threads, "Also measure the pread/pwrite fallback");
  CLI11_PARSE(app, argc, argv);
  try {
    const uint64_t size = parse_bytes(size_text, "--size");
    const size_t block = parse_bytes(block_text, "--block");
    utsname u{};
    ::uname(&u);
    std::printf("%s# kernel %s\n", bench_banner("bench_disk").c_str(), u.release);
    std::printf("# dir %s  file %s  block %s  repeats %d (median [min-max], GB/s = 1e9 B/s)\n",
                dir.c_str(), format_bytes(static_cast<double>(size)).c_str(),
                format_bytes(static_cast<double>(block)).c_str(), repeats);
    std::printf("%-5s | %-29s | %-29s | %-29s | %-29s\n", "depth", "write: engine", "write: fio",
                "read: engine", "read: fio");
    for (int depth : depths) {
      // Warm-up: one small pass of each so that first-use costs stay out.
      measure_disk_bandwidth(dir, std::min<uint64_t>(size, uint64_t{64} << 20), block, depth);
      std::vector<double> ew, er, ewf, erf, fw, fr, tw, tr;
      for (int r = 0; r < repeats; ++r) {
        // fio first on odd repeats, so that neither tool always follows the other.
        Pair f{-1, -1};
        if (!no_fio && r % 2 == 1) f = fio_pair(dir, size, block, depth);
        const DiskBandwidth e = measure_disk_bandwidth(dir, size, block, depth);
        ew.push_back(e.write_bytes_per_s / 1e9);
        er.push_back(e.read_bytes_per_s / 1e9);
        const DiskBandwidth ef = measure_disk_bandwidth(dir, size, block, depth, true, true);
        ewf.push_back(ef.write_bytes_per_s / 1e9);
        erf.push_back(ef.read_bytes_per_s / 1e9);
        if (threads) {
          const DiskBandwidth t = measure_disk_bandwidth(dir, size, block, depth, false);
          tw.push_back(t.write_bytes_per_s / 1e9);
          tr.push_back(t.read_bytes_per_s / 1e9);
        }
        if (!no_fio && r % 2 == 0) f = fio_pair(dir, size, block, depth);
        fw.push_back(f.write);
        fr.push_back(f.read);
      }
      std::printf("%-5d | %-29s | %-29s | %-29s | %-29s\n", depth, cell((ew)).c_str(),
                  cell((fw)).c_str(), cell((er)).c_str(), cell((fr)).c_str());
      std::printf("%-5s | %-29s | %-29s | %-29s | %-29s\n", "  fix", cell((ewf)).c_str(), "",
                  cell((erf)).c_str(), "");
      if (threads) {
        std::printf("%-5s | %-29s | %-29s | %-29s | %-29s\n", "  thr", cell((tw)).c_str(),
                    "", cell((tr)).c_str(), "");
      }
      std::fflush(stdout);
    }
    std::printf(
        "# fix: the same engine with its block buffers registered (io_uring fixed buffers); "
        "thr: the pread/pwrite fallback\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "strata_bench_disk: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
