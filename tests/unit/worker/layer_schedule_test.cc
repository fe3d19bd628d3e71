#include "worker/layer_schedule.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "hetps/layer_accumulator.h"

namespace hetps {
namespace {

TEST(LayerScheduleTest, PublishedScheduleSendsDeepLayersOnAThirdOfRounds) {
  LayerSchedule s(/*deep_from=*/2);
  std::set<int64_t> deep;
  for (int64_t t = 0; t < 15; ++t) {
    EXPECT_TRUE(s.Uploads(0, t));
    EXPECT_TRUE(s.Uploads(1, t));
    if (s.Uploads(2, t)) deep.insert(t);
    EXPECT_EQ(s.Uploads(2, t), s.Uploads(7, t));
  }
  EXPECT_EQ(deep, (std::set<int64_t>{0, 11, 12, 13, 14}));
  EXPECT_TRUE(s.Uploads(2, 30));
  EXPECT_FALSE(s.Uploads(2, 31));
}

// The scheduler's layer-wise schedule on a worker: a layer pushed every K steps delivers the
// exact sum of its K gradients (small integers: every float sum is exact), nothing is dropped.
std::vector<float> Gradient(int step, int tensor, int n) {
  std::vector<float> g(n);
  for (int j = 0; j < n; ++j) g[j] = static_cast<float>((step + 1) * (j + tensor + 1));
  return g;
}

TEST(LayerAccumulatorTest, ALayerPushedEveryKStepsDeliversTheSumOfItsKGradients) {
  // Tensors 0 and 1 are layer 0 (every step), tensor 2 is layer 3 (every 3 steps).
  LayerAccumulator acc({{0, 4}, {0, 2}, {3, 5}});
  LayerPeriods schedule{.spec = "fixed", .periods = {1, 1, 1, 3}};
  std::vector<float> delivered(5, 0.0f), want(5, 0.0f);
  std::vector<int> pushed_at;
  for (int step = 0; step < 7; ++step) {
    acc.BeginStep(schedule);
    for (int t = 0; t < 2; ++t) {
      std::vector<float> g = Gradient(step, t, t == 0 ? 4 : 2);
      const std::vector<float> original = g;
      ASSERT_TRUE(acc.Offer(t, g.data()));
      EXPECT_EQ(g, original) << "a layer due every step is pushed as computed";
    }
    std::vector<float> g = Gradient(step, 2, 5);
    for (int j = 0; j < 5; ++j) want[j] += g[j];
    EXPECT_EQ(acc.Steps(2), step % 3 + 1);
    if (acc.Offer(2, g.data())) {
      pushed_at.push_back(step);
      EXPECT_EQ(g, want) << "the push carries every gradient since the last one";
      for (int j = 0; j < 5; ++j) delivered[j] += g[j];
      want.assign(5, 0.0f);
    }
  }
  EXPECT_EQ(pushed_at, (std::vector<int>{2, 5}));
  // Step 6's gradient waits for the next push: 5 steps deferred, 20 bytes each.
  EXPECT_EQ(acc.deferred_bytes(3), 5 * 20);
  EXPECT_EQ(acc.deferred_bytes(0), 0);
  EXPECT_EQ(acc.deferred_bytes(), 100);
  // The schedule drops to every step: the accumulated step goes with the next one.
  acc.BeginStep(LayerPeriods{});
  std::vector<float> g = Gradient(7, 2, 5);
  ASSERT_TRUE(acc.Offer(2, g.data()));
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(g[j], Gradient(6, 2, 5)[j] + Gradient(7, 2, 5)[j]);
    delivered[j] += g[j];
  }
  for (int j = 0; j < 5; ++j) {
    float all = 0;
    for (int step = 0; step < 8; ++step) all += Gradient(step, 2, 5)[j];
    EXPECT_EQ(delivered[j], all) << "nothing dropped, nothing doubled";
  }
}

TEST(LayerAccumulatorTest, MeanCombinesByTheStepsCarried) {
  LayerAccumulator acc({{1, 3}});
  LayerPeriods schedule{.periods = {1, 4}, .mean = true};
  std::vector<float> g;
  for (int step = 0; step < 4; ++step) {
    acc.BeginStep(schedule);
    g = {1.0f * (step + 1), 2.0f, -4.0f};
    EXPECT_EQ(acc.Offer(0, g.data()), step == 3);
  }
  EXPECT_EQ(g, (std::vector<float>{2.5f, 2.0f, -4.0f}));  // (1+2+3+4)/4, 8/4, -16/4
}

TEST(LayerAccumulatorTest, ALongerPeriodWaitsFromTheLastPushAndSkipCountsDeviceSteps) {
  LayerAccumulator acc({{0, 2}});
  std::vector<float> g = {1, 1};
  acc.BeginStep(LayerPeriods{.periods = {2}});
  EXPECT_FALSE(acc.Due(0));
  acc.Skip(0);  // accumulated elsewhere (a device): counted as deferred
  EXPECT_EQ(acc.deferred_bytes(), 8);
  acc.BeginStep(LayerPeriods{.periods = {5}});  // lengthened: 2 of 5 steps counted
  EXPECT_FALSE(acc.Due(0));
  EXPECT_EQ(acc.Steps(0), 2);
  acc.BeginStep(LayerPeriods{.periods = {2}});  // shortened below the steps counted: due now
  EXPECT_TRUE(acc.Due(0));
  acc.Skip(0);
  EXPECT_EQ(acc.deferred_bytes(), 8) << "a due step is pushed, not deferred";
  acc.BeginStep(LayerPeriods{.periods = {2}});
  EXPECT_EQ(acc.Steps(0), 1) << "counting starts again after a push";
  const LayerPeriods odd{.periods = {0, -3}};
  EXPECT_EQ(odd.Period(1), 1) << "a period below 1 is 1";
}

}  // namespace
}  // namespace hetps
