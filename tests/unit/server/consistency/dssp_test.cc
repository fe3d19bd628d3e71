#include <gtest/gtest.h>

#include "tests/unit/server/consistency/simulation.h"

namespace hetps::testing {
namespace {

TEST(DsspTest, WorkedExampleGivesThreeExtraIterations) {
  // T_f = 10, I_f = 1, T_s = 9, I_s = 4: S = {13, 17, ...}; F_3 = 13 meets S_1 (ALGORITHMS.md §2).
  EXPECT_EQ(DsspExtraIterations(10, 1, 9, 4, 12), 3);
  // Equal pace: waiting now is as good as anything; no extra iterations.
  EXPECT_EQ(DsspExtraIterations(10, 1, 9, 1, 12), 0);
  // Never more than r_max.
  EXPECT_EQ(DsspExtraIterations(0, 1, 0, 100, 5), 5);
}

TEST(DsspTest, EqualSpeedsBehaveExactlyLikeSspAtTheLowerBound) {
  for (int64_t lower : {0, 2, 3}) {
    auto dssp = Make(fmt::format("dssp:lower={},range={}", lower, 12), 4);
    auto ssp = Make("ssp:staleness=" + std::to_string(lower), 4);
    SimResult a = Simulate(*dssp, {1, 1, 1, 1}, 200);
    SimResult b = Simulate(*ssp, {1, 1, 1, 1}, 200);
    EXPECT_EQ(a.grants, b.grants) << "s_L=" << lower;
    EXPECT_EQ(a.finished, b.finished);
  }
}

TEST(DsspTest, GapStaysWithinUpperBoundAndExceedsTheLowerOne) {
  const int64_t lower = 3, range = 12;
  auto c = Make(fmt::format("dssp:lower={},range={}", lower, range), 3);
  SimResult r = Simulate(*c, {1.0, 1.1, 4.0}, 2000);
  EXPECT_LE(r.max_gap, lower + range + 1);
  EXPECT_GT(r.max_gap, lower);  // the controller did grant extra iterations
  EXPECT_LE(r.max_read_staleness, lower + range + 1);
}

TEST(DsspTest, RemovingTheSlowestReleasesTheOthers) {
  auto c = Make(fmt::format("dssp:lower={},range={}", 1, 2), 2);
  const double inf = std::numeric_limits<double>::infinity();
  SimResult r = Simulate(*c, {1.0, inf}, 100);
  EXPECT_LE(r.finished[0], 1 + 2 + 1);
  EXPECT_FALSE(c->TryStart(0, r.finished[0] + 1, 100));
  c->RemoveWorker(1);
  EXPECT_TRUE(c->TryStart(0, r.finished[0] + 1, 100));
}

}  // namespace
}  // namespace hetps::testing
