#include "scheduler/barrier.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

TEST(BarrierTest, ReleasesOnlyWhenEveryLiveWorkerArrived) {
  Barrier b;
  const std::vector<int32_t> live = {1, 2, 3};
  b.Arrive({1, 10, "a"});
  b.Arrive({2, 11, "b"});
  EXPECT_TRUE(b.TryRelease(live).empty());
  b.Arrive({3, 12, "c"});
  auto released = b.TryRelease(live);
  ASSERT_EQ(released.size(), 3u);
  EXPECT_EQ(released[2].request_id, 12u);
  EXPECT_EQ(b.generation(), 1u);
  EXPECT_EQ(b.waiting(), 0u);
  EXPECT_TRUE(b.TryRelease(live).empty());  // nobody waiting: nothing to release
}

TEST(BarrierTest, DeadWorkerIsNotWaitedFor) {
  Barrier b;
  b.Arrive({1, 10, "a"});
  b.Arrive({2, 11, "b"});
  EXPECT_TRUE(b.TryRelease({1, 2, 3}).empty());
  // Worker 3 is declared dead: the live set shrinks and the barrier opens.
  EXPECT_EQ(b.TryRelease({1, 2}).size(), 2u);
}

TEST(BarrierTest, RemovedArrivalIsForgotten) {
  Barrier b;
  b.Arrive({1, 10, "a"});
  b.Arrive({2, 11, "b"});
  b.Remove(2);
  auto released = b.TryRelease({1});
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].worker, 1);
}

TEST(BarrierTest, RepeatedArrivalReplacesTheEarlierOne) {
  Barrier b;
  b.Arrive({1, 10, "a"});
  b.Arrive({1, 20, "a"});
  auto released = b.TryRelease({1});
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].request_id, 20u);
}

}  // namespace
}  // namespace hetps
