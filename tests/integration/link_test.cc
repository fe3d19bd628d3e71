// The emulated edge link inside the client's transport (ClientOptions::link), measured on a
// real cluster: a 1 MB push over an 8 Mbit/s uplink with 50 ms latency each way takes its
// serialization plus both delays, and a 1 MB pull over an 8 Mbit/s downlink likewise, within
// 10% of the link's figures.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

TEST(LinkTest, TransfersTakeTheEmulatedLinksTime) {
  LocalCluster cluster({.servers = 1, .workers = 1});
  ClientOptions options = cluster.ClientOpts();
  options.link = {.up_mbps = 8, .down_mbps = 8, .latency_ms = 50};
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  constexpr int64_t kFloats = 250000;  // 1 MB
  ASSERT_TRUE((*client)->DeclareTensors({{"w", {kFloats}, 0}}).ok());
  std::vector<float> values(kFloats, 1.0f);
  ASSERT_TRUE((*client)->Init("w", values.data(), kFloats).Wait().ok());
  // Push: 1e6 bytes at 8 Mbit/s = 1 s, plus 50 ms out and 50 ms for the reply.
  auto start = Clock::now();
  ASSERT_TRUE((*client)->Push("w", values.data(), kFloats).Wait().ok());
  const double push_s = Seconds(start);
  EXPECT_NEAR(push_s, 1.1, 0.11) << "push of 1 MB";
  // Pull: the request out (50 ms), the values back (1 s + 50 ms).
  start = Clock::now();
  ASSERT_TRUE((*client)->Pull("w", values.data(), kFloats).Wait().ok());
  const double pull_s = Seconds(start);
  EXPECT_NEAR(pull_s, 1.1, 0.11) << "pull of 1 MB";
  std::printf("push %.3f s, pull %.3f s (the link's figures: 1.100 s each)\n", push_s, pull_s);
  EXPECT_TRUE((*client)->Finish().ok());
}

}  // namespace
}  // namespace hetps::testing
