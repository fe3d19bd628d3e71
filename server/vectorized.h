// RunVectorized: a server-side elementwise loop (an optimizer's rule, a delay compensation)
// written once, as a lambda, and compiled twice: for the x86-64 baseline (SSE2) and for AVX2.
// The AVX2 copy runs where the CPU has it. Both copies give bit-identical results: the loops are
// elementwise, the compiler neither reorders nor fuses their arithmetic (AVX2 is taken without
// FMA), and sqrt and division are correctly rounded in every width. A file whose loop takes a
// square root is compiled with -fno-math-errno (server/CMakeLists.txt; these loops never read
// errno), without which the sqrt would keep the loop scalar.
//
// Thread-safety: ActiveSimdPath may be called from any thread; LimitSimdToBaseline is for tests
// and benchmarks, called while no loop runs.
#pragma once

namespace hetps {

// The instruction set the loops run with in this process.
enum class SimdPath { kBaseline, kAvx2 };
SimdPath ActiveSimdPath();
const char* SimdPathName(SimdPath path);  // "avx2", "sse2" (x86-64's baseline) or "baseline"
// true: the loops run their baseline copy even where the CPU has AVX2 (tests and `hetps-bench
// optimizer` compare the two in one process); false: the widest the CPU has (the default).
void LimitSimdToBaseline(bool limit);

namespace simd_internal {
// `flatten` inlines the loop into each copy, so that it is compiled with that copy's
// instruction set. The loop is taken by value: its captures are then a local copy no pointer of
// the partition can alias, which the vectorizer needs to see (clang gives up otherwise).
#if defined(__x86_64__) && defined(__GNUC__)
template <class Loop>
__attribute__((target("avx2"), flatten)) void RunAvx2(Loop loop) {
  loop();
}
#endif
template <class Loop>
__attribute__((flatten)) void RunBaseline(Loop loop) {
  loop();
}
}  // namespace simd_internal

// Runs `loop` (a lambda over a partition's arrays) in the copy ActiveSimdPath() names.
template <class Loop>
void RunVectorized(const Loop& loop) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (ActiveSimdPath() == SimdPath::kAvx2) return simd_internal::RunAvx2(loop);
#endif
  simd_internal::RunBaseline(loop);
}

}  // namespace hetps
