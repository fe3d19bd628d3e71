// DP-FedAvg's server side (server/aggregation/dp_fedavg.cc): the unweighted mean of a round's
// deltas plus noise of std noise x clip on their sum, repeatable for a seed.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

TEST(DpFedAvgTest, WithoutNoiseARoundIsTheUnweightedMean) {
  OnePartition p("dp_fedavg:noise=0", {0, 0});
  p.Round({{1, 4}, {2, 4}, {6, 1}});
  EXPECT_EQ(p.values(), (std::vector<float>{-3, -3}));
  EXPECT_EQ(p.state->version(), 1);
}

TEST(DpFedAvgTest, TheSumCarriesNoiseOfNoiseTimesClipThenIsDividedByTheCount) {
  const std::vector<float> zero(20000, 0.0f);
  auto round = [&](const std::string& spec) {
    OnePartition p(spec, zero);
    p.Round({zero, zero, zero, zero});
    return p.values();
  };
  const std::vector<float> v = round("dp_fedavg:clip=2,noise=1.5,seed=7");
  double squares = 0;
  for (float x : v) squares += static_cast<double>(x) * x;
  EXPECT_NEAR(std::sqrt(squares / v.size()), 1.5 * 2 / 4, 0.01) << "std 3 on the sum of 4";
  EXPECT_EQ(round("dp_fedavg:clip=2,noise=1.5,seed=7"), v);
  EXPECT_NE(round("dp_fedavg:clip=2,noise=1.5,seed=8"), v);
}

}  // namespace
}  // namespace hetps::testing
