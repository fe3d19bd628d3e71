// (Multi-)Krum (server/aggregation/krum.cc) on scripted rounds: the scores by hand, an attacker
// never chosen, Multi-Krum's mean of the m best, and the median for a group too small for f.
#include <gtest/gtest.h>

#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

// Four honest corners of a unit square and one far attacker, f = 1: each corner's two nearest
// others are at squared distances 1 and 1, score 2; the attacker's 2 nearest are ~2e4 away.
const std::vector<std::vector<float>> kSquare = {{0, 0}, {100, 100}, {1, 0}, {0, 1}, {1, 1}};

TEST(KrumTest, KrumPicksTheLowestScoreAnHonestUpdateTiesToTheEarlier) {
  OnePartition p("krum:f=1", {0, 0});
  p.Round(kSquare);
  EXPECT_EQ(p.values(), (std::vector<float>{0, 0})) << "the first corner (0,0), score 2";
  OnePartition q("krum:f=1", {0, 0});
  q.Round({{100, 100}, {1, 1}, {0, 0}, {1, 0}, {0, 1}});
  EXPECT_EQ(q.values(), (std::vector<float>{-1, -1})) << "ties: the earlier of the corners";
}

TEST(KrumTest, ScoresCountOnlyTheNMinusFMinusTwoNearest) {
  // f = 1 of n = 5: 2 nearest. {0},{1},{3},{4},{50}: scores 0:1+9=10, 1:1+4=5, 3:1+4=5,
  // 4:1+9=10 → the earlier of the two 5s.
  OnePartition p("krum:f=1", {0});
  p.Round({{0}, {1}, {3}, {4}, {50}});
  EXPECT_EQ(p.values(), (std::vector<float>{-1}));
}

TEST(KrumTest, MultiKrumAveragesTheMBest) {
  OnePartition p("krum:f=1,m=4", {0, 0});
  p.Round(kSquare);
  EXPECT_EQ(p.values(), (std::vector<float>{-0.5f, -0.5f})) << "the four corners' mean";
}

TEST(KrumTest, AGroupTooSmallForFTakesTheMedian) {
  OnePartition p("krum:f=1", {0});
  p.Round({{1}, {100}, {2}, {3}});  // n = 4 <= 2f + 2
  EXPECT_EQ(p.values(), (std::vector<float>{-2.5f}));
}

TEST(KrumTest, UnderAsynchronyKArrivalsAreOneGroup) {
  OnePartition p("krum:f=1,k=5", {0, 0});
  for (size_t i = 0; i < kSquare.size(); ++i) p.Push(static_cast<int32_t>(i), 0, kSquare[i]);
  EXPECT_EQ(p.state->version(), 1);
  EXPECT_EQ(p.values(), (std::vector<float>{0, 0}));
}

}  // namespace
}  // namespace hetps::testing
