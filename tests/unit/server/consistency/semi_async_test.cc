#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/unit/server/consistency/simulation.h"

namespace hetps::testing {
namespace {

// The simulations run on their own clock: rounds never time out unless a test says so.
std::string SemiAsyncPolicy(int64_t k, int64_t timeout_ms = 1000000) {
  return fmt::format("semi_async:quorum={},exponent=0.5,timeout_ms={}",
                     k == 0 ? "auto" : std::to_string(k), timeout_ms);
}

TEST(SemiAsyncTest, RoundFiresExactlyAtTheKthUploadAndReleasesOnlyThoseK) {
  auto c = Make(SemiAsyncPolicy(2), 4);
  c->OnClock(0, 0, 1.0);
  EXPECT_TRUE(c->TakeRounds().empty());
  EXPECT_FALSE(c->TryStart(0, 1, 1.0));  // waits for its round
  EXPECT_TRUE(c->TryStart(3, 1, 1.0));   // never uploaded: keeps training
  c->OnClock(1, 0, 1.5);                 // the K-th upload
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].workers, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(rounds[0].one_step);
  EXPECT_EQ(rounds[0].combine, RoundSpec::Combine::kWeighted);
  EXPECT_TRUE(c->TryStart(0, 1, 1.5));
  EXPECT_TRUE(c->TryStart(1, 1, 1.5));
}

TEST(SemiAsyncTest, AutoQuorumFollowsTheSchedulersHint) {
  auto c = Make(SemiAsyncPolicy(0), 4);
  // Before any measurement the automatic quorum waits for everyone; the scheduler flagged one
  // straggler, so K = 3 on every server alike.
  c->OnHint({3}, 3);
  c->OnClock(0, 0, 1.0);
  c->OnClock(1, 0, 1.1);
  EXPECT_TRUE(c->TakeRounds().empty());
  c->OnClock(2, 0, 1.2);
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].workers, (std::vector<int32_t>{0, 1, 2}));
  // A hint that lowers K closes what is waiting at once.
  c->OnClock(0, 1, 2.0);
  EXPECT_TRUE(c->TakeRounds().empty());
  c->OnHint({2, 3}, 1);
  EXPECT_EQ(c->TakeRounds().size(), 1u);
}

TEST(SemiAsyncTest, AFixedQuorumIgnoresHints) {
  auto c = Make(SemiAsyncPolicy(2), 4);
  c->OnHint({}, 4);
  c->OnClock(0, 0, 1.0);
  c->OnClock(1, 0, 1.1);
  EXPECT_EQ(c->TakeRounds().size(), 1u);
}

TEST(SemiAsyncTest, EveryUploadIsUsedExactlyOnce) {
  auto c = Make(SemiAsyncPolicy(3), 5);
  SimResult r = Simulate(*c, {1.0, 1.3, 1.7, 2.2, 6.0}, 300);
  std::map<int32_t, int64_t> used;
  int64_t rounds = 0;
  for (const auto& round : c->TakeRounds()) {
    ++rounds;
    ASSERT_EQ(round.workers.size(), 3u);
    EXPECT_EQ(std::set<int32_t>(round.workers.begin(), round.workers.end()).size(), 3u);
    for (int32_t w : round.workers) ++used[w];
  }
  EXPECT_GT(rounds, 50);
  for (int32_t w = 0; w < 5; ++w) {
    // Each finished clock is one upload; all but possibly the last (still waiting) were used.
    EXPECT_LE(used[w], r.finished[w]) << w;
    EXPECT_GE(used[w], r.finished[w] - 1) << w;
  }
  // The slowest is not waited for: the fastest uploaded far more often.
  EXPECT_GT(r.finished[0], 3 * r.finished[4]);
}

TEST(SemiAsyncTest, KEqualsNWaitsForEveryone) {
  auto c = Make(SemiAsyncPolicy(3), 3);
  SimResult r = Simulate(*c, {1.0, 2.0, 3.0}, 100);
  for (const auto& round : c->TakeRounds()) EXPECT_EQ(round.workers.size(), 3u);
  EXPECT_LE(r.finished[0] - r.finished[2], 1);
}

TEST(SemiAsyncTest, AutoQuorumWaitsForEveryoneUntilMeasured) {
  auto c = Make(SemiAsyncPolicy(0), 4);  // auto: N until intervals are measured
  for (int w = 0; w < 3; ++w) c->OnClock(w, 0, 1.0);
  EXPECT_TRUE(c->TakeRounds().empty());
}

TEST(SemiAsyncTest, ARoundClosesWithWhatArrivedAtItsDeadline) {
  auto c = Make(SemiAsyncPolicy(3, 500), 3);
  c->OnClock(0, 0, 10.0);
  c->Tick(10.4);
  EXPECT_TRUE(c->TakeRounds().empty());
  c->Tick(10.5);
  auto rounds = c->TakeRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].workers, std::vector<int32_t>{0});
  EXPECT_TRUE(c->TryStart(0, 1, 10.5));
  c->Tick(100);  // nothing waiting: nothing to close
  EXPECT_TRUE(c->TakeRounds().empty());
}

TEST(SemiAsyncTest, AutoQuorumLeavesOutAStragglerFromItsTrainingTime) {
  auto c = Make(SemiAsyncPolicy(0), 4);
  SimResult r = Simulate(*c, {1.0, 1.0, 1.0, 3.0}, 300);
  // After the first rounds the measured training times are {1, 1, 1, 3}: K = 3, so the fast
  // workers go on without the straggler and upload about 3x as often.
  EXPECT_GT(r.finished[0], 2 * r.finished[3]);
  auto rounds = c->TakeRounds();
  EXPECT_EQ(rounds.back().workers.size(), 3u);
}

TEST(SemiAsyncTest, DeadWorkersLeaveTheQuorum) {
  auto c = Make(SemiAsyncPolicy(3), 3);
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
