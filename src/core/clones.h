// Per-ISA clones of a hot loop: with GCC on x86-64 the function is compiled
// for x86-64-v4 (AVX-512), x86-64-v3 (AVX2) and the baseline, and the loader
// picks the best one the CPU runs, once. Elsewhere a plain function.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRATA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define STRATA_CLONES
#endif
