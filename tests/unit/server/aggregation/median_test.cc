// The coordinate-wise median (server/aggregation/median.cc) on scripted rounds and arrivals:
// the rule's value by hand, attackers' huge vectors kept within the honest range, groups of k
// under asynchrony, and a partly filled group surviving a restart.
#include <gtest/gtest.h>

#include "durable.pb.h"
#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

TEST(MedianTest, ARoundMovesTheModelByTheCoordinateWiseMedian) {
  OnePartition p("median", {0, 0});
  p.Round({{1, 10}, {2, 20}, {3, -5}});
  EXPECT_EQ(p.values(), (std::vector<float>{-2, -10}));
  EXPECT_EQ(p.state->version(), 1);
  OnePartition even("median", {0});
  even.Round({{1}, {2}, {3}, {100}});
  EXPECT_EQ(even.values(), (std::vector<float>{-2.5f})) << "the two middle values' mean";
}

TEST(MedianTest, FewerThanHalfAttackersStayWithinTheHonestRange) {
  OnePartition p("median", {0, 0, 0});
  p.Round({{1, -2, 0.5f}, {1e9f, -1e9f, 1e9f}, {2, -1, 0.25f}, {-1e9f, 1e9f, 1e9f}, {3, 0, 1}});
  const std::vector<float> v = p.values();
  EXPECT_TRUE(-v[0] >= 1 && -v[0] <= 3 && -v[1] >= -2 && -v[1] <= 0 && -v[2] >= 0.25f && -v[2] <= 1)
      << v[0] << " " << v[1] << " " << v[2];
}

TEST(MedianTest, UnderAsynchronyEachKArrivalsAreOneStep) {
  OnePartition p("median:k=3", {0});
  p.Push(0, 0, {5});
  p.Push(1, 0, {1});
  EXPECT_EQ(p.state->version(), 0);
  p.Push(2, 0, {3});
  EXPECT_EQ(p.state->version(), 1);
  EXPECT_EQ(p.values(), (std::vector<float>{-3}));
}

TEST(MedianTest, APartlyFilledGroupIsSavedAndLoaded) {
  OnePartition p("median:k=3", {0, 0});
  p.Push(0, 0, {5, 1});
  p.Push(1, 0, {1, 2});
  proto::AggregatorState saved;
  p.state->aggregator()->Save(saved);
  OnePartition restarted("median:k=3", {0, 0});
  ASSERT_TRUE(restarted.state->aggregator()->Load(saved).ok());
  restarted.Push(2, 0, {3, 9});
  EXPECT_EQ(restarted.values(), (std::vector<float>{-3, -2}));
  saved.mutable_numbers()->at("count") = 3;  // 4 floats do not make 3 updates of a size
  EXPECT_FALSE(restarted.state->aggregator()->Load(saved).ok());
}

}  // namespace
}  // namespace hetps::testing
