// The federated run's privacy accountant (scheduler/fed_privacy.h): central DP composes one
// sampled Gaussian mechanism per round at the round's selection rate; local DP reports the
// client aggregated most often; the state survives a restart.
#include "scheduler/fed_privacy.h"

#include <gtest/gtest.h>

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
}

}  // namespace
}  // namespace hetps
