#include "server/consistency/clock_table.h"

#include <gtest/gtest.h>

#include <limits>

namespace hetps {
namespace {

TEST(ClockTableTest, TracksFinishedClocksAndTheSlowest) {
  ClockTable t({4, 7, 9});
  EXPECT_EQ(t.min(), 0);
  t.Advance(4, 0);
  t.Advance(4, 1);
  t.Advance(7, 0);
  EXPECT_EQ(t.clock(4), 2);
  EXPECT_EQ(t.min(), 0);
  EXPECT_EQ(t.slowest(), 9);
  EXPECT_EQ(t.max(), 2);
  t.Advance(4, 0);  // a late duplicate never moves a clock back
  EXPECT_EQ(t.clock(4), 2);
  t.Remove(9);  // the dead do not hold anyone back
  EXPECT_EQ(t.min(), 1);
  t.Advance(9, 5);  // nor come back through a late message
  EXPECT_FALSE(t.contains(9));
  t.Remove(4);
  t.Remove(7);
  EXPECT_EQ(t.min(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(t.slowest(), -1);
}

}  // namespace
}  // namespace hetps
