// Emulated Byzantine clients (worker/edge/attack.h): each attack on scripted updates and
// labels, exactly round(F x clients) attackers drawn from the seed, the same in every run.
#include "worker/edge/attack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace hetps {
namespace {

std::vector<std::vector<float>> Poisoned(const std::string& spec,
                                         std::vector<std::vector<float>> delta, uint64_t seed = 1) {
  auto attack = MakeAttack(spec);
  EXPECT_TRUE(attack.ok()) << attack.status().ToString();
  std::mt19937_64 rng(seed);
  (*attack)->PoisonUpdate(delta, rng);
  return delta;
}

TEST(AttackTest, SignFlipAndScaleMultiplyTheHonestDelta) {
  const std::vector<std::vector<float>> delta = {{1, -2}, {0.5f}};
  EXPECT_EQ(Poisoned("sign_flip", delta), (std::vector<std::vector<float>>{{-1, 2}, {-0.5f}}));
  EXPECT_EQ(Poisoned("sign_flip:factor=4", delta),
            (std::vector<std::vector<float>>{{-4, 8}, {-2}}));
  EXPECT_EQ(Poisoned("scale:factor=10", delta), (std::vector<std::vector<float>>{{10, -20}, {5}}));
}

TEST(AttackTest, GaussianReplacesTheDeltaWithSeededNoise) {
  const std::vector<std::vector<float>> delta = {std::vector<float>(20000, 3.0f)};
  const auto a = Poisoned("gaussian:std=2", delta, 5);
  double sum = 0, squares = 0;
  for (float v : a[0]) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const double mean = sum / 20000, sd = std::sqrt(squares / 20000 - mean * mean);
  EXPECT_NEAR(mean, 0, 0.05) << "nothing of the honest delta is left";
  EXPECT_NEAR(sd, 2, 0.05);
  EXPECT_EQ(Poisoned("gaussian:std=2", delta, 5), a);
  EXPECT_NE(Poisoned("gaussian:std=2", delta, 6), a);
}

TEST(AttackTest, LabelFlipMapsEachLabelToItsMirrorAndLeavesTheUpdate) {
  auto attack = MakeAttack("label_flip");
  ASSERT_TRUE(attack.ok());
  std::vector<int32_t> labels = {0, 3, 9, 5};
  (*attack)->PoisonLabels(10, labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{9, 6, 0, 4}));
  EXPECT_EQ(Poisoned("label_flip", {{1, 2}}), (std::vector<std::vector<float>>{{1, 2}}));
}

TEST(AttackTest, ExactlyTheRoundedShareOfClientsAttackDrawnFromTheSeed) {
  for (double fraction : {0.0, 0.1, 0.3, 1.0}) {
    std::set<int> attackers;
    for (int c = 0; c < 95; ++c) {
      if (IsByzantine(fraction, 7, c, 95)) attackers.insert(c);
      EXPECT_EQ(IsByzantine(fraction, 7, c, 95), IsByzantine(fraction, 7, c, 95));
    }
    EXPECT_EQ(attackers.size(), static_cast<size_t>(std::lround(fraction * 95))) << fraction;
  }
  int differ = 0;
  for (int c = 0; c < 100; ++c)
    differ += IsByzantine(0.3, 7, c, 100) != IsByzantine(0.3, 8, c, 100);
  EXPECT_GT(differ, 10) << "another seed, other attackers";
  EXPECT_FALSE(IsByzantine(1.0, 7, 100, 100)) << "not a training client";
}

TEST(AttackTest, BadFlagsAreRefusedWithTheReason) {
  EXPECT_FALSE(ValidateAttackFlags(1.5, "sign_flip").ok());
  EXPECT_FALSE(ValidateAttackFlags(-0.1, "sign_flip").ok());
  EXPECT_NE(ValidateAttackFlags(0.1, "backdoor").message().find("sign_flip"), std::string::npos)
      << "an unknown attack lists the known ones";
  EXPECT_FALSE(ValidateAttackFlags(0.1, "scale:factor=0").ok());
  EXPECT_TRUE(ValidateAttackFlags(0.3, "gaussian:std=5").ok());
}

}  // namespace
}  // namespace hetps
