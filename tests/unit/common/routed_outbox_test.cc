#include "common/routed_outbox.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/message.h"

namespace hetps {
namespace {

const std::function<bool()> kHold = [] { return true; };
const std::function<bool()> kDrop = [] { return false; };

proto::Header Numbered(uint64_t n) {
  proto::Header h;
  h.set_type(proto::HEARTBEAT);
  h.set_request_id(n);
  return h;
}

class RoutedOutboxTest : public ::testing::Test {
 protected:
  void SetUp() override { router_.bind("inproc://outbox-test"); }
  // The high-water marks are fixed when the pipe is made: set them before it is.
  void SetUpSmallQueues() {
    router_.unbind("inproc://outbox-test");
    router_.set(zmq::sockopt::sndhwm, 2);
    dealer_.set(zmq::sockopt::rcvhwm, 2);
    router_.bind("inproc://outbox-test");
  }
  void Connect() {
    dealer_.set(zmq::sockopt::routing_id, NodeIdentity(7));
    dealer_.connect("inproc://outbox-test");
  }
  // Flushes until nothing is held (the router learns the peer's identity a moment after it
  // connects), at most 5 s.
  void FlushAll(RoutedOutbox& outbox) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (outbox.held() > 0 && std::chrono::steady_clock::now() < deadline) {
      outbox.Flush();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // The request ids the dealer has received, in order.
  std::vector<uint64_t> Received() {
    std::vector<uint64_t> ids;
    while (auto env = Receive(dealer_, zmq::recv_flags::dontwait, /*routed=*/false)) {
      ids.push_back(env->message.header.request_id());
    }
    return ids;
  }
  zmq::context_t ctx_{1};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  zmq::socket_t dealer_{ctx_, zmq::socket_type::dealer};
};

TEST_F(RoutedOutboxTest, MessagesToAPeerNotYetConnectedAreHeldAndDeliveredInOrder) {
  RoutedOutbox outbox(router_);
  const std::string peer = NodeIdentity(7);
  EXPECT_EQ(outbox.Send(peer, Numbered(1), kHold), RoutedOutbox::Outcome::kHeld);
  EXPECT_EQ(outbox.Send(peer, Numbered(2), kHold), RoutedOutbox::Outcome::kHeld);
  EXPECT_EQ(outbox.Send("someone", Numbered(9), kDrop), RoutedOutbox::Outcome::kDropped);
  EXPECT_EQ(outbox.held(), 2u);
  EXPECT_EQ(outbox.Flush(), 0u) << "nobody to send to yet";

  Connect();
  FlushAll(outbox);
  ASSERT_EQ(outbox.held(), 0u);
  // Once nothing is held a message goes straight out.
  EXPECT_EQ(outbox.Send(peer, Numbered(3), kHold), RoutedOutbox::Outcome::kSent);
  std::vector<uint64_t> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    for (uint64_t id : Received()) got.push_back(id);
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2, 3}));
}

TEST_F(RoutedOutboxTest, APeerWithAFullQueueGetsEverythingInOrderOnceItReads) {
  SetUpSmallQueues();
  Connect();
  RoutedOutbox outbox(router_);
  const std::string peer = NodeIdentity(7);
  // Wait until the router knows the peer.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (outbox.Send(peer, Numbered(0), kDrop) != RoutedOutbox::Outcome::kSent &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  int held = 0;
  for (uint64_t n = 1; n <= 50; ++n) {
    held += outbox.Send(peer, Numbered(n), kHold) == RoutedOutbox::Outcome::kHeld;
  }
  EXPECT_GT(held, 0) << "the queue never filled";
  std::vector<uint64_t> got;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got.size() < 51 && std::chrono::steady_clock::now() < until) {
    outbox.Flush();
    for (uint64_t id : Received()) got.push_back(id);
  }
  ASSERT_EQ(got.size(), 51u);
  for (uint64_t n = 0; n <= 50; ++n) EXPECT_EQ(got[n], n);
}

TEST_F(RoutedOutboxTest, ForgottenPeersAndTheOldestBeyondTheBoundAreDropped) {
  RoutedOutbox outbox(router_, /*max_held=*/3);
  const std::string peer = NodeIdentity(7);
  for (uint64_t n = 1; n <= 5; ++n) outbox.Send(peer, Numbered(n), kHold);
  EXPECT_EQ(outbox.held_for(peer), 3u);
  outbox.Send(NodeIdentity(8), Numbered(1), kHold);
  outbox.Forget(NodeIdentity(8));
  EXPECT_EQ(outbox.held(), 3u);

  Connect();
  FlushAll(outbox);
  std::vector<uint64_t> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    for (uint64_t id : Received()) got.push_back(id);
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{3, 4, 5}));
}

}  // namespace
}  // namespace hetps
