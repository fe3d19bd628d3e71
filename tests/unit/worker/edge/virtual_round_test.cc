// An edge client's round in virtual time (worker/edge/virtual_round.h): training from the
// model's FLOPs and the device, transfers from the link model.
#include "worker/edge/virtual_round.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

TEST(VirtualRoundTest, TrainingFlopsCountEveryLayer) {
  auto mlp = BuildArchitecture("mlp", {1, 28, 28}, 10, {64});
  ASSERT_TRUE(mlp.ok());
  // Forward: 784x64 and 64x10 multiply-adds, the ReLU's 64; training is three times that.
  const double forward = 2.0 * 784 * 64 + 64 + 2.0 * 64 * 10;
  EXPECT_DOUBLE_EQ(TrainingFlopsPerSample(*mlp), 3 * forward);
  auto cnn = BuildArchitecture("cnn", {1, 28, 28}, 10, {});
  ASSERT_TRUE(cnn.ok());
  // The first convolution alone: 5x5x1 per output, 6 channels of 28x28 (padded).
  EXPECT_GT(TrainingFlopsPerSample(*cnn), 3 * 2.0 * 25 * 6 * 28 * 28);
}

TEST(VirtualRoundTest, ComputeScalesWithSamplesAndSlowdown) {
  const VirtualRound reference({}, 1e6, 2.0, 1.0);
  EXPECT_DOUBLE_EQ(reference.Compute(10, 4000), 10 + 4000 * 1e6 / 2e9);
  const VirtualRound slow({}, 1e6, 2.0, 3.0);
  EXPECT_DOUBLE_EQ(slow.Compute(0, 4000) / reference.Compute(0, 4000), 3.0);
}

TEST(VirtualRoundTest, TransfersTakeTheLinksBandwidthAndLatency) {
  LinkOptions link;
  link.up_mbps = 2;
  link.down_mbps = 10;
  link.latency_ms = 40;
  VirtualRound round(link, 1, 1, 1);
  const int64_t bytes = 1'000'000;
  // The request goes up (64 bytes at 2 Mbit/s, 40 ms), the model comes down at 10 Mbit/s.
  const double down = round.Download(5, bytes);
  EXPECT_NEAR(down, 5 + 64 * 8 / 2e6 + 0.04 + bytes * 8 / 10e6 + 0.04, 1e-9);
  // The delta goes up at 2 Mbit/s, the answer comes back.
  const double up = round.Upload(down, bytes);
  EXPECT_NEAR(up - down, bytes * 8 / 2e6 + 0.04 + 64 * 8 / 10e6 + 0.04, 1e-9);
}

TEST(VirtualRoundTest, JitterAndLossAreSeeded) {
  LinkOptions link;
  link.up_mbps = 1;
  link.latency_ms = 30;
  link.jitter_ms = 10;
  link.loss = 0.01;
  link.seed = 42;
  VirtualRound a(link, 1, 1, 1), b(link, 1, 1, 1);
  double ta = 0, tb = 0;
  for (int i = 0; i < 20; ++i) {
    ta = a.Upload(ta, 200'000);
    tb = b.Upload(tb, 200'000);
  }
  EXPECT_EQ(ta, tb);
  link.seed = 43;
  VirtualRound c(link, 1, 1, 1);
  double tc = 0;
  for (int i = 0; i < 20; ++i) tc = c.Upload(tc, 200'000);
  EXPECT_NE(ta, tc);
}

}  // namespace
}  // namespace hetps
