#include "server/optimizer/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace hetps {
namespace {

std::unique_ptr<Optimizer> Make(const std::string& spec) {
  auto opt = MakeOptimizer(spec);
  EXPECT_TRUE(opt.ok()) << opt.status().ToString();
  return std::move(*opt);
}

TEST(OptimizerTest, UnknownNameAndBadLrAreErrors) {
  auto bad = MakeOptimizer("rmsprop");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
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

// One partition's values, gradient and slots, filled from `seed`.
struct Partition {
  Partition(int64_t n, int num_slots, uint64_t seed)
      : w(n), g(n), slots(num_slots, std::vector<float>(n)) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d;
    for (float& x : w) x = d(rng);
    for (float& x : g) x = d(rng);
    for (auto& s : slots) {
      for (float& x : s) x = std::abs(d(rng));  // second moments are never negative
    }
  }
  // Applies `opt` to coordinates [begin, begin + count) alone, as update `step`.
  void Apply(const Optimizer& opt, int64_t begin, int64_t count, int64_t step) {
    std::vector<float*> ptrs;
    for (auto& s : slots) ptrs.push_back(s.data() + begin);
    opt.Apply(w.data() + begin, g.data() + begin, count, ptrs.data(), step, 0.5f);
  }
  bool SameBits(const Partition& o) const {
    bool same = std::memcmp(w.data(), o.w.data(), w.size() * sizeof(float)) == 0;
    for (size_t s = 0; s < slots.size(); ++s) {
      same = same &&
             std::memcmp(slots[s].data(), o.slots[s].data(), slots[s].size() * sizeof(float)) == 0;
    }
    return same;
  }
  std::vector<float> w, g;
  std::vector<std::vector<float>> slots;
};

// Every rule, with and without weight decay.
std::vector<std::string> EveryRule() {
  std::vector<std::string> specs;
  for (const std::string& name : Optimizers().Names()) {
    specs.push_back(name);
    specs.push_back(name + ":weight_decay=0.01");
  }
  return specs;
}

// The loops are compiled for more than one instruction set (optimizer.h): the vector lanes and
// the scalar remainder must compute each coordinate exactly as the coordinate alone would.
TEST(OptimizerTest, EveryCoordinateIsUpdatedAsIfAlone) {
  constexpr int64_t kN = 1003;  // lanes of 8 and of 4, and a remainder
  for (const std::string& spec : EveryRule()) {
    SCOPED_TRACE(spec + " on " + SimdPathName(ActiveSimdPath()));
    auto opt = Make(spec);
    Partition whole(kN, opt->num_slots(), 1), alone(kN, opt->num_slots(), 1);
    for (int64_t step = 1; step <= 3; ++step) {
      whole.Apply(*opt, 0, kN, step);
      for (int64_t i = 0; i < kN; ++i) alone.Apply(*opt, i, 1, step);
    }
    EXPECT_TRUE(whole.SameBits(alone));
  }
}

TEST(OptimizerTest, AvxAndBaselineCopiesGiveTheSameBits) {
  if (ActiveSimdPath() != SimdPath::kAvx2) {
    GTEST_SKIP() << "this CPU has no AVX2: the loops run only their baseline copy";
  }
  constexpr int64_t kN = 4099;
  for (const std::string& spec : EveryRule()) {
    SCOPED_TRACE(spec);
    auto opt = Make(spec);
    Partition avx(kN, opt->num_slots(), 2), baseline(kN, opt->num_slots(), 2);
    for (int64_t step = 1; step <= 3; ++step) {
      avx.Apply(*opt, 0, kN, step);
      LimitSimdToBaseline(true);
      EXPECT_EQ(ActiveSimdPath(), SimdPath::kBaseline);
      baseline.Apply(*opt, 0, kN, step);
      LimitSimdToBaseline(false);
    }
    EXPECT_TRUE(avx.SameBits(baseline));
  }
}

}  // namespace
}  // namespace hetps
