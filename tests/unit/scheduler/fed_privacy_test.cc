// The federated run's privacy accountant (scheduler/fed_privacy.h): central DP composes one
// sampled Gaussian mechanism per round at the round's selection rate; local DP reports the
// client aggregated most often; the state survives a restart.
#include "scheduler/fed_privacy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "scheduler/fed_rounds.h"
#include "scheduler/scheduler.h"

namespace hetps {
namespace {

Privacy Spec(const std::string& text) {
  auto p = ParsePrivacy(text);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

// Distributed DP's sum carries the central noise: accounted the same way.
TEST(FedPrivacyTest, CentralRoundsAreSampledGaussiansAtTheSelectionRate) {
  for (const char* spec :
       {"central:clip=1,noise=1.2,delta=1e-6", "distributed:clip=1,noise=1.2,delta=1e-6"}) {
    FedPrivacy p(Spec(spec));
    EXPECT_EQ(p.epsilon(), 0.0);
    RdpAccountant expected;
    for (int round = 0; round < 30; ++round) {
      p.Applied({1, 2, 3, 4, 5}, 7, 20 + round % 3);
      expected.AddSampledGaussian(7.0 / (20 + round % 3), 1.2);
    }
    EXPECT_NEAR(*p.epsilon(), expected.Epsilon(1e-6).first, 1e-12) << spec;
  }
  FedPrivacy none(Spec("none"));
  none.Applied({1}, 1, 1);
  EXPECT_FALSE(none.epsilon().has_value());
}

TEST(FedPrivacyTest, LocalReportsTheClientAggregatedMostOften) {
  FedPrivacy p(Spec("local:clip=1,noise=2"));
  p.Applied({1, 2}, 2, 10);
  p.Applied({2, 3}, 2, 10);
  p.Applied({2}, 1, 10);  // client 2: three uploads
  RdpAccountant three;
  three.AddSampledGaussian(1.0, 2.0, 3);
  EXPECT_NEAR(*p.epsilon(), three.Epsilon(1e-5).first, 1e-12);
}

TEST(FedPrivacyTest, ARestoredAccountantGoesOnWhereItStopped) {
  for (const char* spec : {"central:noise=0.8", "local:noise=0.8"}) {
    FedPrivacy p(Spec(spec)), restored(Spec(spec));
    for (int i = 0; i < 5; ++i) p.Applied({i % 3}, 4, 40);
    proto::FedPrivacyState s;
    p.Save(s);
    restored.Restore(s);
    EXPECT_EQ(restored.epsilon(), p.epsilon()) << spec;
    p.Applied({0}, 4, 40);
    restored.Applied({0}, 4, 40);
    EXPECT_EQ(restored.epsilon(), p.epsilon()) << spec;
  }
}

// Adaptive clipping: the clip each round's task and close carry steps with the kept clients'
// bits, survives a restart, and costs the accountant what the fixed clip does (the count's
// noise is paid for by the updates': their multiplier rises above noise).
TEST(FedPrivacyTest, AdaptiveClippingStepsTheClipAndNoisesItsRound) {
  const Privacy spec = Spec("central:clip=2,noise=1,quantile=0.5,count_noise=2");
  EXPECT_TRUE(spec.adaptive());
  EXPECT_EQ(spec.ToString(),
            "central:clip=2,clip_lr=0.2,count_noise=2,delta=1e-05,noise=1,quantile=0.5");
  FedPrivacy p(spec, 10, 3), fixed(Spec("central:clip=2,noise=1"));
  ASSERT_TRUE(p.adaptive());
  EXPECT_FALSE(fixed.adaptive());
  EXPECT_EQ(p.clip(), 2);
  EXPECT_NEAR(p.noise_std(), 2 / std::sqrt(1 - 1.0 / 16), 1e-12);
  EXPECT_EQ(fixed.noise_std(), 2);
  p.RoundClosed(0, 0, 10);  // every update above the clip: it grows
  EXPECT_GT(p.clip(), 2);
  const double grown = p.clip();
  p.RoundClosed(1, 10, 10);  // every one within: it shrinks
  EXPECT_LT(p.clip(), grown);
  for (int i = 0; i < 4; ++i) {
    p.Applied({1, 2}, 10, 40);
    fixed.Applied({1, 2}, 10, 40);
  }
  EXPECT_EQ(p.epsilon(), fixed.epsilon());
  proto::FedPrivacyState s;
  p.Save(s);
  FedPrivacy restored(spec, 10, 3);
  restored.Restore(s);
  EXPECT_EQ(restored.clip(), p.clip());
  EXPECT_EQ(restored.epsilon(), p.epsilon());
  EXPECT_FALSE(Spec("local:clip=1,noise=1").adaptive());
}

// Under local and distributed DP the clients noise their bits: the round's task tells them the
// update's multiplier z_u and the bit's sigma_b (each client's under local DP: Z by default; the
// sum's under distributed DP: max(K/20, Z), as central), and the clip steps on the count they
// noised, without noise of its own: the same count steps it the same way every time.
TEST(FedPrivacyTest, LocalAndDistributedAdaptiveClippingStepOnTheClientsNoisedCount) {
  FedPrivacy local(Spec("local:clip=2,noise=1.5,quantile=0.5"), 40, 3);
  ASSERT_TRUE(local.adaptive());
  EXPECT_DOUBLE_EQ(local.count_noise(), 1.5);
  EXPECT_NEAR(local.update_noise(), 1 / std::sqrt(1 / 2.25 - 1 / 9.0), 1e-12);
  FedPrivacy distributed(Spec("distributed:clip=2,noise=1,quantile=0.5"), 40, 3);
  EXPECT_DOUBLE_EQ(distributed.count_noise(), 2);  // 40 / 20
  FedPrivacy again(Spec("distributed:clip=2,noise=1,quantile=0.5"), 40, 3);
  distributed.RoundClosedNoisy(0, 10.0, 40);  // a quarter within: the clip grows by e^0.05
  again.RoundClosedNoisy(0, 10.0, 40);
  EXPECT_NEAR(distributed.clip(), 2 * std::exp(0.05), 1e-12);
  EXPECT_EQ(distributed.clip(), again.clip());
  distributed.RoundClosedNoisy(1, std::nan(""), 40);  // nothing readable: the clip stays
  EXPECT_EQ(distributed.clip(), again.clip());
  EXPECT_FALSE(
      ValidateFedRoundsOptions({.concurrency = 4, .dp = "local:clip=1,noise=1,quantile=0.5"}).ok())
      << "the clip steps at rounds' closes";
}

}  // namespace
}  // namespace hetps

namespace hetps {
namespace {

// A layer held back would go up later with several rounds' deltas summed, past the clip bound:
// a scheduler under --dp refuses any layer schedule but every.
TEST(FedPrivacyTest, ASchedulerUnderDpRefusesALayerSchedule) {
  SchedulerOptions o;
  o.fed.dp = "central:clip=1,noise=1";
  EXPECT_TRUE(ValidateSchedulerOptions(o).ok()) << ValidateSchedulerOptions(o).ToString();
  o.layer_schedule = "fixed:shallow=1,deep=3";
  EXPECT_NE(ValidateSchedulerOptions(o).message().find("clip bound"), std::string::npos);
  o.fed.dp = "none";
  EXPECT_TRUE(ValidateSchedulerOptions(o).ok());
  o.fed.dp = "central:clip=1";
  o.fed.concurrency = 4;
  o.layer_schedule = "every";
  EXPECT_NE(ValidateSchedulerOptions(o).message().find("synchronous rounds"), std::string::npos);
  o.fed.concurrency = 0;
  o.fed.dp = "central:clip=1,noise=2,quantile=0.5,count_noise=0.9";  // 2 x 0.9 <= 2
  EXPECT_NE(ValidateSchedulerOptions(o).message().find("no privacy budget"), std::string::npos);
  o.fed.dp = "central:clip=1,noise=1,quantile=0.5";
  o.fed.late_rounds = 1;
  EXPECT_NE(ValidateSchedulerOptions(o).message().find("late_rounds"), std::string::npos);
}

}  // namespace
}  // namespace hetps
