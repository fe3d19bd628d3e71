#include "common/quorum.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

TEST(QuorumTest, AutoQuorumMaximizesUpdatesPerUnitTime) {
  EXPECT_EQ(AutoQuorum({1, 1, 1, 3}), 3);  // leave the 3x straggler out
  EXPECT_EQ(AutoQuorum({1, 1, 1, 1}), 4);  // equal speeds: everyone
  EXPECT_EQ(AutoQuorum({1, 2, 3, 4}), 4);  // ties go to the larger quorum
  EXPECT_EQ(AutoQuorum({1, 1, 10}), 2);
  EXPECT_EQ(AutoQuorum({3, 1, 1}), 2);  // order does not matter
  EXPECT_EQ(AutoQuorum({0, 0}), 2);     // zero times do not divide by zero
  EXPECT_EQ(AutoQuorum({}), 0);
}

}  // namespace
}  // namespace hetps
