#include <gtest/gtest.h>

#include <cmath>

#include "durable.pb.h"
#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

TEST(SumTest, PlainSumAppliesEveryGradientThroughTheOptimizer) {
  OnePartition p("sum", {1, 1});
  p.Push(0, 0, {0.5f, 1});
  p.Push(1, 0, {0.5f, 1});
  EXPECT_EQ(p.values(), (std::vector<float>{0, -1}));
  EXPECT_EQ(p.state->version(), 2);
}

TEST(SumTest, InverseStalenessScalesByOneOverSigma) {
  OnePartition p("sum:staleness_lr=inverse", {0, 0, 0});
  for (int i = 0; i < 5; ++i) p.Push(0, i, {0, 0, 0});  // version 5, all fresh
  ASSERT_EQ(p.state->version(), 5);
  p.Push(1, 1, {4, 0, 0});  // sigma = 4 (5 - 1): contributes 1
  EXPECT_FLOAT_EQ(p.values()[0], -1.0f);
  p.Push(1, 5, {0, 4, 0});  // sigma = 1: contributes 4
  EXPECT_FLOAT_EQ(p.values()[1], -4.0f);
  p.Push(1, 7, {0, 0, 4});  // sigma = 0: alpha0, contributes 4
  EXPECT_FLOAT_EQ(p.values()[2], -4.0f);
}

TEST(SumTest, DcasgdIsPlainSgdWhenNothingChangedSinceTheRead) {
  OnePartition dc("sum:compensation=dcasgd,lambda=0.5", {1, 2}), plain("sum", {1, 2});
  dc.Pull(0);  // w_bak = w
  dc.Push(0, 0, {0.3f, -0.7f});
  plain.Push(0, 0, {0.3f, -0.7f});
  EXPECT_EQ(dc.values(), plain.values());
}

TEST(SumTest, DcasgdCompensatesElementWise) {
  OnePartition p("sum:compensation=dcasgd,lambda=0.5", {1, 2}, /*lr=*/0.1);
  p.Pull(7);                // worker 7 reads w0 = {1, 2}
  p.Push(8, 0, {10, -10});  // someone else moves w to {0, 3}
  const std::vector<float> w1 = p.values();
  ASSERT_FLOAT_EQ(w1[0], 0.0f);
  const std::vector<float> g = {2, -1};
  p.Push(7, 0, g);  // g' = g + lambda * g*g * (w1 - w0)
  const float g0 = 2 + 0.5f * 4 * (0 - 1), g1 = -1 + 0.5f * 1 * (3 - 2);
  EXPECT_FLOAT_EQ(p.values()[0], w1[0] - 0.1f * g0);
  EXPECT_FLOAT_EQ(p.values()[1], w1[1] - 0.1f * g1);
  // A zero gradient changes nothing.
  const std::vector<float> before = p.values();
  p.Push(7, 0, {0, 0});
  EXPECT_EQ(p.values(), before);
}

// DC-ASGD-a (ALGORITHMS.md §6): lambda = lambda0 / sqrt(MS + eps) per element, MS = m * MS +
// (1 - m) * g*g updated by every push before it is compensated.
TEST(SumTest, DcasgdAdaptiveCompensatesWithTheMeanSquare) {
  const char* spec = "sum:compensation=dcasgd_a,lambda0=2,ms_decay=0.5";
  OnePartition p(spec, {1, 2}, /*lr=*/0.1);
  p.Pull(7);                // worker 7 reads w0 = {1, 2}
  p.Push(8, 0, {10, -10});  // MS = 0.5 * {100, 100}; w1 = {0, 3}
  const std::vector<float> w1 = p.values();
  const std::vector<float> g = {2, -1};
  p.Push(7, 0, g);  // MS = 0.5 * MS + 0.5 * g*g = {25 + 2, 25 + 0.5}
  const float ms0 = 0.5f * 50 + 0.5f * 4, ms1 = 0.5f * 50 + 0.5f * 1;
  const float l0 = 2 / std::sqrt(ms0 + 1e-7f), l1 = 2 / std::sqrt(ms1 + 1e-7f);
  const float g0 = 2 + l0 * 4 * (0 - 1), g1 = -1 + l1 * 1 * (3 - 2);
  EXPECT_FLOAT_EQ(p.values()[0], w1[0] - 0.1f * g0);
  EXPECT_FLOAT_EQ(p.values()[1], w1[1] - 0.1f * g1);
  // A zero gradient changes nothing (it only decays the mean square).
  const std::vector<float> before = p.values();
  p.Push(7, 0, {0, 0});
  EXPECT_EQ(p.values(), before);
}

TEST(SumTest, DcasgdAdaptiveIsPlainSgdWhenNothingChangedSinceTheRead) {
  OnePartition dc("sum:compensation=dcasgd_a", {1, 2}), plain("sum", {1, 2});
  dc.Pull(0);
  dc.Push(0, 0, {0.3f, -0.7f});
  plain.Push(0, 0, {0.3f, -0.7f});
  EXPECT_EQ(dc.values(), plain.values());
}

// The mean square is part of the partition's state: a partition restored from a checkpoint
// compensates as the one that kept running.
TEST(SumTest, DcasgdAdaptiveKeepsItsMeanSquareAcrossSaveAndLoad) {
  const char* spec = "sum:compensation=dcasgd_a,ms_decay=0.5";
  OnePartition a(spec, {1, 2});
  a.Pull(3);
  a.Push(4, 0, {1, 3});
  proto::AggregatorState saved;
  a.state->aggregator()->Save(saved);
  ASSERT_TRUE(saved.floats().contains("mean_square"));
  proto::AggregatorState without_ms = saved;
  without_ms.mutable_floats()->erase("mean_square");
  // Restored partitions at a's values: one with everything a saved, one without the mean square.
  OnePartition restored(spec, a.values()), forgetful(spec, a.values());
  ASSERT_TRUE(restored.state->aggregator()->Load(saved).ok());
  ASSERT_TRUE(forgetful.state->aggregator()->Load(without_ms).ok());
  for (OnePartition* p : {&a, &restored, &forgetful}) p->Push(3, 0, {0.5f, -2});
  EXPECT_EQ(restored.values(), a.values());
  EXPECT_NE(forgetful.values(), a.values());
}

TEST(SumTest, BadOptionsAreRefused) {
  EXPECT_EQ(Aggregators().Parse("mode").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(Aggregators().Parse("sum:staleness_lr=sqrt").ok());
  EXPECT_FALSE(Aggregators().Parse("sum:compensation=dcasgd_b").ok());
  EXPECT_FALSE(Aggregators().Parse("sum:compensation=dcasgd_a,ms_decay=1").ok());
  EXPECT_FALSE(Aggregators().Parse("fedasync:alpha=0").ok());
  // A compensator's parameter without that compensator would do nothing: refused.
  for (const char* idle :
       {"sum:lambda=5", "sum:compensation=dcasgd_a,lambda=5", "sum:compensation=dcasgd,history=4",
        "fedasync:staleness=constant,exponent=1", "fedasync:staleness=polynomial,a=2"}) {
    auto s = Aggregators().Parse(idle);
    EXPECT_FALSE(s.ok()) << idle << " was accepted";
    EXPECT_NE(s.status().message().find("would do nothing"), std::string::npos) << idle;
  }
  EXPECT_TRUE(Aggregators().Parse("sum:compensation=dcasgd,lambda=5").ok());
  EXPECT_TRUE(Aggregators().Parse("fedasync:staleness=hinge,a=2,b=1").ok());
  EXPECT_EQ(Aggregators().Parse("sum")->Full(), "sum:compensation=none,staleness_lr=none");
  EXPECT_FALSE(Aggregators().Parse("fedbuff:k=0").ok());
  EXPECT_TRUE(Aggregators().Parse("fedbuff").ok());
}

}  // namespace
}  // namespace hetps::testing
