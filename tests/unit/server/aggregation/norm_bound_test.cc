// Norm bounding (server/aggregation/norm_bound.cc): each update clipped to norm max, then the
// mean; its optional noise has the stated size and repeats exactly for the same seed.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

TEST(NormBoundTest, UpdatesAboveTheBoundAreScaledToItThenAveraged) {
  OnePartition p("norm_bound:max=5", {0, 0});
  p.Round({{3, 4}, {60, 80}, {0.3f, 0.4f}});  // norms 5, 100 (-> 3,4), 0.5 (kept)
  EXPECT_FLOAT_EQ(p.values()[0], -(3 + 3 + 0.3f) / 3);
  EXPECT_FLOAT_EQ(p.values()[1], -(4 + 4 + 0.4f) / 3);
}

TEST(NormBoundTest, AScaledAttackerMovesTheModelNoFurtherThanTheBound) {
  OnePartition p("norm_bound:max=1", {0, 0, 0});
  p.Round({{1e6f, 1e6f, 1e6f}});
  double norm = 0;
  for (float v : p.values()) norm += v * v;
  EXPECT_NEAR(std::sqrt(norm), 1, 1e-5);
}

TEST(NormBoundTest, NoiseHasItsStandardDeviationAndRepeatsForASeed) {
  const std::vector<float> zero(20000, 0.0f);
  auto noisy = [&](const std::string& spec) {
    OnePartition p(spec, zero);
    p.Round({zero, zero});
    return p.values();
  };
  const std::vector<float> a = noisy("norm_bound:max=2,noise=0.5,seed=3");
  double sum = 0, squares = 0;
  for (float v : a) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const double mean = sum / a.size(), sd = std::sqrt(squares / a.size() - mean * mean);
  EXPECT_NEAR(mean, 0, 0.03);
  EXPECT_NEAR(sd, 1.0, 0.03) << "noise x max = 0.5 x 2";
  EXPECT_EQ(noisy("norm_bound:max=2,noise=0.5,seed=3"), a);
  EXPECT_NE(noisy("norm_bound:max=2,noise=0.5,seed=4"), a);
}

}  // namespace
}  // namespace hetps::testing
