#include "kernels/cpu/cpu_features.h"

namespace strata::cpu {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return f;
}

const CpuFeatures& detected() {
  static const CpuFeatures features = detect();
  return features;
}

CpuFeatures& allowed() {
  static CpuFeatures all{true, true, true};
  return all;
}

CpuFeatures& current() {
  static CpuFeatures features = detected();
  return features;
}

}  // namespace

const CpuFeatures& cpu_features() {
  return current();
}

CpuFeatures restrict_cpu_features(const CpuFeatures& a) {
  const CpuFeatures previous = allowed();
  allowed() = a;
  const CpuFeatures& d = detected();
  current() = {d.avx512 && a.avx512, d.avx512_bf16 && a.avx512_bf16, d.avx2_fma && a.avx2_fma};
  return previous;
}

}  // namespace strata::cpu
