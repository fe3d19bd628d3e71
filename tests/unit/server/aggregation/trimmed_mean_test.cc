// The coordinate-wise trimmed mean (server/aggregation/trimmed_mean.cc) on scripted rounds.
#include <gtest/gtest.h>

#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

TEST(TrimmedMeanTest, ARoundDropsBetaNOfEachEndThenAverages) {
  OnePartition p("trimmed_mean:beta=0.2", {0, 0});
  p.Round({{1, 50}, {2, -40}, {3, 0}, {4, 10}, {100, 20}});  // b = 1 of 5
  EXPECT_EQ(p.values(), (std::vector<float>{-3, -10}));      // (2+3+4)/3, (0+10+20)/3
  OnePartition none("trimmed_mean:beta=0", {0});
  none.Round({{1}, {2}, {6}});
  EXPECT_EQ(none.values(), (std::vector<float>{-3})) << "beta 0: the mean";
}

TEST(TrimmedMeanTest, AttackersAtBothEndsAreTrimmedAway) {
  OnePartition p("trimmed_mean:beta=0.3", {0});
  p.Round({{1e9f}, {1}, {2}, {-1e9f}, {3}, {1e9f}, {2}, {-1e9f}, {1}, {1e9f}});  // b = 3
  EXPECT_GE(-p.values()[0], 1);
  EXPECT_LE(-p.values()[0], 3);
}

TEST(TrimmedMeanTest, AGroupTooSmallToTrimKeepsItsMiddle) {
  OnePartition p("trimmed_mean:beta=0.5", {0});
  p.Round({{1}, {7}, {2}});  // b = 1 would leave 1 of 3: (3 - 1) / 2 = 1 trimmed each end
  EXPECT_EQ(p.values(), (std::vector<float>{-2}));
  OnePartition two("trimmed_mean:beta=0.5", {0});
  two.Round({{1}, {3}});
  EXPECT_EQ(two.values(), (std::vector<float>{-2}));
}

}  // namespace
}  // namespace hetps::testing
