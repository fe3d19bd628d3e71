#include "bench/optimizer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bench/timing.h"
#include "server/optimizer/optimizer.h"

namespace hetps::bench {
namespace {

constexpr int kRounds = 5;

// One partition's values, gradient and slots, with the update count Apply takes.
struct Partition {
  Partition(int64_t n, int num_slots) : w(n), g(n), slots(num_slots, std::vector<float>(n)) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> d;
    for (float& x : w) x = d(rng);
    for (float& x : g) x = 1e-3f * d(rng);
    for (auto& s : slots) ptrs.push_back(s.data());
  }
  void Apply(const Optimizer& opt) {
    opt.Apply(w.data(), g.data(), static_cast<int64_t>(w.size()), ptrs.data(), ++step, 1.0f);
  }
  std::vector<float> w, g;
  std::vector<std::vector<float>> slots;
  std::vector<float*> ptrs;
  int64_t step = 0;
};

// Whether the vector copy and the baseline copy of `opt`'s loop leave the same bits.
bool SameBits(const Optimizer& opt, int64_t n) {
  Partition a(n, opt.num_slots()), b(n, opt.num_slots());
  for (int i = 0; i < 3; ++i) {
    LimitSimdToBaseline(false);
    a.Apply(opt);
    LimitSimdToBaseline(true);
    b.Apply(opt);
  }
  LimitSimdToBaseline(false);
  bool same = std::memcmp(a.w.data(), b.w.data(), n * sizeof(float)) == 0;
  for (size_t s = 0; s < a.slots.size(); ++s) {
    same = same && std::memcmp(a.slots[s].data(), b.slots[s].data(), n * sizeof(float)) == 0;
  }
  return same;
}

}  // namespace

int RunOptimizerBench(const OptimizerBenchOptions& o) {
  const char* simd = SimdPathName(ActiveSimdPath());
  for (const std::string& spec : o.optimizers) {
    auto opt = MakeOptimizer(spec);
    if (!opt.ok()) {
      std::fprintf(stderr, "hetps-bench optimizer: %s\n", opt.status().message().c_str());
      return 2;
    }
    for (int64_t kib : o.kib) {
      const int64_t n = kib * 1024 / static_cast<int64_t>(sizeof(float));
      const double gb = static_cast<double>(n) * sizeof(float) / 1e9;
      Partition p(n, (*opt)->num_slots());
      std::vector<float> copy(n);
      // The two copies take turns, so that a change in the machine's speed meets both.
      std::vector<double> vector_runs, baseline_runs, memcpy_runs;
      for (int round = 0; round < kRounds; ++round) {
        LimitSimdToBaseline(false);
        vector_runs.push_back(MedianSeconds([&] { p.Apply(**opt); }, o.seconds / kRounds));
        LimitSimdToBaseline(true);
        baseline_runs.push_back(MedianSeconds([&] { p.Apply(**opt); }, o.seconds / kRounds));
        memcpy_runs.push_back(MedianSeconds(
            [&] { std::memcpy(copy.data(), p.g.data(), n * sizeof(float)); }, o.seconds / kRounds));
      }
      LimitSimdToBaseline(false);
      const double vector_s = Median(vector_runs), baseline_s = Median(baseline_runs),
                   memcpy_s = Median(memcpy_runs);
      std::printf(
          "{\"bench\":\"optimizer\",\"optimizer\":\"%s\",\"kib\":%lld,\"simd\":\"%s\","
          "\"gbps\":%.3f,\"baseline_gbps\":%.3f,\"simd_vs_baseline\":%.2f,\"same_bits\":%s,"
          "\"memcpy_gbps\":%.3f}\n",
          spec.c_str(), static_cast<long long>(kib), simd, gb / vector_s, gb / baseline_s,
          baseline_s / vector_s,
          SameBits(**opt, std::min<int64_t>(n, 1 << 16) + 3) ? "true" : "false", gb / memcpy_s);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace hetps::bench
