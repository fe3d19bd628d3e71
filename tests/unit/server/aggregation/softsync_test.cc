// n-softsync's aggregation side (ALGORITHMS.md §3): the sum aggregator with a window.
#include <gtest/gtest.h>

#include "server/consistency/controller.h"
#include "tests/unit/server/aggregation/fixture.h"

namespace hetps::testing {
namespace {

void PushWindowed(OnePartition& p, int32_t worker, int64_t base, int64_t window, float g) {
  PushInfo info;
  info.worker = worker;
  info.base_version = base;
  info.window = window;
  std::vector<float> grad = {g};
  p.state->aggregator()->OnPush(*p.state, info, grad.data());
}

TEST(SoftsyncTest, WindowIsFloorOfLearnersOverN) {
  std::vector<int32_t> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  for (auto [n, c] : std::vector<std::pair<int, int>>{{1, 8}, {2, 4}, {3, 2}, {8, 1}, {20, 1}}) {
    const std::string spec = "softsync:n=" + std::to_string(n);
    EXPECT_EQ((*MakeController(spec, eight))->window(), c) << spec;
  }
}

TEST(SoftsyncTest, VersionAdvancesExactlyOncePerWindow) {
  OnePartition p("sum", {0});
  for (int i = 1; i <= 13; ++i) {
    PushWindowed(p, i % 3, p.state->version(), 4, 1.0f);
    EXPECT_EQ(p.state->version(), i / 4) << "after " << i << " pushes";
  }
}

TEST(SoftsyncTest, AStalerGradientCountsLess) {
  OnePartition p("sum", {0});
  for (int i = 0; i < 4; ++i) PushWindowed(p, 0, i, 1, 0.0f);  // version 4
  PushWindowed(p, 1, 0, 2, 8.0f);                              // sigma 4: contributes 8/4
  PushWindowed(p, 2, 3, 2, 8.0f);                              // sigma 1: contributes 8
  // One step on the window's mean: -(2 + 8) / 2.
  EXPECT_FLOAT_EQ(p.values()[0], -5.0f);
}

TEST(SoftsyncTest, UniformSpeedsGiveMeanStalenessNearN) {
  const int learners = 8;
  for (int n : {1, 2, 4, 8}) {
    OnePartition p("sum", {0}, /*lr=*/1e-3);
    const int64_t window = std::max(1, learners / n);
    std::vector<int64_t> base(learners, 0);
    double sigma_sum = 0;
    int pushes = 0;
    for (int step = 0; step < 4000; ++step) {  // round-robin: every learner equally fast
      const int w = step % learners;
      if (step >= learners) {
        sigma_sum += static_cast<double>(p.state->version() - base[w]);
        ++pushes;
      }
      PushWindowed(p, w, base[w], window, 0.01f);
      base[w] = p.state->version();  // it pulls right after pushing
    }
    const double mean = sigma_sum / pushes;
    EXPECT_NEAR(mean, n, 0.2 * n) << "n=" << n;
  }
}

}  // namespace
}  // namespace hetps::testing
