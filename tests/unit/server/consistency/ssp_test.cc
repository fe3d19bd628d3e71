#include <gtest/gtest.h>

#include "tests/unit/server/consistency/simulation.h"

namespace hetps::testing {
namespace {

TEST(SspTest, GapAndReadStalenessNeverExceedS) {
  for (int64_t s : {0, 1, 2, 4}) {
    auto c = Make("ssp:staleness=" + std::to_string(s), 4);
    SimResult r = Simulate(*c, {1.0, 1.3, 2.0, 7.0}, 500);
    EXPECT_LE(r.max_gap, s) << "s=" << s;
    EXPECT_LE(r.max_read_staleness, s) << "s=" << s;
    EXPECT_GT(r.reads, 100);
    // The bound is reached, not just respected: fast workers really run ahead.
    if (s > 0) {
      EXPECT_EQ(r.max_gap, s);
    }
  }
}

TEST(SspTest, ReadAtClockCSeesEveryUpdateTaggedUpToCMinusSMinusOne) {
  auto c = Make("ssp:staleness=" + std::to_string(2), 2);
  for (int64_t k = 0; k < 3; ++k) c->OnClock(0, k, 1.0);  // worker 0 is at clock 3
  // Worker 1 finished nothing yet: reads at clocks 0..2 only.
  EXPECT_TRUE(c->ReadReady(0, 2));
  EXPECT_FALSE(c->ReadReady(0, 3));
  c->OnClock(1, 0, 1.0);
  EXPECT_TRUE(c->ReadReady(0, 3));
}

TEST(SspTest, BspIsABarrierEveryClock) {
  auto c = Make("bsp", 3);
  EXPECT_TRUE(c->synchronous());
  SimResult r = Simulate(*c, {1.0, 2.0, 5.0}, 100);
  EXPECT_EQ(r.max_gap, 0);
  EXPECT_EQ(r.max_read_staleness, 0);
  // Everyone finished the same number of clocks, within one.
  EXPECT_LE(*std::max_element(r.finished.begin(), r.finished.end()) -
                *std::min_element(r.finished.begin(), r.finished.end()),
            1);
}

TEST(SspTest, AspNeverBlocksWhenAWorkerIsPaused) {
  auto c = Make("asp", 3);
  const double inf = std::numeric_limits<double>::infinity();
  SimResult r = Simulate(*c, {1.0, 2.0, inf}, 100);
  EXPECT_EQ(r.finished[0], 100);
  EXPECT_EQ(r.finished[1], 50);
  EXPECT_EQ(r.finished[2], 0);
}

TEST(SspTest, PausedWorkerBlocksSspUntilItIsRemoved) {
  auto c = Make("ssp:staleness=" + std::to_string(2), 2);
  const double inf = std::numeric_limits<double>::infinity();
  SimResult r = Simulate(*c, {1.0, inf}, 100);
  EXPECT_EQ(r.finished[0], 3);  // finished clocks 0..2, may not start 3
  EXPECT_FALSE(c->TryStart(0, 3, 100));
  c->RemoveWorker(1);  // declared dead
  EXPECT_TRUE(c->TryStart(0, 3, 100));
  EXPECT_TRUE(c->ReadReady(0, 5));  // only its own clock (3) bounds it now
  EXPECT_FALSE(c->ReadReady(0, 6));
}

TEST(SspTest, UnknownNameAndBadParametersAreErrors) {
  EXPECT_EQ(MakeController("bulk", Ids(2)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeController("ssp:staleness=-1", Ids(2)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeController("dssp:lower=-1,range=3", Ids(2)).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hetps::testing
