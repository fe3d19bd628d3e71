// The delay-compensation hook (server/aggregation/compensator.h) and LC-ASGD (ALGORITHMS.md §6).
#include "server/aggregation/compensator.h"

#include <gtest/gtest.h>

#include <cmath>

#include "durable.pb.h"
#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

// With nothing to compensate (no delay, nothing moved since the read, one loss report) every
// compensator is plain SGD, bit for bit.
TEST(CompensatorTest, NothingToCompensateIsPlainSgdForEveryCompensator) {
  ASSERT_FALSE(Compensators().Names().empty());
  for (const std::string& name : Compensators().Names()) {
    OnePartition c("sum:compensation=" + name, {1, 2}), plain("sum", {1, 2});
    c.Pull(0);
    plain.Pull(0);
    c.Push(0, 0, {0.3f, -0.7f}, 1.5);
    plain.Push(0, 0, {0.3f, -0.7f}, 1.5);
    EXPECT_EQ(c.values(), plain.values()) << name;
    // A zero gradient changes nothing whatever the compensator.
    const std::vector<float> before = c.values();
    c.Push(0, 0, {0, 0}, 1.0);
    EXPECT_EQ(c.values(), before) << name;
  }
}

// Every compensator's parameters are sum's; unknown compensators and bad values are refused.
TEST(CompensatorTest, ItsParametersAreTheSumAggregatorsAndAreChecked) {
  EXPECT_TRUE(Aggregators().Parse("sum:compensation=lcasgd,history=4,power=1,rho_min=0.2").ok());
  EXPECT_TRUE(Aggregators().Parse("sum:compensation=dcasgd,lambda=0.1").ok());
  EXPECT_FALSE(Aggregators().Parse("sum:compensation=lcasgd,history=1").ok());
  EXPECT_FALSE(Aggregators().Parse("sum:compensation=lcasgd,rho_min=0").ok());
  EXPECT_FALSE(Aggregators().Parse("sum:compensation=oracle").ok());
  const AlgorithmInfo* sum = Aggregators().Find("sum");
  ASSERT_NE(sum, nullptr);
  for (const std::string& name : Compensators().Names()) {
    for (const ParamDef& p : Compensators().Find(name)->params) {
      EXPECT_NE(sum->Param(p.name), nullptr) << name << " " << p.name;
    }
  }
}

// Worker 1 reports loss 2 at version 0, then 1 at version 10 (twice): its fitted slope is -0.1
// per version. A gradient 5 versions stale is applied where its loss is predicted at
// 1 - 0.1 * 5 = 0.5, half the reported 1: scaled by 0.5^power.
TEST(CompensatorTest, LcasgdScalesByThePredictedLossDropOverTheDelay) {
  for (double power : {0.5, 1.0}) {
    OnePartition p(fmt::format("sum:compensation=lcasgd,power={}", power), {0, 0});
    p.Push(1, 0, {0, 0}, 2.0);                             // version 1; one report: no prediction
    for (int i = 0; i < 9; ++i) p.Push(2, i + 1, {0, 0});  // no loss reported: not recorded
    ASSERT_EQ(p.state->version(), 10);
    p.Push(1, 10, {1, 0}, 1.0);  // no delay: plain
    EXPECT_FLOAT_EQ(p.values()[0], -1.0f);
    for (int i = 0; i < 4; ++i) p.Push(2, 11 + i, {0, 0});
    ASSERT_EQ(p.state->version(), 15);
    p.Push(1, 10, {0, 1}, 1.0);  // delay 5; reports (0, 2), (10, 1), (10, 1): slope -0.1
    EXPECT_FLOAT_EQ(p.values()[1], -static_cast<float>(std::pow(0.5, power))) << power;
  }
}

TEST(CompensatorTest, LcasgdLeavesGradientsAloneWithoutAFallingLoss) {
  OnePartition p("sum:compensation=lcasgd", {0, 0, 0}), plain("sum", {0, 0, 0});
  for (OnePartition* q : {&p, &plain}) {
    q->Push(1, 0, {0, 0, 0}, 1.0);
    q->Push(1, 1, {0, 0, 0}, 1.5);   // the loss rose
    q->Push(1, 1, {1, 0, 0}, 1.5);   // delay 1, slope > 0: plain
    q->Push(3, 0, {0, 1, 0});        // no loss: plain
    q->Push(4, 0, {0, 0, 1}, -1.0);  // not a loss: plain
  }
  EXPECT_EQ(p.values(), plain.values());
}

// A prediction below zero is floored at rho_min; only the last `history` reports are fitted.
TEST(CompensatorTest, LcasgdFloorsTheScaleAndFitsTheLastReportsOnly) {
  OnePartition p("sum:compensation=lcasgd,rho_min=0.25,history=3", {0, 0});
  p.Push(1, 0, {0, 0}, 1.0);
  p.Push(1, 1, {0, 0}, 5.0);
  p.Push(1, 2, {0, 0}, 4.0);
  ASSERT_EQ(p.state->version(), 3);
  for (int i = 0; i < 7; ++i) p.Push(2, 3 + i, {0, 0});
  // Fitted: (1, 5), (2, 4), (2, 4), slope -1 (with (0, 1) too it would rise); delay 8:
  // 4 - 8 < 0, floored at 0.25.
  p.Push(1, 2, {1, 0}, 4.0);
  EXPECT_FLOAT_EQ(p.values()[0], -0.25f);
}

// Its reports are part of the partition's state: restored from a checkpoint, a partition
// compensates as the one that kept running.
TEST(CompensatorTest, LcasgdKeepsItsReportsAcrossSaveAndLoad) {
  const char* spec = "sum:compensation=lcasgd";
  OnePartition a(spec, {0, 0});
  a.Push(1, 0, {0, 0}, 2.0);
  a.Push(1, 1, {0, 0}, 1.0);
  proto::AggregatorState saved;
  a.state->aggregator()->Save(saved);
  ASSERT_TRUE(saved.per_worker().contains("lcasgd_reports"));
  OnePartition restored(spec, a.values()), forgetful(spec, a.values());
  ASSERT_TRUE(restored.state->aggregator()->Load(saved).ok());
  for (OnePartition* p : {&a, &restored, &forgetful}) {
    for (int i = 0; i < 2; ++i) p->Push(2, 0, {0, 0});
  }
  for (OnePartition* p : {&a, &restored, &forgetful}) p->Push(1, 1, {1, 1}, 1.0);  // delay 3
  EXPECT_EQ(restored.values(), a.values());
  EXPECT_NE(forgetful.values(), a.values());
  proto::AggregatorState broken = saved;
  (*(*broken.mutable_per_worker())["lcasgd_reports"].mutable_floats())[1] = "abc";
  OnePartition b(spec, {0, 0});
  EXPECT_EQ(b.state->aggregator()->Load(broken).code(), proto::MALFORMED);
}

}  // namespace
}  // namespace hetps::testing
