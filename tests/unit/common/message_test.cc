#include "common/message.h"

#include <gtest/gtest.h>

#include <atomic>

namespace hetps {
namespace {

class MessageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    router_.bind("inproc://message-test");
    dealer_.set(zmq::sockopt::routing_id, NodeIdentity(5));
    dealer_.connect("inproc://message-test");
  }
  zmq::context_t ctx_{1};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  zmq::socket_t dealer_{ctx_, zmq::socket_type::dealer};
};

TEST_F(MessageTest, HeaderAndPayloadRoundTrip) {
  proto::Header h;
  h.set_type(proto::PUSH);
  h.set_sender(5);
  h.set_partition(3);
  std::vector<zmq::message_t> payload;
  payload.emplace_back(std::string(1000, 'x'));
  ASSERT_TRUE(Send(dealer_, h, std::move(payload)));

  auto env = Receive(router_, zmq::recv_flags::none, /*routed=*/true);
  ASSERT_TRUE(env.has_value());
  ASSERT_TRUE(env->status.ok());
  EXPECT_EQ(env->identity, "node-5");
  EXPECT_EQ(env->message.header.type(), proto::PUSH);
  EXPECT_EQ(env->message.header.partition(), 3);
  ASSERT_EQ(env->message.payload.size(), 1u);
  EXPECT_EQ(env->message.payload[0].size(), 1000u);

  ASSERT_TRUE(
      SendRouted(router_, env->identity, ReplyTo(env->message.header, proto::PUSH_REPLY, 1)));
  auto reply = Receive(dealer_, zmq::recv_flags::none, /*routed=*/false);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->message.header.type(), proto::PUSH_REPLY);
  EXPECT_EQ(reply->message.header.partition(), 3);
}

TEST_F(MessageTest, ZeroCopyFrameIsReleasedAfterSend) {
  static std::atomic<int> released{0};
  std::vector<float> data(1 << 16, 1.5f);
  std::vector<zmq::message_t> payload;
  payload.emplace_back(
      data.data(), data.size() * sizeof(float), [](void*, void*) { released++; }, nullptr);
  proto::Header h;
  h.set_type(proto::PUSH);
  ASSERT_TRUE(Send(dealer_, h, std::move(payload)));
  auto env = Receive(router_, zmq::recv_flags::none, true);
  ASSERT_TRUE(env.has_value());
  // inproc hands the very buffer over: no copy was made.
  EXPECT_EQ(env->message.payload[0].data(), static_cast<void*>(data.data()));
  env.reset();
  EXPECT_EQ(released.load(), 1);
}

TEST_F(MessageTest, GarbageHeaderIsMalformedAndDrained) {
  (void)dealer_.send(zmq::buffer(std::string("\xff\xff\xff not protobuf")),
                     zmq::send_flags::sndmore);
  (void)dealer_.send(zmq::buffer(std::string("payload")), zmq::send_flags::none);
  auto env = Receive(router_, zmq::recv_flags::none, true);
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->status.code(), StatusCode::kMalformed);
  EXPECT_EQ(env->identity, "node-5");  // still answerable
  // The next message is read cleanly: the bad one's frames were all consumed.
  proto::Header h;
  h.set_type(proto::PULL);
  ASSERT_TRUE(Send(dealer_, h));
  auto next = Receive(router_, zmq::recv_flags::none, true);
  ASSERT_TRUE(next.has_value());
  EXPECT_TRUE(next->status.ok());
  EXPECT_EQ(next->message.header.type(), proto::PULL);
}

TEST(MessageHelpersTest, ErrorReplyCarriesStatus) {
  proto::Header req;
  req.set_request_id(42);
  proto::Header err = ErrorReply(req, Status::DtypeMismatch("float32 only"), 2);
  EXPECT_EQ(err.type(), proto::ERROR);
  EXPECT_EQ(err.request_id(), 42u);
  Status s = StatusOf(err);
  EXPECT_EQ(s.code(), StatusCode::kDtypeMismatch);
  EXPECT_EQ(s.message(), "float32 only");
  EXPECT_TRUE(StatusOf(req).ok());
}

TEST(OwnedFrameTest, TakesTheBytesWithoutACopy) {
  std::vector<uint8_t> bytes = {1, 2, 3, 4, 5};
  const uint8_t* data = bytes.data();
  zmq::message_t frame = OwnedFrame(std::move(bytes));
  ASSERT_EQ(frame.size(), 5u);
  EXPECT_EQ(frame.data(), data);
  EXPECT_EQ(static_cast<const uint8_t*>(frame.data())[4], 5);
}

TEST(NodeIdentityTest, IsNodeIdentityMatchesExactlyWhatNodeIdentityBuilds) {
  for (int32_t id : {0, 5, 12, 2147483647, -3}) {
    EXPECT_TRUE(IsNodeIdentity(NodeIdentity(id), id)) << id;
  }
  EXPECT_FALSE(IsNodeIdentity("node-5", 6));
  EXPECT_FALSE(IsNodeIdentity("node-51", 5));
  EXPECT_FALSE(IsNodeIdentity("node-", 5));
  EXPECT_FALSE(IsNodeIdentity("nodx-5", 5));
  EXPECT_FALSE(IsNodeIdentity("node-05", 5));
  EXPECT_FALSE(IsNodeIdentity("", 0));
  EXPECT_FALSE(IsNodeIdentity(std::string("node-5\0", 7), 5));
}

}  // namespace
}  // namespace hetps
