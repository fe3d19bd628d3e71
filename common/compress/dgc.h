// DGC's step rules, shared by the CPU codec (dgc.cc) and its CUDA twin's host side, so both
// choose the same density, sample and threshold: the twin only counts and selects on the device.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace hetps::compress {

// The density at a step: warm-up epochs of `epoch` steps raise it to density^((e+1)/(warmup+1)).
inline double DgcDensity(double density, int64_t warmup, int64_t epoch, int64_t step) {
  const int64_t e = step / epoch;
  if (e >= warmup) return density;
  return std::pow(density, static_cast<double>(e + 1) / static_cast<double>(warmup + 1));
}

// The strided sample of |v|: elements 0, stride, 2 stride, ... (`count` of them).
struct DgcSample {
  int64_t stride = 1, count = 0;
};
inline DgcSample DgcSampling(int64_t n, double sample) {
  const int64_t m = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(sample * n)),
                                        std::min<int64_t>(n, 256), n);
  DgcSample s;
  s.stride = std::max<int64_t>(1, n / std::max<int64_t>(m, 1));
  s.count = std::min(m, (n + s.stride - 1) / s.stride);  // j < m and j * stride < n
  return s;
}

// The first threshold: the magnitude ranking k / n of the sample (reordered in place).
inline float DgcFirstThreshold(std::vector<float>& sample, int64_t k, int64_t n) {
  if (sample.empty()) return 0;
  const int64_t rank = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(static_cast<double>(k) / n * sample.size())), 1,
      static_cast<int64_t>(sample.size()));
  std::nth_element(sample.begin(), sample.begin() + (rank - 1), sample.end(),
                   std::greater<float>());
  return sample[rank - 1];
}

// Re-adjusts the threshold until between 0.8k and 1.3k elements pass (count(t) says how many
// pass t): x1.3 / x0.8, and once the count has been on both sides of the band, bisection
// between the last thresholds that gave too many and too few; at most 10 counts.
template <typename Count>
float DgcAdjustThreshold(float threshold, int64_t k, Count&& count) {
  float too_low = -1, too_high = -1;  // thresholds that passed too many / too few
  for (int adjust = 0; adjust < 10; ++adjust) {
    const int64_t passed = count(threshold);
    if (passed > 1.3 * k) {
      too_low = threshold;
    } else if (passed < 0.8 * k) {
      too_high = threshold;
    } else {
      break;
    }
    if (too_low >= 0 && too_high >= 0) {
      threshold = 0.5f * (too_low + too_high);
    } else {
      threshold *= passed > 1.3 * k ? 1.3f : 0.8f;
    }
  }
  return threshold;
}

}  // namespace hetps::compress
