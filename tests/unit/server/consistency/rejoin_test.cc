// Every controller takes a worker that joins the running cluster (a restarted worker under its
// new node id, or a new one): it starts at the slowest live worker's clock (backup: the open
// step), counts from then on (gates, quorums and rounds wait for it), and the cluster goes on.
#include <gtest/gtest.h>

#include "tests/unit/server/consistency/simulation.h"

namespace hetps::testing {
namespace {

class RejoinTest : public ::testing::TestWithParam<std::string> {};

// Workers 0..2 finish clock 0; worker 1 dies; 0 and 2 finish clocks 1 and 2; worker 7 joins.
// Then everyone finishes clock 3, and every one of them may go on.
TEST_P(RejoinTest, AJoinerStartsAtTheSlowestClockCountsAndEveryoneGoesOn) {
  auto c = Make(GetParam(), 3);
  double now = 1;
  auto finish = [&](const std::vector<int32_t>& workers, int64_t clock) {
    for (int32_t w : workers) {
      ASSERT_TRUE(c->TryStart(w, clock, now)) << "worker " << w << " clock " << clock;
      c->OnClock(w, clock, now += 0.01);
      (void)c->TakeRounds();
    }
  };
  finish({0, 1, 2}, 0);
  c->RemoveWorker(1);
  (void)c->TakeRounds();
  finish({0, 2}, 1);
  finish({0, 2}, 2);
  const int64_t start = c->AddWorker(7);
  EXPECT_EQ(start, 3);
  EXPECT_TRUE(c->clocks().contains(7));
  EXPECT_EQ(c->clocks().clock(7), 3);
  EXPECT_EQ(c->AddWorker(7), 3) << "a repeated join changes nothing";
  finish({0, 2, 7}, 3);
  for (int32_t w : {0, 2, 7}) {
    EXPECT_TRUE(c->TryStart(w, c->ContinueAt(w, 3), now)) << "worker " << w;
    EXPECT_EQ(c->ContinueAt(w, 3), 4);
  }
}

// A controller that takes over clocks (a live switch mid-run, or a run resumed from a
// whole-run checkpoint: every worker at the cut's clock) goes on from there: rounds close at the
// adopted clocks, not at clock 0 (backup's open step used to stay at 0, so no step ever closed).
TEST_P(RejoinTest, GoesOnFromAdoptedClocks) {
  auto c = Make(GetParam(), 3);
  ClockTable at50({0, 1, 2});
  for (int32_t w : {0, 1, 2}) at50.Advance(w, 49);
  c->AdoptClocks(at50);
  EXPECT_TRUE(c->TakeRounds().empty()) << "the clocks below 50 were closed before";
  double now = 1;
  for (int64_t clock = 50; clock < 53; ++clock) {
    int64_t rounds = 0;
    for (int32_t w : {0, 1, 2}) {
      ASSERT_TRUE(c->TryStart(w, clock, now)) << "worker " << w << " clock " << clock;
      c->OnClock(w, clock, now += 0.01);
      for (const RoundSpec& r : c->TakeRounds()) {
        ++rounds;
        if (r.clock != kUnbounded) {
          EXPECT_GE(r.clock, 50);
        }
      }
    }
    if (c->synchronous()) {
      EXPECT_GE(rounds, 1) << "clock " << clock;
    }
    for (int32_t w : {0, 1, 2}) EXPECT_EQ(c->ContinueAt(w, clock), clock + 1);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryController, RejoinTest, ::testing::ValuesIn(ClockDrivenControllers()),
                         [](const auto& info) { return info.param; });

TEST(RejoinTest, BspRoundsWaitForTheJoiner) {
  auto c = Make("bsp", 2);
  c->OnClock(0, 0, 1);
  c->OnClock(1, 0, 1);
  ASSERT_EQ(c->TakeRounds().size(), 1u);
  c->RemoveWorker(1);
  c->OnClock(0, 1, 2);
  ASSERT_EQ(c->TakeRounds().size(), 1u);  // worker 0 alone closes clock 1
  EXPECT_EQ(c->AddWorker(5), 2);
  c->OnClock(0, 2, 3);
  EXPECT_TRUE(c->TakeRounds().empty()) << "clock 2 waits for the joiner";
  EXPECT_FALSE(c->TryStart(0, 3, 3));
  c->OnClock(5, 2, 4);
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].clock, 2);
  EXPECT_TRUE(c->TryStart(0, 3, 4));
}

TEST(RejoinTest, BspCountsRoundsAgainAfterEveryWorkerWasGone) {
  auto c = Make("bsp", 1);
  for (int64_t k = 0; k < 3; ++k) c->OnClock(0, k, 1.0 + k);
  ASSERT_EQ(c->TakeRounds().size(), 1u);  // rounds 0..2, as one step up to clock 2
  c->RemoveWorker(0);
  ASSERT_EQ(c->TakeRounds().size(), 1u);  // whatever was held is applied
  EXPECT_EQ(c->AddWorker(4), 3) << "the furthest clock reached";
  c->OnClock(4, 3, 5);
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u) << "rounds close again";
  EXPECT_EQ(rounds[0].clock, 3);
}

TEST(RejoinTest, SspJoinerHoldsBackNoOneMoreThanTheSlowest) {
  auto c = Make("ssp:staleness=1", 3);
  for (int64_t k = 0; k < 4; ++k) c->OnClock(0, k, 1);  // worker 0 at clock 4
  c->OnClock(1, 0, 1);                                  // worker 1 at clock 1
  c->RemoveWorker(2);                                   // worker 2 (clock 0) dies
  EXPECT_TRUE(c->TryStart(1, 2, 2));
  EXPECT_FALSE(c->TryStart(0, 5, 2));  // 5 - 1 > 1
  EXPECT_EQ(c->AddWorker(9), 1);
  EXPECT_FALSE(c->TryStart(0, 5, 2));
  EXPECT_TRUE(c->TryStart(9, 2, 2));
  c->OnClock(1, 1, 3);
  c->OnClock(1, 2, 3);
  EXPECT_FALSE(c->TryStart(0, 5, 3)) << "the joiner at clock 1 is now the slowest";
  c->OnClock(9, 1, 4);
  c->OnClock(9, 2, 4);
  c->OnClock(9, 3, 4);
  c->OnClock(1, 3, 4);
  EXPECT_TRUE(c->TryStart(0, 5, 4));
}

TEST(RejoinTest, BackupBackupsAreSparesAndAJoinerBeyondThemRaisesTheQuorum) {
  auto c = Make("backup:backups=1", 3);  // N = 2 of 3
  c->RemoveWorker(2);
  EXPECT_EQ(c->AddWorker(8), 0);  // the restarted worker: 3 live again, N stays 2
  c->OnClock(0, 0, 1);
  c->OnClock(8, 0, 1);
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].workers, (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(c->AddWorker(9), 1) << "a joiner starts at the open step";
  for (int32_t w : {0, 1}) c->OnClock(w, 1, 2);
  EXPECT_TRUE(c->TakeRounds().empty()) << "4 live workers, 1 backup: N = 3";
  c->OnClock(9, 1, 2);
  EXPECT_EQ(c->TakeRounds().size(), 1u);
}

TEST(RejoinTest, SemiAsyncRoundsTakeTheJoinersUpload) {
  auto c = Make("semi_async:quorum=2,timeout_ms=100000", 2);
  c->RemoveWorker(1);
  c->OnClock(0, 0, 1);
  EXPECT_EQ(c->TakeRounds().size(), 1u);  // one live worker: K = 1
  EXPECT_EQ(c->AddWorker(6), 1);
  ASSERT_TRUE(c->TryStart(0, 1, 1));
  c->OnClock(0, 1, 2);
  EXPECT_TRUE(c->TakeRounds().empty()) << "K = 2 again";
  c->OnClock(6, 1, 2);
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].workers, (std::vector<int32_t>{0, 6}));
}

TEST(RejoinTest, SoftsyncWindowFollowsTheLiveWorkers) {
  auto c = Make("softsync:n=1", 2);
  EXPECT_EQ(c->window(), 2);
  c->RemoveWorker(1);
  EXPECT_EQ(c->window(), 1);
  c->AddWorker(3);
  c->AddWorker(4);
  EXPECT_EQ(c->window(), 3);
}

}  // namespace
}  // namespace hetps::testing
