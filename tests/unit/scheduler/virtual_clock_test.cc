// The virtual clock's conservative release rule on scripted sequences (scheduler/virtual_clock.h):
// nothing is released while a participant could still send something earlier, events go in
// virtual-time order whatever their arrival order, and a participant that dies, leaves or is
// finished holds nothing up.
#include "scheduler/virtual_clock.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

Arrival From(int32_t worker) { return Arrival{worker, 1, "id" + std::to_string(worker)}; }

void Check(VirtualClock& c, int32_t worker, double t) {
  c.Hold(proto::ROUND_CHECKIN, From(worker), worker, t, {});
}

TEST(VirtualClockTest, NothingGoesWhileALiveWorkerHasNotSpoken) {
  VirtualClock c;
  const std::vector<int32_t> live = {1, 2, 3};
  Check(c, 2, 5.0);
  Check(c, 1, 1.0);
  EXPECT_FALSE(c.Release(live)) << "worker 3 has sent nothing: it could still send at 0";
  EXPECT_EQ(c.Blocking(live), std::vector<int32_t>{3});
  Check(c, 3, 3.0);
  // Every worker waits: the events go by virtual time, not by arrival.
  std::vector<int32_t> order;
  while (auto e = c.Release(live)) order.push_back(e->arrival.worker);
  EXPECT_EQ(order, (std::vector<int32_t>{1, 3, 2}));
  EXPECT_DOUBLE_EQ(c.now(), 5.0);
}

TEST(VirtualClockTest, AnAnsweredWorkerHoldsBackWhatIsNotEarlierThanItsTime) {
  VirtualClock c;
  const std::vector<int32_t> live = {1, 2};
  Check(c, 1, 1.0);
  Check(c, 2, 4.0);
  auto first = c.Release(live);
  ASSERT_TRUE(first);
  c.Answered(1, /*finished=*/false);  // worker 1 works from t = 1
  EXPECT_FALSE(c.Release(live)) << "worker 1 may still report something before 4";
  EXPECT_DOUBLE_EQ(c.Bound(live), 1.0);
  c.Hold(proto::ROUND_UPLOADED, From(1), 1, 2.5, {});
  auto second = c.Release(live);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->arrival.worker, 1);
  EXPECT_EQ(second->type, proto::ROUND_UPLOADED);
  EXPECT_DOUBLE_EQ(c.now(), 2.5);
  auto third = c.Release(live);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->arrival.worker, 2);
}

TEST(VirtualClockTest, ADeclaredLookaheadLetsEarlierEventsGoWhileAClientTrains) {
  VirtualClock c;
  const std::vector<int32_t> live = {1, 2};
  Check(c, 1, 0.0);
  Check(c, 2, 0.0);
  while (c.Release(live)) {
  }
  c.Answered(1, false);  // both selected at 0
  c.Answered(2, false);
  c.Hold(proto::ROUND_UPLOADED, From(1), 1, 3.0, {});
  EXPECT_FALSE(c.Release(live)) << "worker 2 may upload before 3";
  c.Declare(2, 2.0);  // it pulled: its training ends at 2, its upload comes later
  EXPECT_FALSE(c.Release(live)) << "2 is before 3: worker 2 may still report at 2";
  c.Declare(2, 5.0);
  c.Declare(2, 4.0);  // a bound never goes back
  EXPECT_DOUBLE_EQ(c.Bound(live), 5.0);
  auto e = c.Release(live);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->arrival.worker, 1);
  c.Declare(1, 10.0);  // worker 1 waits for its answer: its declaration changes nothing
  c.Answered(1, false);
  EXPECT_DOUBLE_EQ(c.Bound(live), 3.0);
}

TEST(VirtualClockTest, EqualTimesGoByRankThenArrival) {
  VirtualClock c;
  const std::vector<int32_t> live = {7, 8};
  c.Hold(proto::ROUND_CHECKIN, From(8), /*rank=*/1, 2.0, {});
  c.Hold(proto::ROUND_CHECKIN, From(7), /*rank=*/2, 2.0, {});
  EXPECT_EQ(c.Release(live)->arrival.worker, 8);
  EXPECT_EQ(c.Release(live)->arrival.worker, 7);
}

TEST(VirtualClockTest, ADeadOrFinishedWorkerHoldsNothingUp) {
  VirtualClock c;
  const std::vector<int32_t> live = {1, 2, 3};
  Check(c, 1, 1.0);
  Check(c, 2, 2.0);
  Check(c, 3, 3.0);
  ASSERT_EQ(c.Release(live)->arrival.worker, 1);
  c.Answered(1, /*finished=*/true);  // the run is done for it: it sends nothing more
  ASSERT_EQ(c.Release(live)->arrival.worker, 2);
  c.Answered(2, /*finished=*/false);  // selected at 2: it may upload before 3
  EXPECT_FALSE(c.Release(live));
  c.Remove(2);  // it died
  ASSERT_EQ(c.Release({1, 3})->arrival.worker, 3);
  // A dead worker's held requests go with it.
  c.Answered(3, false);
  Check(c, 3, 9.0);
  c.Remove(3);
  EXPECT_EQ(c.held(), 0u);
  EXPECT_DOUBLE_EQ(c.Bound({1, 3}), VirtualClock::kNever);
}

TEST(VirtualClockTest, ATimerFiresOnlyBeforeEveryHeldEventAndEveryBound) {
  VirtualClock c;
  const std::vector<int32_t> live = {1, 2};
  Check(c, 1, 0.0);
  Check(c, 2, 0.0);
  while (c.Release(live)) {
  }
  c.Answered(1, false);  // both selected at 0, training
  c.Answered(2, false);
  EXPECT_FALSE(c.Fire(3.0, live)) << "a client may still upload before the deadline";
  c.Hold(proto::ROUND_UPLOADED, From(1), 1, 2.0, {});
  c.Hold(proto::ROUND_UPLOADED, From(2), 2, 7.0, {});
  EXPECT_FALSE(c.Fire(3.0, live)) << "the upload at 2 comes first";
  ASSERT_TRUE(c.Release(live));
  c.Answered(1, false);
  EXPECT_FALSE(c.Fire(3.0, live)) << "worker 1 works from 2 and may send before 3";
  c.Hold(proto::ROUND_CHECKIN, From(1), 1, 2.0, {});
  ASSERT_TRUE(c.Release(live));  // its check-in at 2; it waits to be selected
  EXPECT_TRUE(c.Fire(3.0, live));
  EXPECT_DOUBLE_EQ(c.now(), 3.0);
  EXPECT_FALSE(c.Fire(7.0, live)) << "a timer at a held event's time fires after it";
}

TEST(VirtualClockTest, ATimerDueBeforeTheEarliestHeldEventHoldsItBack) {
  VirtualClock c;
  const std::vector<int32_t> live = {1};
  Check(c, 1, 5.0);
  EXPECT_FALSE(c.Release(live, /*not_after=*/4.0)) << "the deadline at 4 fires first";
  EXPECT_TRUE(c.Fire(4.0, live));
  ASSERT_TRUE(c.Release(live, /*not_after=*/5.0)) << "an event at the timer's time goes first";
}

TEST(VirtualClockTest, ATimeInThePastIsTakenAsNow) {
  VirtualClock c;
  const std::vector<int32_t> live = {1};
  Check(c, 1, 4.0);
  ASSERT_TRUE(c.Release(live));
  c.Answered(1, false);
  c.Hold(proto::ROUND_UPLOADED, From(1), 1, 1.0, {});
  auto e = c.Release(live);
  ASSERT_TRUE(e);
  EXPECT_DOUBLE_EQ(e->t, 4.0);
  EXPECT_DOUBLE_EQ(c.now(), 4.0);
}

// Data-centre turns: worker 1's request parked at a server makes it wait (bound +inf), so
// worker 2's later turn may go; the turn that released it makes it work from that turn's time,
// whether its own declaration (its next turn's time) arrives before or after the release.
TEST(VirtualClockTest, AParkedWorkerWaitsUntilTheTurnThatReleasesItThenWorksFromThere) {
  for (const bool declared_first : {false, true}) {
    VirtualClock c;
    const std::vector<int32_t> live = {1, 2};
    c.Hold(proto::VIRTUAL_TURN, From(1), 1, 1.0, {});
    c.Hold(proto::VIRTUAL_TURN, From(2), 2, 3.0, {});
    ASSERT_TRUE(c.Release(live));
    c.Answered(1, /*finished=*/false);
    EXPECT_FALSE(c.Release(live)) << "worker 1's turn is still working at 1";
    c.Parked(1);  // its clock was parked for worker 2
    auto second = c.Release(live);
    ASSERT_TRUE(second);
    EXPECT_EQ(second->arrival.worker, 2);
    c.Answered(2, /*finished=*/false);
    if (declared_first) c.Declare(1, 3.5);  // released at 3, computes 0.5
    c.Unparked(1);                          // the end of worker 2's turn names it
    if (!declared_first) {
      EXPECT_DOUBLE_EQ(c.Bound(live), 3.0) << "worker 1 works from the releasing turn's time";
      c.Declare(1, 3.5);
    }
    EXPECT_DOUBLE_EQ(c.Bound(live), 3.0) << "worker 2 works from 3";
    c.Declare(2, 4.0);
    EXPECT_DOUBLE_EQ(c.Bound(live), 3.5) << (declared_first ? "declared first" : "after");
    c.Answered(1, /*finished=*/true);
    c.Unparked(1);  // a late or repeated release changes nothing for a finished worker
    EXPECT_DOUBLE_EQ(c.Bound(live), 4.0);
  }
}

// The race that matters: the released worker hears its answer, declares and asks for its next
// turn before the turn that released it ends. Its held request keeps it waiting: the late
// release must not make it "working" at the release's time (it would wait for itself).
TEST(VirtualClockTest, AReleaseThatArrivesAfterTheWorkersNextRequestChangesNothing) {
  VirtualClock c;
  const std::vector<int32_t> live = {1, 2};
  c.Hold(proto::VIRTUAL_TURN, From(1), 1, 1.0, {});
  c.Hold(proto::VIRTUAL_TURN, From(2), 2, 2.0, {});
  ASSERT_TRUE(c.Release(live));
  c.Answered(1, false);
  c.Parked(1);
  ASSERT_TRUE(c.Release(live));
  c.Answered(2, false);  // worker 2's turn at 2 releases worker 1
  c.Declare(1, 2.0);     // worker 1 heard first
  c.Hold(proto::VIRTUAL_TURN, From(1), 1, 2.0, {});
  c.Unparked(1);  // then the end of worker 2's turn
  c.Declare(2, 2.0);
  c.Hold(proto::VIRTUAL_TURN, From(2), 2, 2.0, {});
  auto next = c.Release(live);
  ASSERT_TRUE(next) << "worker 1 must not hold back its own turn";
  EXPECT_EQ(next->arrival.worker, 1);
}

// Taking held events out of order (a secure round's late holders): exactly those the predicate
// accepts go, in time order, without moving now(); the rest stay held in their order.
TEST(VirtualClockTest, TakeRemovesTheAcceptedEventsWithoutMovingTheClock) {
  VirtualClock c;
  const std::vector<int32_t> live = {1, 2, 3};
  Check(c, 3, 7.0);
  c.Hold(proto::ROUND_UPLOADED, From(2), 2, 6.0, {});
  Check(c, 1, 2.0);
  const std::vector<VirtualClock::Event> taken =
      c.Take([](const VirtualClock::Event& e) { return e.type == proto::ROUND_UPLOADED; });
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].arrival.worker, 2);
  EXPECT_DOUBLE_EQ(taken[0].t, 6.0);
  EXPECT_DOUBLE_EQ(c.now(), 0.0);
  EXPECT_EQ(c.held(), 2u);
  auto first = c.Release(live);  // worker 2 waits for its answer: it holds nothing back
  ASSERT_TRUE(first);
  EXPECT_EQ(first->arrival.worker, 1);
  c.Answered(2, /*finished=*/false);  // answered at now() = 2: its next request comes later
  EXPECT_FALSE(c.Release(live)) << "worker 2 could still send something before 7";
  Check(c, 2, 8.0);
  auto next = c.Release(live);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->arrival.worker, 3);
}

}  // namespace
}  // namespace hetps
