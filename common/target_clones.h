// STRATA_CLONES compiles a function for AVX-512, AVX2 and baseline x86-64;
// the dynamic loader picks the best one for the CPU (GCC function
// multiversioning). Elsewhere it expands to nothing. A clone may round
// differently from another where the compiler contracts a multiply and an
// add into an FMA: build such files with -ffp-contract=off, or write loops
// whose result does not depend on it (trainer/grad_accumulator.cc).
#ifndef STRATA_COMMON_TARGET_CLONES_H_
#define STRATA_COMMON_TARGET_CLONES_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRATA_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define STRATA_CLONES
#endif

#endif  // STRATA_COMMON_TARGET_CLONES_H_
