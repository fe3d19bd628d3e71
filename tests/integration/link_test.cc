// The emulated edge link inside the client's transport (ClientOptions::link), measured on a
// real cluster: a 1 MB push over an 8 Mbit/s uplink with 50 ms latency each way takes its
// serialization plus both delays, and a 1 MB pull over an 8 Mbit/s downlink likewise, within
// 10% of the link's figures. The same link as hetps launch --links=netns makes it (a network
// namespace, tc tbf, the delaying proxy; needs root) agrees within 10% too.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "cli/netns_links.h"
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

TEST(LinkTest, TheNetnsLinkAgreesWithTheTransportLink) {
  if (std::string why = NetnsLinks::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  const LinkOptions link = {.up_mbps = 8, .down_mbps = 8, .latency_ms = 50};
  // A subnet of this test's own, apart from hetps launch's default.
  auto netns = NetnsLinks::Create({{.rank = 1, .link = link}}, "10.204");
  ASSERT_TRUE(netns.ok()) << netns.status().ToString();
  auto scheduler_port = (*netns)->Forward(false);
  auto server_port = (*netns)->Forward(true);
  ASSERT_TRUE(scheduler_port.ok() && server_port.ok());
  ASSERT_TRUE((*netns)->StartProxy().ok());
  const std::string address = (*netns)->address();
  LocalCluster cluster(
      {.servers = 1,
       .workers = 1,
       .scheduler_bind = fmt::format("tcp://127.0.0.1:{}", *scheduler_port),
       .server_own_flags = {{fmt::format("--bind=tcp://127.0.0.1:{}", *server_port),
                             fmt::format("--advertise=tcp://{}:{}", address, *server_port)}}});
  ClientOptions options = cluster.ClientOpts();
  options.scheduler = fmt::format("tcp://{}:{}", address, *scheduler_port);
  // The client runs on a thread inside the namespace: its sockets and I/O thread are there.
  double push_s = -1, pull_s = -1;
  std::string failure;
  std::thread inside([&] {
    const std::string path = "/run/netns/" + (*netns)->Namespace(1);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      failure = "cannot enter " + path;
      return;
    }
    close(fd);
    auto client = Client::Connect(options);
    if (!client.ok()) {
      failure = client.status().ToString();
      return;
    }
    constexpr int64_t kFloats = 250000;  // 1 MB
    std::vector<float> values(kFloats, 1.0f);
    if (!(*client)->DeclareTensors({{"w", {kFloats}, 0}}).ok() ||
        !(*client)->Init("w", values.data(), kFloats).Wait().ok()) {
      failure = "cannot declare and initialize w";
      return;
    }
    auto start = Clock::now();
    const bool pushed = (*client)->Push("w", values.data(), kFloats).Wait().ok();
    push_s = Seconds(start);
    start = Clock::now();
    const bool pulled = (*client)->Pull("w", values.data(), kFloats).Wait().ok();
    pull_s = Seconds(start);
    if (!pushed || !pulled) failure = "the push or the pull failed";
    (void)(*client)->Finish();
  });
  inside.join();
  ASSERT_TRUE(failure.empty()) << failure;
  // The transport's figures for the same link (LinkShaper): 1 s of serialization and 50 ms each
  // way, for the push and for the pull.
  LinkShaper model(link);
  const double modelled = model.Down(1000000, model.Up(100, 0));
  EXPECT_NEAR(modelled, 1.1, 0.01);
  EXPECT_NEAR(push_s, modelled, 0.1 * modelled) << "push of 1 MB through the namespace";
  EXPECT_NEAR(pull_s, modelled, 0.1 * modelled) << "pull of 1 MB through the namespace";
  std::printf("netns: push %.3f s, pull %.3f s (the transport's model: %.3f s each)\n", push_s,
              pull_s, modelled);
  const std::string ns = (*netns)->Namespace(1);
  netns->reset();
  EXPECT_TRUE(NetnsLinks::NamespacesOf(getpid()).empty()) << ns << " is left";
}

}  // namespace
}  // namespace hetps::testing
