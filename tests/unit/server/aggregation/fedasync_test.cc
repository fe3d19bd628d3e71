#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

TEST(FedAsyncTest, StalenessFunctionsStartAtOneAndNeverIncrease) {
  for (double a : {0.0, 0.5, 1.0}) {
    EXPECT_DOUBLE_EQ(PolynomialStaleness(0, a), 1.0);
    for (int s = 0; s < 50; ++s) {
      EXPECT_LE(PolynomialStaleness(s + 1, a), PolynomialStaleness(s, a));
      EXPECT_GT(PolynomialStaleness(s, a), 0.0);
    }
  }
  EXPECT_DOUBLE_EQ(HingeStaleness(0, 4, 2), 1.0);
  EXPECT_DOUBLE_EQ(HingeStaleness(2, 4, 2), 1.0);
  EXPECT_DOUBLE_EQ(HingeStaleness(3, 4, 2), 1.0 / 5);
  for (int s = 0; s < 50; ++s) EXPECT_LE(HingeStaleness(s + 1, 10, 4), HingeStaleness(s, 10, 4));
}

TEST(FedAsyncTest, EveryCoordinateLandsBetweenOldAndNew) {
  for (const char* fn : {"constant", "polynomial", "hinge"}) {
    const std::string o = "fedasync:alpha=0.9,staleness=" + std::string(fn);
    std::mt19937 rng(3);
    std::normal_distribution<float> d;
    std::vector<float> init(64);
    for (float& x : init) x = d(rng);
    OnePartition p(o, init);
    std::map<int, std::vector<float>> last_read;  // what each worker's base is
    for (int step = 0; step < 30; ++step) {
      const int worker = step % 3;
      if (step % 4 == 0) {
        p.Pull(worker);
        last_read[worker] = p.values();
      }
      std::vector<float> delta(64);
      for (float& x : delta) x = d(rng);
      const std::vector<float> before = p.values();
      const std::vector<float>& base = last_read.count(worker) ? last_read[worker] : before;
      p.Push(worker, std::max<int64_t>(0, p.state->version() - step % 5), delta);
      const std::vector<float> after = p.values();
      EXPECT_EQ(p.state->version(), step + 1);
      int moved = 0;
      for (int i = 0; i < 64; ++i) {
        const float x_new = base[i] - delta[i];
        const float lo = std::min(before[i], x_new), hi = std::max(before[i], x_new);
        const float eps = 1e-5f * (1 + std::abs(lo) + std::abs(hi));
        ASSERT_GE(after[i], lo - eps) << fn << " step " << step << " [" << i << "]";
        ASSERT_LE(after[i], hi + eps) << fn << " step " << step << " [" << i << "]";
        moved += after[i] != before[i];
      }
      EXPECT_GT(moved, 0) << "alpha_t > 0: the model must move";
    }
  }
}

TEST(FedAsyncTest, MixesTowardsTheClientModelByAlphaTimesStalenessWeight) {
  OnePartition p("fedasync:alpha=0.5,staleness=polynomial,exponent=1.0", {10, -10});
  p.Pull(0);              // client 0 reads x_tau = {10, -10}
  p.Push(0, 0, {2, -2});  // sigma 0: x_new = {8, -8}, alpha_t = 0.5
  EXPECT_EQ(p.values(), (std::vector<float>{9, -9}));
  for (float v : p.values()) EXPECT_TRUE(v <= 10 && v >= -10);
  // Client 1 never read: its base is the current model; sigma 1 halves alpha.
  p.Push(1, 0, {4, 4});  // x_new = {5, -13}, alpha_t = 0.5 / 2
  EXPECT_FLOAT_EQ(p.values()[0], 0.75f * 9 + 0.25f * 5);
  EXPECT_FLOAT_EQ(p.values()[1], 0.75f * -9 + 0.25f * -13);
}

}  // namespace
}  // namespace hetps::testing
