// Every aggregator under every consistency controller: the combination is either refused with
// a reason or defined, and a defined one is driven here through the real controller and
// partition the way the server drives them, so no aggregator is silently bypassed.
#include "server/aggregation/aggregator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "server/partition_store.h"

namespace hetps {
namespace {

// The combinations hetps defines, as each aggregator declares them by the controllers' apply
// schedules (with its parameters at their defaults); every other pair must be refused.
bool Defined(const std::string& aggregator, const std::string& consistency) {
  const std::vector<ApplySchedule>& defined = Aggregators().EntryFor(aggregator).schedules;
  const ApplySchedule schedule = Controllers().EntryFor(consistency).schedule;
  return std::find(defined.begin(), defined.end(), schedule) != defined.end();
}

struct Outcome {
  std::vector<float> values;
  int64_t version = 0;
};

// Three workers run `clocks` clocks in lockstep, each pushing a gradient of ones, the way the
// server hands pushes over: held for rounds under a synchronous controller, else to the
// aggregator with the controller's window; closed rounds applied as they close.
Outcome Drive(const std::string& consistency, const std::string& aggregator, int clocks = 8) {
  const std::vector<int32_t> workers = {0, 1, 2};
  auto controller = MakeController(consistency, workers);
  EXPECT_TRUE(controller.ok()) << controller.status().ToString();
  auto optimizer = MakeOptimizer("sgd:lr=0.1");
  auto spec = Aggregators().Parse(aggregator);
  EXPECT_TRUE(optimizer.ok() && spec.ok());
  Partition p;
  p.length = 2;
  PartitionState part(p, 0);
  const std::vector<float> zero = {0, 0}, ones = {1, 1};
  part.InitializeFrom(zero.data());
  part.set_aggregator(Aggregators().EntryFor(spec->name()).make(*spec, **optimizer));
  ConsistencyController& c = **controller;
  double now = 0;
  for (int64_t clock = 0; clock < clocks; ++clock) {
    for (int32_t w : workers) {
      if (c.Accepts(clock)) {
        if (c.synchronous()) {
          part.Hold(clock, w, zmq::message_t(ones.data(), ones.size() * sizeof(float)), 1,
                    part.version());
        } else {
          PushInfo info;
          info.worker = w;
          info.clock = clock;
          info.base_version = part.version();
          info.window = c.window();
          part.aggregator()->OnPush(part, info, ones.data());
        }
      }
      c.OnClock(w, clock, now += 1);
      for (const RoundSpec& round : c.TakeRounds()) part.ApplyRound(**optimizer, round);
    }
    // Rounds the scheduler closes (selected): this one keeps every worker's upload.
    c.OnRoundClosed(clock, workers, {});
    for (const RoundSpec& round : c.TakeRounds()) part.ApplyRound(**optimizer, round);
  }
  return {{part.values(), part.values() + 2}, part.version()};
}

TEST(AggregatorTest, EveryCombinationIsDefinedOrRefusedWithAReason) {
  for (const std::string& a : Aggregators().Names()) {
    for (const std::string& c : Controllers().Names()) {
      Status s = CheckCombination(*Aggregators().Parse(a), *Controllers().Parse(c));
      EXPECT_EQ(s.ok(), Defined(a, c)) << a << " under " << c << ": " << s.ToString();
      if (!s.ok()) {
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(s.message().find("does not combine with consistency " + c), std::string::npos)
            << s.message();
        continue;
      }
      Outcome r = Drive(c, a);
      EXPECT_GT(r.version, 0) << a << " under " << c << " never changed the model";
      EXPECT_NE(r.values[0], 0.0f) << a << " under " << c;
    }
  }
}

TEST(AggregatorTest, PerPushOptionsOfSumAreRefusedWhereRoundsCombine) {
  for (const char* option : {"sum:staleness_lr=inverse", "sum:compensation=dcasgd"}) {
    for (const std::string& c : Controllers().Names()) {
      const ApplySchedule schedule = Controllers().EntryFor(c).schedule;
      const bool rounds = schedule == ApplySchedule::kLockstepRounds ||
                          schedule == ApplySchedule::kQuorumRounds ||
                          schedule == ApplySchedule::kScheduledRounds;
      Status s = CheckCombination(*Aggregators().Parse(option), *Controllers().Parse(c));
      EXPECT_EQ(s.ok(), !rounds) << option << " under " << c << ": " << s.ToString();
    }
  }
}

// The aggregators' own signatures show through the controller: a bypassed aggregator would
// look like sum.
TEST(AggregatorTest, DefinedCombinationsBehaveAsTheAggregatorNotAsSum) {
  // bsp + sum: one step per clock on the sum of the three gradients.
  Outcome sum = Drive("bsp", "sum");
  EXPECT_EQ(sum.version, 8);
  EXPECT_FLOAT_EQ(sum.values[0], -0.1f * 3 * 8);
  // bsp + fedavg: one step per clock on their sample-weighted mean.
  Outcome fedavg = Drive("bsp", "fedavg");
  EXPECT_EQ(fedavg.version, 8);
  EXPECT_FLOAT_EQ(fedavg.values[0], -0.1f * 8);
  // asp + fedbuff:k=3: one step per three deltas.
  Outcome fedbuff = Drive("asp", "fedbuff:k=3,exponent=0");
  EXPECT_EQ(fedbuff.version, 8);
  // softsync:n=1 + sum: one step per window of three gradients.
  EXPECT_EQ(Drive("softsync:n=1", "sum").version, 8);
  // asp + sum: one step per push.
  EXPECT_EQ(Drive("asp", "sum").version, 24);
}

}  // namespace
}  // namespace hetps
