// The delay-compensation hook (server/aggregation/compensator.h) and LC-ASGD (ALGORITHMS.md §6).
#include "server/aggregation/compensator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "durable.pb.h"
#include "server/aggregation/aggregator.h"
#include "server/vectorized.h"
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
  EXPECT_EQ(b.state->aggregator()->Load(broken).code(), StatusCode::kMalformed);
}

// DC-ASGD's loops run vectorized (server/vectorized.h). Over 1003 elements (lanes of 8 and 4 and
// a scalar remainder) and 3 pushes, each path gives, bit for bit, what the formulas give
// computed one element at a time: MS = d MS + (1 - d) g^2, then
// g + lambda0 / sqrt(MS + 1e-7) * g * g * (w - w_read) (DC-ASGD-a; lambda for DC-ASGD).
TEST(CompensatorTest, DcasgdsVectorizedLoopsMatchTheFormulasElementByElement) {
  constexpr int64_t n = 1003;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> grads(3, std::vector<float>(n));
  std::vector<float> values(n), read(n);
  for (auto& g : grads) {
    for (float& x : g) x = normal(rng);
  }
  for (int64_t i = 0; i < n; ++i) {
    values[i] = normal(rng);
    read[i] = values[i] + 0.1f * normal(rng);
  }
  for (bool adaptive : {false, true}) {
    const std::string text = adaptive ? "sum:compensation=dcasgd_a,lambda0=2,ms_decay=0.9"
                                      : "sum:compensation=dcasgd,lambda=0.04";
    auto spec = Aggregators().Parse(text);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    // The reference: one element at a time, in this file's scalar code.
    std::vector<std::vector<float>> want;
    std::vector<float> ms(n, 0.0f);
    for (const std::vector<float>& g : grads) {
      std::vector<float> out(n);
      for (int64_t i = 0; i < n; ++i) {
        ms[i] = 0.9f * ms[i] + (1 - 0.9f) * g[i] * g[i];
        const float lambda = adaptive ? 2.0f / std::sqrt(ms[i] + 1e-7f) : 0.04f;
        out[i] = g[i] + lambda * g[i] * g[i] * (values[i] - read[i]);
      }
      want.push_back(out);
    }
    for (bool baseline : {true, false}) {
      LimitSimdToBaseline(baseline);
      SCOPED_TRACE(text + " on " + SimdPathName(ActiveSimdPath()));
      std::unique_ptr<Compensator> c = MakeCompensator(*spec);
      ASSERT_NE(c, nullptr);
      for (size_t k = 0; k < grads.size(); ++k) {
        CompensationInput in;
        in.n = n;
        in.values = values.data();
        in.read = read.data();
        std::vector<float> scratch;
        const float* got = c->Compensate(in, grads[k].data(), scratch);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(got[i], want[k][i]) << "push " << k << ", element " << i;
        }
      }
    }
    LimitSimdToBaseline(false);
  }
}

}  // namespace
}  // namespace hetps::testing
