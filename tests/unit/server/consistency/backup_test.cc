#include <gtest/gtest.h>

#include <set>

#include "tests/unit/server/consistency/simulation.h"

namespace hetps::testing {
namespace {

std::string BackupPolicy(int64_t b) {
  return b < 0 ? "backup:backups=auto" : "backup:backups=" + std::to_string(b);
}

TEST(BackupTest, AutoWaitsForEveryoneButTheFlaggedStragglers) {
  auto c = Make(BackupPolicy(-1), 4);
  c->OnClock(0, 0, 1.0);
  c->OnClock(1, 0, 1.1);
  c->OnClock(2, 0, 1.2);
  EXPECT_TRUE(c->TakeRounds().empty());  // no hint yet: all four
  c->OnHint({3}, 3);                     // worker 3 flagged: the step closes with three
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].workers, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(c->Accepts(0));  // the straggler's step-0 gradient comes too late
  c->OnHint({}, 4);             // it recovered: everyone again
  for (int32_t w = 0; w < 3; ++w) c->OnClock(w, 1, 2.0);
  EXPECT_TRUE(c->TakeRounds().empty());
  c->OnClock(3, 1, 2.5);
  EXPECT_EQ(c->TakeRounds().size(), 1u);
}

TEST(BackupTest, EveryStepTakesExactlyNDistinctWorkersInOrder) {
  auto c = Make(BackupPolicy(1), 4);  // N = 3 of 4
  ASSERT_TRUE(c->synchronous());
  SimResult r = Simulate(*c, {1.0, 1.2, 1.4, 5.0}, 200);
  auto rounds = c->TakeRounds();
  ASSERT_GT(rounds.size(), 100u);
  int64_t straggler_in = 0;
  for (size_t k = 0; k < rounds.size(); ++k) {
    EXPECT_EQ(rounds[k].clock, static_cast<int64_t>(k));  // one round per step, none skipped
    EXPECT_EQ(rounds[k].combine, RoundSpec::Combine::kMean);
    EXPECT_TRUE(rounds[k].only_clock);
    ASSERT_EQ(rounds[k].workers.size(), 3u);
    EXPECT_EQ(std::set<int32_t>(rounds[k].workers.begin(), rounds[k].workers.end()).size(), 3u);
    straggler_in += std::count(rounds[k].workers.begin(), rounds[k].workers.end(), 3);
  }
  EXPECT_EQ(straggler_in, 0) << "the 5x straggler is the backup: always last";
  // The pace is the N-th fastest worker's (1.4 per step), not the straggler's (5.0).
  EXPECT_GE(r.finished[0], static_cast<int64_t>(0.95 * 200 / 1.4));
  EXPECT_TRUE(c->TakeRounds().empty());  // taken once
}

TEST(BackupTest, LateGradientsAreRefusedAndTheLateWorkerMovesUp) {
  auto c = Make(BackupPolicy(1), 3);  // N = 2 of 3
  c->OnClock(0, 0, 1.0);
  c->OnClock(1, 0, 1.1);  // step 0 closes with {0, 1}
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].workers, (std::vector<int32_t>{0, 1}));
  EXPECT_FALSE(c->Accepts(0));  // worker 2's step-0 gradient arrives too late
  EXPECT_TRUE(c->Accepts(1));
  EXPECT_TRUE(c->TryStart(0, 1, 1.2));
  EXPECT_FALSE(c->TryStart(0, 2, 1.2));  // step 1 is still open
  c->OnClock(2, 0, 3.0);                 // the late worker finishes step 0
  EXPECT_TRUE(c->TakeRounds().empty());  // it changes no closed step
  EXPECT_EQ(c->ContinueAt(2, 0), 1);
}

TEST(BackupTest, DeadWorkersShrinkTheQuorumSoNoStepWaitsForever) {
  auto c = Make(BackupPolicy(0), 3);  // N = 3: everyone
  c->OnClock(0, 0, 1.0);
  c->OnClock(1, 0, 1.0);
  EXPECT_TRUE(c->TakeRounds().empty());
  c->RemoveWorker(2);
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].workers.size(), 2u);
}

}  // namespace
}  // namespace hetps::testing
