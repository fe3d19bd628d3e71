#include "server/consistency_gate.h"

#include <gtest/gtest.h>

#include "server/aggregation/aggregator.h"
#include "server/consistency/controller.h"

namespace hetps {
namespace {

Envelope Request(proto::MsgType type, int32_t sender, int64_t clock, uint64_t id) {
  Envelope env;
  env.identity = NodeIdentity(sender);
  env.message.header.set_type(type);
  env.message.header.set_sender(sender);
  env.message.header.set_clock(clock);
  env.message.header.set_request_id(id);
  return env;
}

// A worker far ahead of the slowest under BSP parks its reads and clocks; beyond the limit the
// next is answered UNAVAILABLE at once (and a refused CLOCK is not counted), while the other
// worker is not affected; once the parked ones are released the worker is taken again.
TEST(ConsistencyGateTest, AWorkerParksAtMostItsLimitOfRequests) {
  std::vector<proto::Header> replies;
  int served = 0;
  ConsistencyGate gate(
      *Controllers().Parse("bsp"), *Aggregators().Parse("sum"),
      ConsistencyGate::Actions{
          [&](const std::string&, const proto::Header& h) { replies.push_back(h); },
          [&](DataRequest) { ++served; }, [](const RoundSpec&) {}, [] { return 0.0; }});
  gate.Start({1, 2});
  gate.SetParkedLimit(3);
  for (uint64_t id = 1; id <= 3; ++id) {
    Envelope e = Request(proto::PULL, 1, 5, id);
    gate.Admit(e);
  }
  EXPECT_EQ(gate.parked_reads(), 3);
  EXPECT_TRUE(replies.empty());
  Envelope over = Request(proto::PULL, 1, 5, 4);
  gate.Admit(over);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].type(), proto::ERROR);
  EXPECT_EQ(replies[0].error(), StatusCode::kUnavailable);
  EXPECT_EQ(replies[0].request_id(), 4u);
  EXPECT_NE(replies[0].error_message().find("3 requests waiting"), std::string::npos);
  Envelope clock = Request(proto::CLOCK, 1, 0, 5);
  gate.OnClock(clock);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[1].error(), StatusCode::kUnavailable);
  EXPECT_EQ(gate.parked_clocks(), 0);
  EXPECT_EQ(gate.parked_reads(), 3);

  Envelope other = Request(proto::PULL, 2, 0, 6);  // the other worker is served as before
  gate.Admit(other);
  EXPECT_EQ(served, 1);

  gate.RemoveWorker(2, "left");  // nothing holds worker 1 back now: its reads are served
  EXPECT_EQ(gate.parked_reads(), 0);
  EXPECT_EQ(served, 4);
  Envelope again = Request(proto::PULL, 1, 5, 7);
  gate.Admit(again);
  EXPECT_EQ(served, 5);
  EXPECT_EQ(replies.size(), 2u);
}

// A live switch never moves into, out of or between the modes whose rounds the scheduler runs
// (the clients' loops differ, and Policy.scheduler_rounds never changes); between clock-driven
// controllers it goes through.
TEST(ConsistencyGateTest, ALiveSwitchNeverCrossesBetweenClocksAndSchedulerRounds) {
  for (const std::string& from : Controllers().Names()) {
    ConsistencyGate gate(
        *Controllers().Parse(from), *Aggregators().Parse("sum"),
        ConsistencyGate::Actions{[](const std::string&, const proto::Header&) {},
                                 [](DataRequest) {}, [](const RoundSpec&) {}, [] { return 0.0; }});
    gate.Start({1, 2});
    const bool rounds = gate.scheduler_rounds();
    EXPECT_EQ(rounds, SchedulerRunsRounds(Controllers().EntryFor(from).schedule));
    for (const std::string& to : Controllers().Names()) {
      const ApplySchedule a = Controllers().EntryFor(from).schedule;
      const ApplySchedule b = Controllers().EntryFor(to).schedule;
      const bool crosses = (SchedulerRunsRounds(a) || SchedulerRunsRounds(b)) && a != b;
      Status s = gate.Switch(to);
      EXPECT_EQ(s.ok(), !crosses) << from << " -> " << to << ": " << s.ToString();
      if (crosses) {
        EXPECT_NE(s.message().find("cannot move into, out of or between"), std::string::npos)
            << s.message();
      }
      EXPECT_EQ(gate.scheduler_rounds(), rounds) << from << " -> " << to;
    }
  }
}

// Virtual time: under BSP worker 1's clock-1 read and its clock wait for worker 2. Each is
// answered PARKED at once (the turn ends); worker 2's clock at virtual time 5 releases both,
// stamped 5, and its own CLOCK_REPLY names worker 1 as released, so the scheduler knows. The
// controller runs on the requests' virtual times (the wall clock given is never read), and
// the scheduler's hints are ignored (they come from host times).
TEST(ConsistencyGateTest, VirtualRequestsAreNoticedWhenParkedAndNameWhomTheyRelease) {
  std::vector<proto::Header> replies;
  std::vector<DataRequest> served;
  ConsistencyGate gate(
      *Controllers().Parse("bsp"), *Aggregators().Parse("sum"),
      ConsistencyGate::Actions{
          [&](const std::string&, const proto::Header& h) { replies.push_back(h); },
          [&](DataRequest r) { served.push_back(std::move(r)); }, [](const RoundSpec&) {},
          [] {
            ADD_FAILURE() << "the wall clock was read under virtual time";
            return 0.0;
          }});
  gate.Start({1, 2});
  auto at = [](Envelope e, double t) {
    e.message.header.set_virtual_time(t);
    return e;
  };
  Envelope c1 = at(Request(proto::CLOCK, 1, 0, 1), 1.0);
  gate.OnClock(c1);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].type(), proto::PARKED);
  EXPECT_EQ(replies[0].request_id(), 1u);
  EXPECT_EQ(gate.parked_clocks(), 1);
  Envelope read = at(Request(proto::PULL, 1, 1, 2), 1.5);
  gate.Admit(read);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[1].type(), proto::PARKED);
  EXPECT_TRUE(served.empty());
  gate.OnHint({2}, 1);  // ignored under virtual time
  EXPECT_EQ(gate.parked_reads(), 1);

  Envelope c2 = at(Request(proto::CLOCK, 2, 0, 3), 5.0);
  gate.OnClock(c2);
  // Worker 1's clock reply (released), then worker 2's own reply naming worker 1.
  ASSERT_EQ(replies.size(), 4u);
  EXPECT_EQ(replies[2].type(), proto::CLOCK_REPLY);
  EXPECT_EQ(replies[2].request_id(), 1u);
  EXPECT_EQ(replies[2].virtual_time(), 5.0);
  EXPECT_EQ(replies[3].type(), proto::CLOCK_REPLY);
  EXPECT_EQ(replies[3].request_id(), 3u);
  EXPECT_EQ(replies[3].virtual_time(), 5.0);
  ASSERT_EQ(replies[3].virtual_turn().unparked_size(), 2);  // its clock and its read
  EXPECT_EQ(replies[3].virtual_turn().unparked(0), 1);
  EXPECT_EQ(replies[3].virtual_turn().unparked(1), 1);
  ASSERT_EQ(served.size(), 1u);  // the read, stamped with the time that released it
  EXPECT_EQ(served[0].message.header.virtual_time(), 5.0);
  EXPECT_EQ(gate.parked_reads() + gate.parked_clocks(), 0);

  // A request that goes at once names nobody and keeps its own time.
  Envelope c3 = at(Request(proto::CLOCK, 2, 1, 4), 6.0);
  gate.OnClock(c3);
  ASSERT_EQ(replies.size(), 5u);
  EXPECT_EQ(replies[4].type(), proto::PARKED);  // worker 2 is now ahead of worker 1
  EXPECT_EQ(replies[4].virtual_turn().unparked_size(), 0);
}

}  // namespace
}  // namespace hetps
