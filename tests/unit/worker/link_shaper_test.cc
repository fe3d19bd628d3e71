#include "worker/link_shaper.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hetps {
namespace {

TEST(LinkShaperTest, AMessageTakesItsBitsOverTheRatePlusTheLatency) {
  LinkShaper link({.up_mbps = 8, .down_mbps = 80, .latency_ms = 50});
  EXPECT_DOUBLE_EQ(link.Up(1000000, 10.0), 10.0 + 1.0 + 0.05);
  EXPECT_DOUBLE_EQ(link.Down(1000000, 10.0), 10.0 + 0.1 + 0.05) << "each direction on its own";
  // The serializer is busy: the next message queues behind the first.
  EXPECT_DOUBLE_EQ(link.Up(1000000, 10.5), 10.0 + 2.0 + 0.05);
  // An idle link starts at once.
  EXPECT_DOUBLE_EQ(link.Up(100000, 20.0), 20.0 + 0.1 + 0.05);
}

TEST(LinkShaperTest, UnlimitedBandwidthLeavesOnlyTheDelay) {
  LinkShaper link({.latency_ms = 30});
  EXPECT_DOUBLE_EQ(link.Up(1 << 30, 1.0), 1.03);
  EXPECT_FALSE(LinkOptions{}.enabled());
  EXPECT_TRUE(LinkOptions{.loss = 0.01}.enabled());
}

TEST(LinkShaperTest, LossesResendTheirPacketsAndWaitOneTimeout) {
  // 1% of 685 packets: about 6.85 lost per message, their bytes sent again, and one RTO.
  constexpr double kBytes = 1000000;
  LinkShaper link({.up_mbps = 8, .loss = 0.01, .rto_ms = 200, .seed = 4});
  double t = 0, extra = 0;
  constexpr int kMessages = 2000;
  for (int i = 0; i < kMessages; ++i) {
    const double start = t;
    t = link.Up(static_cast<size_t>(kBytes), t);
    extra += (t - start) - kBytes * 8 / 8e6;
  }
  const double lost_bytes = 0.01 * 685 * 1460;
  const double expected = lost_bytes * 8 / 8e6 + 0.2 * (1 - std::pow(0.99, 685));
  EXPECT_NEAR(extra / kMessages, expected, 0.05 * expected);
}

TEST(LinkShaperTest, JitterKeepsTheMeanDelayAndTheOrder) {
  LinkShaper link({.latency_ms = 40, .jitter_ms = 10, .seed = 9});
  double sum = 0, last = 0;
  constexpr int kMessages = 20000;
  for (int i = 0; i < kMessages; ++i) {
    const double now = i * 1.0;  // far apart: no message waits for another
    const double arrival = link.Up(100, now);
    EXPECT_GE(arrival, last) << "messages arrive in order";
    last = arrival;
    sum += arrival - now;
  }
  EXPECT_NEAR(sum / kMessages, 0.040, 0.001);
}

TEST(LinkShaperTest, BadOptionsAreRefused) {
  EXPECT_TRUE(ValidateLinkOptions({}).ok());
  EXPECT_FALSE(ValidateLinkOptions({.up_mbps = -1}).ok());
  EXPECT_FALSE(ValidateLinkOptions({.latency_ms = -5}).ok());
  EXPECT_FALSE(ValidateLinkOptions({.loss = 1}).ok());
}

}  // namespace
}  // namespace hetps
