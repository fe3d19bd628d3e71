#include "server/optimizer/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hetps {
namespace {

std::unique_ptr<Optimizer> Make(const std::string& spec) {
  auto opt = MakeOptimizer(spec);
  EXPECT_TRUE(opt.ok()) << opt.status().ToString();
  return std::move(*opt);
}

TEST(OptimizerTest, UnknownNameAndBadLrAreErrors) {
  auto bad = MakeOptimizer("rmsprop");
  EXPECT_EQ(bad.status().code(), proto::INVALID_ARGUMENT);
  EXPECT_NE(bad.status().message().find("sgd"), std::string::npos);  // lists the known ones
  EXPECT_FALSE(MakeOptimizer("sgd:lr=0").ok());
  EXPECT_FALSE(MakeOptimizer("adam:beta1=1").ok());  // the bias correction would divide by 0
  EXPECT_TRUE(MakeOptimizer("adam:beta1=0.99,beta2=0").ok());
}

TEST(OptimizerTest, SgdWithUnitLrSubtractsExactly) {
  auto sgd = Make("sgd:lr=1.0");
  std::vector<float> w = {1, 2, 3}, g = {0.5f, -1, 4};
  sgd->Apply(w.data(), g.data(), 3, nullptr, 1, 1.0f);
  EXPECT_EQ(w, (std::vector<float>{0.5f, 3, -1}));
  sgd->Apply(w.data(), g.data(), 3, nullptr, 2, 2.0f);  // scale multiplies the gradient
  EXPECT_EQ(w, (std::vector<float>{-0.5f, 5, -9}));
}

TEST(OptimizerTest, MomentumMatchesHandComputation) {
  auto m = Make("momentum:lr=0.1,momentum=0.9");
  ASSERT_EQ(m->num_slots(), 1);
  std::vector<float> w = {1.0f}, g = {2.0f}, v = {0.0f};
  float* slots[] = {v.data()};
  m->Apply(w.data(), g.data(), 1, slots, 1, 1.0f);  // v = 2, w = 1 - 0.2
  EXPECT_FLOAT_EQ(v[0], 2.0f);
  EXPECT_FLOAT_EQ(w[0], 0.8f);
  m->Apply(w.data(), g.data(), 1, slots, 2, 1.0f);  // v = 3.8, w = 0.8 - 0.38
  EXPECT_FLOAT_EQ(v[0], 3.8f);
  EXPECT_FLOAT_EQ(w[0], 0.42f);
}

TEST(OptimizerTest, AdamFirstStepMovesByLr) {
  auto adam = Make("adam:lr=0.01");
  ASSERT_EQ(adam->num_slots(), 2);
  std::vector<float> w = {1.0f, 1.0f}, g = {3.0f, -0.5f}, m(2), v(2);
  float* slots[] = {m.data(), v.data()};
  adam->Apply(w.data(), g.data(), 2, slots, 1, 1.0f);
  // Bias-corrected first step is lr * sign(g) (up to epsilon).
  EXPECT_NEAR(w[0], 0.99f, 1e-6);
  EXPECT_NEAR(w[1], 1.01f, 1e-6);
  // Second step by hand.
  adam->Apply(w.data(), g.data(), 2, slots, 2, 1.0f);
  const double m2 = 0.9 * 0.3 + 0.1 * 3, v2 = 0.999 * 0.009 + 0.001 * 9;
  const double mhat = m2 / (1 - 0.81), vhat = v2 / (1 - 0.999 * 0.999);
  EXPECT_NEAR(w[0], 0.99 - 0.01 * mhat / (std::sqrt(vhat) + 1e-8), 1e-6);
}

TEST(OptimizerTest, AdagradAccumulatesSquares) {
  auto a = Make("adagrad:lr=0.5,epsilon=0");
  std::vector<float> w = {0.0f}, g = {2.0f}, h = {0.0f};
  float* slots[] = {h.data()};
  a->Apply(w.data(), g.data(), 1, slots, 1, 1.0f);  // h = 4, w = -0.5 * 2 / 2
  EXPECT_FLOAT_EQ(w[0], -0.5f);
  a->Apply(w.data(), g.data(), 1, slots, 2, 1.0f);  // h = 8, w -= 0.5 * 2 / sqrt(8)
  EXPECT_NEAR(w[0], -0.5f - 1.0f / std::sqrt(8.0f), 1e-6);
}

TEST(OptimizerTest, WeightDecayAddsL2Term) {
  auto sgd = Make("sgd:lr=0.1,weight_decay=0.5");
  std::vector<float> w = {2.0f}, g = {0.0f};
  sgd->Apply(w.data(), g.data(), 1, nullptr, 1, 1.0f);  // w -= 0.1 * 0.5 * 2
  EXPECT_FLOAT_EQ(w[0], 1.9f);
}

}  // namespace
}  // namespace hetps
