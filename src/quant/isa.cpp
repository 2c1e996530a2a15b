// Choosing the instruction-set variant once per process from the CPU's
// features (the CPUID/XGETBV test of __builtin_cpu_supports, which also checks
// that the OS saves the vector state).
#include "quant/isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace strata {

std::string_view quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return "scalar";
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

namespace {

#if defined(__x86_64__)
// F16C (CPUID leaf 1, ECX bit 29): asked of CPUID directly, since not every
// compiler's __builtin_cpu_supports knows "f16c" (clang 14 does not). AVX2
// or AVX-512 being usable already implies the OS saves the YMM state F16C uses.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
#endif

}  // namespace

bool quant_isa_supported(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return true;
#if defined(__x86_64__)
    case QuantIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && has_f16c();
    case QuantIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             has_f16c();
#else
    default:
      return false;
#endif
  }
  return false;
}

const QuantKernels& quant_kernels(QuantIsa isa) {
  STRATA_ASSERT_MSG(quant_isa_supported(isa), "{} kernels are not supported on this CPU",
                    quant_isa_name(isa));
  switch (isa) {
#if defined(__x86_64__)
    case QuantIsa::kAvx512:
      return quant_detail::kernels_avx512();
    case QuantIsa::kAvx2:
      return quant_detail::kernels_avx2();
#endif
    default:
      return quant_detail::kernels_scalar();
  }
}

namespace {

const QuantKernels& choose() {
  if (quant_isa_supported(QuantIsa::kAvx512)) {
    spdlog::debug("quant: using AVX-512 kernels");
    return quant_kernels(QuantIsa::kAvx512);
  }
  if (quant_isa_supported(QuantIsa::kAvx2)) {
    spdlog::info(
        "quant: this CPU lacks AVX-512 F/BW/VL/DQ; using the AVX2 (de)quantization kernels");
    return quant_kernels(QuantIsa::kAvx2);
  }
  spdlog::info("quant: this CPU lacks AVX2 with F16C; using the scalar (de)quantization kernels");
  return quant_kernels(QuantIsa::kScalar);
}

}  // namespace

const QuantKernels& quant_kernels() {
  static const QuantKernels& chosen = choose();
  return chosen;
}

}  // namespace strata
