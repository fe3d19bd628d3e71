// Timing helpers shared by the single-thread benchmarks (codec, optimizer).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>
#include <vector>

namespace hetps::bench {

// The median of `v` (not empty); of an even count, the upper middle.
inline double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Median seconds of one call of `op`, repeated for about `budget` seconds (at least 5 times,
// at most 1000).
inline double MedianSeconds(const std::function<void()>& op, double budget) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 5 ||
         (std::chrono::duration<double>(Clock::now() - start).count() < budget &&
          times.size() < 1000)) {
    const auto t0 = Clock::now();
    op();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return Median(std::move(times));
}

}  // namespace hetps::bench
