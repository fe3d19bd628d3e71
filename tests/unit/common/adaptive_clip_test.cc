// Adaptive clipping (common/adaptive_clip.h; Andrew et al., NeurIPS'21): the clip converges to
// the asked quantile of the update norms, the count's noise is paid for by the update noise as
// the paper's Theorem 1 says, parameters without a budget are refused, and a run repeats.
#include "common/adaptive_clip.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace hetps {
namespace {

AdaptiveClip Make(double quantile, double count_noise = 0, int expected_kept = 50) {
  auto a = AdaptiveClip::Make({.initial = 0.1,
                               .quantile = quantile,
                               .lr = 0.2,
                               .noise = 1.0,
                               .count_noise = count_noise,
                               .expected_kept = expected_kept,
                               .seed = 7});
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return *a;
}

// Rounds of 50 clients whose update norms are uniform on [0, 10]: the clip ends near the
// quantile's norm (10 Q), from far below.
TEST(AdaptiveClipTest, TheClipConvergesToTheQuantileOfTheNorms) {
  for (double q : {0.5, 0.9}) {
    AdaptiveClip a = Make(q);
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> norm(0, 10);
    std::vector<double> late;
    for (int64_t round = 0; round < 400; ++round) {
      int64_t within = 0;
      for (int i = 0; i < 50; ++i) within += norm(rng) <= a.clip();
      a.EndRound(round, within, 50);
      if (round >= 300) late.push_back(a.clip());
    }
    double mean = 0;
    for (double c : late) mean += c / static_cast<double>(late.size());
    EXPECT_NEAR(mean, 10 * q, 0.1 * 10 * q) << "quantile " << q;
  }
}

TEST(AdaptiveClipTest, TheCountsNoiseIsPaidForByTheUpdates) {
  AdaptiveClip a = Make(0.5, /*count_noise=*/5);
  EXPECT_DOUBLE_EQ(a.count_noise(), 5);
  // (Z^-2 - (2 sigma_b)^-2)^(-1/2) at Z = 1, sigma_b = 5.
  EXPECT_NEAR(a.update_noise(), 1 / std::sqrt(1 - 1.0 / 100), 1e-12);
  EXPECT_NEAR(a.noise_std(), a.update_noise() * 0.1, 1e-15);
  // The default: the paper's K/20, at least Z.
  EXPECT_DOUBLE_EQ(Make(0.5, 0, 200).count_noise(), 10);
  EXPECT_DOUBLE_EQ(Make(0.5, 0, 10).count_noise(), 1);
  EXPECT_NEAR(Make(0.5, 0, 10).update_noise(), 2 / std::sqrt(3.0), 1e-12);
}

TEST(AdaptiveClipTest, ParametersWithoutABudgetAreRefused) {
  auto none = AdaptiveClip::Make({.initial = 1, .quantile = 0.5, .noise = 1, .count_noise = 0.5});
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument) << "2 sigma_b = Z";
  EXPECT_FALSE(AdaptiveClip::Make({.initial = 1, .quantile = 1, .noise = 1}).ok());
  EXPECT_FALSE(AdaptiveClip::Make({.initial = 0, .quantile = 0.5, .noise = 1}).ok());
}

TEST(AdaptiveClipTest, TheCountsNoiseIsDrawnPerRoundFromTheSeed) {
  AdaptiveClip a = Make(0.5), b = Make(0.5);
  for (int64_t round = 0; round < 20; ++round) {
    EXPECT_EQ(a.EndRound(round, round % 7, 10), b.EndRound(round, round % 7, 10));
  }
  EXPECT_EQ(a.clip(), b.clip());
  AdaptiveClip restored = Make(0.5);  // a restarted scheduler: S, then the same draws
  restored.Restore(a.clip());
  EXPECT_EQ(restored.EndRound(20, 3, 10), a.EndRound(20, 3, 10));
  EXPECT_EQ(restored.clip(), a.clip());
  const double before = a.clip();
  a.EndRound(21, 0, 0);  // nothing kept: nothing learnt
  EXPECT_EQ(a.clip(), before);
}

}  // namespace
}  // namespace hetps
