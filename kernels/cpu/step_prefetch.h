// Internal to the CPU matmul kernels (matmul_bf16.cpp, matmul_f32_dot.cpp,
// matmul_int8.cpp): a software prefetch of the weights a kernel reads next,
// spread over the steps of the loop that reads the current ones. Asking for
// a whole stretch at once fills the core's miss buffers and stalls the loads
// of the products themselves (measured on an f16 decode step: 1.2-1.35x as
// long); the hardware prefetcher alone keeps too few lines in flight per
// core. So each step() asks for the next share, `bytes` over `steps` calls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::cpu {

enum class PrefetchInto { kL1, kL2 };

class StepPrefetch {
 public:
  // Nothing to ask for (a stretch past the end of the weights).
  StepPrefetch() = default;
  // `bytes` from p over `steps` calls of step(), at least `min_step` bytes
  // per call (so short steps still ask for whole lines).
  StepPrefetch(const void* p, size_t bytes, size_t steps, PrefetchInto into, size_t min_step = 64)
      : p_(static_cast<const char*>(p)),
        bytes_(bytes),
        per_step_(std::max(min_step,
                           (bytes + std::max<size_t>(steps, 1) - 1) / std::max<size_t>(steps, 1))),
        l2_(into == PrefetchInto::kL2) {}

  void step() {
#if defined(__x86_64__)
    const size_t upto = std::min(bytes_, done_ + per_step_);
    if (l2_) {
      for (; done_ < upto; done_ += 64) _mm_prefetch(p_ + done_, _MM_HINT_T1);
    } else {
      for (; done_ < upto; done_ += 64) _mm_prefetch(p_ + done_, _MM_HINT_T0);
    }
#endif
  }

 private:
  const char* p_ = nullptr;
  size_t bytes_ = 0, done_ = 0, per_step_ = 0;
  bool l2_ = false;
};

}  // namespace strata::cpu
