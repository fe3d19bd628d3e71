// Differential privacy (common/privacy.h, common/rdp_accountant.h): the accountant against
// TensorFlow Privacy's published figures for DP-SGD on MNIST (tutorials/README.md: q = 256 /
// 60000 and delta = 1e-5 give epsilon 2.92 for noise 1.12 over 60 epochs, 9.74 for 0.6 over 30,
// 1.20 for 1.2 over 10), the Gaussian mechanism's closed form, composition, and clipping.
#include "common/privacy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/rdp_accountant.h"

namespace hetps {
namespace {

TEST(RdpAccountantTest, MatchesTensorFlowPrivacysPublishedEpsilons) {
  struct Published {
    double sigma;
    int epochs;
    double epsilon;
  };
  for (const Published& p :
       {Published{1.12, 60, 2.92}, Published{0.6, 30, 9.74}, Published{1.2, 10, 1.20}}) {
    RdpAccountant a;
    a.AddSampledGaussian(256.0 / 60000, p.sigma,
                         static_cast<int64_t>(std::ceil(p.epochs * 60000.0 / 256)));
    const double eps = a.Epsilon(1e-5).first;
    EXPECT_NEAR(eps, p.epsilon, 0.01 * p.epsilon) << "noise " << p.sigma;
  }
}

TEST(RdpAccountantTest, TheGaussianMechanismAndCompositionAddUp) {
  for (int order : {2, 7, 64}) {
    EXPECT_NEAR(SampledGaussianRdp(1.0, 2.0, order), order / 8.0, 1e-12);
    EXPECT_NEAR(SampledGaussianRdp(1.0 - 1e-12, 2.0, order), order / 8.0, 1e-6)
        << "q -> 1 is the Gaussian mechanism";
    EXPECT_LT(SampledGaussianRdp(0.1, 2.0, order), order / 8.0) << "sampling amplifies";
  }
  RdpAccountant once, split;
  once.AddSampledGaussian(0.05, 1.0, 100);
  for (int i = 0; i < 100; ++i) split.AddSampledGaussian(0.05, 1.0);
  EXPECT_NEAR(once.Epsilon(1e-5).first, split.Epsilon(1e-5).first, 1e-9);
  EXPECT_EQ(RdpAccountant().Epsilon(1e-5).first, 0) << "nothing spent yet";
  RdpAccountant more = once;
  more.AddSampledGaussian(0.05, 1.0, 100);
  EXPECT_GT(more.Epsilon(1e-5).first, once.Epsilon(1e-5).first);
  RdpAccountant restored;
  restored.Restore(once.rdp(), once.steps());
  EXPECT_EQ(restored.Epsilon(1e-5), once.Epsilon(1e-5));
}

TEST(PrivacyTest, SpecsParseAndBadOnesNameTheProblem) {
  auto central = ParsePrivacy("central:clip=0.5,noise=1.2");
  ASSERT_TRUE(central.ok()) << central.status().ToString();
  EXPECT_EQ(central->mode, Privacy::Mode::kCentral);
  EXPECT_EQ(central->clip, 0.5);
  EXPECT_EQ(central->noise, 1.2);
  EXPECT_EQ(central->delta, 1e-5);
  EXPECT_EQ(central->ToString(), "central:clip=0.5,delta=1e-05,noise=1.2");
  EXPECT_FALSE(ParsePrivacy("none")->on());
  EXPECT_EQ(ParsePrivacy("distributed:noise=2")->mode, Privacy::Mode::kDistributed);
  EXPECT_EQ(ParsePrivacy("distributed:noise=2")->ToString(),
            "distributed:clip=1,delta=1e-05,noise=2");
  EXPECT_FALSE(ParsePrivacy("central:clip=0").ok());
  EXPECT_FALSE(ParsePrivacy("local:delta=1").ok()) << "delta below 1";
  EXPECT_NE(ParsePrivacy("global").status().message().find("central"), std::string::npos);
}

TEST(PrivacyTest, ClippingBoundsTheWholeUpdateAndNoiseHasItsSize) {
  std::vector<std::vector<float>> u = {{3, 0}, {4}};  // norm 5 across tensors
  EXPECT_DOUBLE_EQ(ClipUpdate(u, 10), 5);
  EXPECT_EQ(u, (std::vector<std::vector<float>>{{3, 0}, {4}})) << "under the bound: unchanged";
  EXPECT_DOUBLE_EQ(ClipUpdate(u, 1), 5);
  EXPECT_FLOAT_EQ(u[0][0], 0.6f);
  EXPECT_FLOAT_EQ(u[1][0], 0.8f);
  std::vector<std::vector<float>> zero = {std::vector<float>(20000, 0.0f)};
  std::mt19937_64 rng(3);
  AddGaussianNoise(zero, 0.5, rng);
  double squares = 0;
  for (float v : zero[0]) squares += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(squares / 20000), 0.5, 0.01);
}

}  // namespace
}  // namespace hetps
