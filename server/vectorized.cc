#include "server/vectorized.h"

#include <atomic>

namespace hetps {
namespace {
std::atomic<bool> baseline_only{false};
}  // namespace

SimdPath ActiveSimdPath() {
#if defined(__x86_64__) && defined(__GNUC__)
  // The CPU and the kernel must both support AVX2 (the check covers the saved YMM state).
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && !baseline_only.load(std::memory_order_relaxed)) return SimdPath::kAvx2;
#endif
  return SimdPath::kBaseline;
}

const char* SimdPathName(SimdPath path) {
  if (path == SimdPath::kAvx2) return "avx2";
#if defined(__x86_64__)
  return "sse2";
#else
  return "baseline";
#endif
}

void LimitSimdToBaseline(bool limit) { baseline_only.store(limit, std::memory_order_relaxed); }

}  // namespace hetps
