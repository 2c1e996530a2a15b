// Which vector instruction sets the running CPU offers. Kernels that carry a
// hand-written AVX-512 path check cpu_features() and fall back to portable
// loops otherwise. Tests narrow the set (restrict_cpu_features) to run the
// portable paths on a CPU that has the fast ones.
#pragma once

namespace strata::cpu {

struct CpuFeatures {
  bool avx512 = false;       // AVX-512 F + BW + VL + DQ (Skylake-X, Zen 4 and later)
  bool avx512_bf16 = false;  // AVX512_BF16 (vcvtne2ps2bf16, vdpbf16ps)
  bool avx2_fma = false;     // AVX2 + FMA + F16C
};

// The detected features, minus any restriction in force.
const CpuFeatures& cpu_features();

// Keeps only the features set in both the CPU and `allowed`; returns the
// previous restriction. Not for use while kernels run on other threads.
CpuFeatures restrict_cpu_features(const CpuFeatures& allowed);

}  // namespace strata::cpu
