// The tiers' budgets and the checks against them (tier_budgets.h).
#include "offload/tier_budgets.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/units.h"
#include "offload/aligned_buffer.h"
#include "offload/measure.h"
#include "offload/weight_placement.h"

namespace strata {

namespace {

std::string mb(uint64_t bytes) {
  return format_bytes(static_cast<double>(bytes));
}

// ", the draft model's KV cache and logits N" when a block has them.
std::string draft_part(const BlockMemory& m) {
  return m.draft > 0 ? fmt::format(", the draft model's KV cache and logits {}", mb(m.draft))
                     : std::string();
}

// Quantized KV's f32 pages for the CPU attention kernel, in RAM where the
// CPU computes attention.
std::string dequant_part(const BlockMemory& m, MemoryMode mode) {
  return m.kv_dequant > 0 && mode != MemoryMode::kDeviceMemory
             ? fmt::format(", quantized KV dequantized for attention {}", mb(m.kv_dequant))
             : std::string();
}

}  // namespace

uint64_t available_ram_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream in(line.substr(13));
      uint64_t kib = 0;
      if (in >> kib) return kib * 1024;
    }
  }
  return 0;
}

TierBytes weight_tier_bytes(const WeightPlacement& wp, MemoryMode mode, TierBytes* staging) {
  TierBytes s;
  s.ram = 2 * align_up(wp.largest_disk_read(), kDiskAlign);
  TierBytes t;
  t.disk = wp.bytes(Tier::kDisk);
  if (mode == MemoryMode::kHostMemory) {
    t.ram = wp.bytes(Tier::kGpu) + wp.bytes(Tier::kCpu) + wp.vector_bytes() + s.ram;
  } else {
    uint64_t streamed = 0;  // the largest streamed column in device staging
    for (const UnitPlacement& u : wp.units) {
      streamed = std::max<uint64_t>(streamed, u.matrix_bytes[static_cast<size_t>(Tier::kCpu)] +
                                                  u.disk_read_bytes + 256 * (u.n_tensors + 1));
    }
    s.device = 2 * streamed;
    t.device = wp.bytes(Tier::kGpu) + wp.vector_bytes() + s.device;
    t.ram = wp.bytes(Tier::kCpu) + s.ram;
  }
  if (staging != nullptr) *staging = s;
  return t;
}

TierBytes tier_budgets_for(const BudgetRequest& o, MemoryMode mode) {
  const bool host = mode == MemoryMode::kHostMemory;
  TierBytes b;
  b.ram = o.cpu_mem > 0 ? o.cpu_mem : available_ram_bytes();
  if (host) b.ram += o.gpu_mem;  // both tiers are this RAM
  if (!host) b.device = o.gpu_mem > 0 ? o.gpu_mem : o.default_device_bytes;
  b.disk = o.disk_mem;
  if (b.disk == 0 && o.need_dir) {
    std::error_code ec;
    std::filesystem::create_directories(o.offload_dir, ec);
    if (ec) {
      fail("--offload-dir {}: cannot create the directory: {}; choose a directory you can write to",
           o.offload_dir, ec.message());
    }
    b.disk = free_disk_bytes(o.offload_dir);
  }
  return b;
}

TierBudgets::TierBudgets(const Options& o, MemoryMode mode,
                         std::unique_ptr<TierAllocator> host_allocator)
    : mode_(mode), o_(o) {
  const TierBytes b = tier_budgets_for(o, mode);
  ram_ = std::make_unique<TierPool>(
      Tier::kCpu, b.ram, host_allocator ? std::move(host_allocator) : make_host_allocator());
  if (mode_ != MemoryMode::kHostMemory) {
    if (b.device == 0) {
      fail("{} reports no free device memory; pass --gpu-mem to say how much to use",
           o.device_name);
    }
    gpu_ = std::make_unique<TierPool>(Tier::kGpu, b.device);
  }
  disk_ = std::make_unique<TierPool>(Tier::kDisk, b.disk);
}

std::string TierBudgets::ram_flags() const {
  return mode_ == MemoryMode::kHostMemory ? "--cpu-mem + --gpu-mem: on the CPU device both are RAM"
                                          : "--cpu-mem";
}

void TierBudgets::check_weights(const WeightPlacement& wp, uint64_t draft_fixed) {
  const bool host = mode_ == MemoryMode::kHostMemory;
  TierBytes staging;
  const TierBytes t = weight_tier_bytes(wp, mode_, &staging);
  fixed_device_ = t.device;
  fixed_ram_ = t.ram + draft_fixed;
  const uint64_t device_staging = staging.device, ram_staging = staging.ram;
  if (!host && fixed_device_ > gpu_->budget()) {
    fail(
        "device memory budget {} (--gpu-mem) of {} is below the {} the weights need: {} of "
        "matrices kept on the device, {} of vectors, {} of staging for the streamed share; "
        "raise --gpu-mem or keep fewer weights on the gpu (--percent)",
        mb(gpu_->budget()), o_.device_name, mb(fixed_device_), mb(wp.bytes(Tier::kGpu)),
        mb(wp.vector_bytes()), mb(device_staging));
  }
  if (fixed_ram_ > ram_->budget()) {
    fail(
        "RAM budget {} ({}) is below the {} the weights need: {} of matrices in RAM, {} of "
        "vectors, {} of staging for the disk share{}; raise {} or put more weights on disk "
        "(--percent)",
        mb(ram_->budget()), ram_flags(), mb(fixed_ram_),
        mb((host ? wp.bytes(Tier::kGpu) : 0) + wp.bytes(Tier::kCpu)),
        mb(host ? wp.vector_bytes() : 0), mb(ram_staging),
        draft_fixed > 0 ? fmt::format(", {} of the draft model", mb(draft_fixed)) : "",
        ram_flags());
  }
  if (wp.bytes(Tier::kDisk) > disk_->budget()) {
    fail(
        "disk budget {} (--disk-mem, in {}) is below the {} of weights this placement puts on "
        "disk; raise --disk-mem or keep more weights in RAM (--percent)",
        mb(disk_->budget()), o_.offload_dir, mb(wp.bytes(Tier::kDisk)));
  }
}

void TierBudgets::check_block(const BlockMemory& m, int64_t n_seqs, int64_t longest,
                              uint64_t kv_cap_bytes, uint64_t bytes_per_page, int64_t page_size,
                              uint64_t weights_disk) const {
  const int64_t cap_pages = static_cast<int64_t>(kv_cap_bytes / bytes_per_page);
  if (m.kv.backed_pages > cap_pages) {
    fail(
        "KV cache budget {} holds {} pages of {} tokens ({} free); this block needs {} for {} "
        "sequences of up to {} tokens; lower the batch size or raise the KV budget (--kv-mem)",
        mb(kv_cap_bytes), cap_pages, page_size, cap_pages, m.kv.backed_pages, n_seqs, longest);
  }
  const BlockTiers t = block_tiers(m, mode_);
  if (mode_ != MemoryMode::kHostMemory) {
    const bool kv_device = mode_ == MemoryMode::kDeviceMemory;
    const uint64_t dev_need = fixed_device_ + t.device;
    if (dev_need > gpu_->budget()) {
      fail(
          "device memory budget {} (--gpu-mem) is below the {} a block of {} sequences of up to {} "
          "tokens needs: weights and their staging {}, KV cache {} ({} pages) + staging {}, "
          "activations {}, working memory {}, logits {}; raise --gpu-mem, lower the batch size "
          "or put more on the cpu and disk tiers (--percent)",
          mb(gpu_->budget()), mb(dev_need), n_seqs, longest, mb(fixed_device_),
          mb(kv_device ? m.kv_pages : 0), kv_device ? m.kv.backed_pages : 0,
          mb(kv_device ? m.kv_staging : 0), mb(m.hidden), mb(m.scratch), mb(m.logits));
    }
    const uint64_t host_need = fixed_ram_ + t.ram;
    if (host_need > ram_->budget()) {
      fail(
          "RAM budget {} (--cpu-mem) is below the {} a block of {} sequences of up to {} tokens "
          "needs: weights kept in RAM and their staging {}, KV cache and staging {}, logits "
          "{}{}{}; raise --cpu-mem or put more weights on disk (--percent)",
          mb(ram_->budget()), mb(host_need), n_seqs, longest, mb(fixed_ram_), mb(t.kv_ram),
          mb(m.logits), dequant_part(m, mode_), draft_part(m));
    }
  } else if (fixed_ram_ + t.ram > ram_->budget()) {
    fail(
        "RAM budget {} ({}) is below the {} a block of {} sequences of up to {} tokens needs: "
        "weights and their staging {}, KV cache {} ({} pages) + staging {}, activations {}, "
        "working memory {}, logits {}{}{}; raise the budget, lower the batch size or put more on "
        "disk (--percent)",
        mb(ram_->budget()), ram_flags(), mb(fixed_ram_ + t.ram), n_seqs, longest, mb(fixed_ram_),
        mb(m.kv_pages), m.kv.backed_pages, mb(m.kv_staging), mb(m.hidden), mb(m.scratch),
        mb(m.logits), dequant_part(m, mode_), draft_part(m));
  }
  const uint64_t disk_need = weights_disk + t.disk;
  if (disk_need > disk_->budget()) {
    fail(
        "disk budget {} (--disk-mem, in {}) is below the {} this run keeps on disk: weights {}, "
        "KV cache {} for a block of {} sequences of up to {} tokens; raise --disk-mem, lower the "
        "batch size or keep more in RAM (--percent)",
        mb(disk_->budget()), o_.offload_dir, mb(disk_need), mb(weights_disk), mb(t.disk), n_seqs,
        longest);
  }
}

}  // namespace strata
