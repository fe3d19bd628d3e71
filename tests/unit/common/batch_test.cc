#include "common/batch.h"

#include <gtest/gtest.h>

#include <string>

namespace hetps {
namespace {

proto::Header Part(proto::MsgType type, int32_t partition) {
  proto::Header h;
  h.set_type(type);
  h.set_sender(5);
  h.set_partition(partition);
  h.set_request_id(100 + partition);
  return h;
}

std::vector<zmq::message_t> Frames(std::initializer_list<std::string> contents) {
  std::vector<zmq::message_t> frames;
  for (const std::string& c : contents) frames.emplace_back(c.data(), c.size());
  return frames;
}

class BatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    router_.bind("inproc://batch-test");
    dealer_.set(zmq::sockopt::routing_id, NodeIdentity(5));
    dealer_.connect("inproc://batch-test");
  }
  // Flushes `batch` from the dealer and receives it at the router, as a server does.
  Envelope RoundTrip(Batch& batch) {
    int sent = 0;
    batch.Flush(5, [&](const proto::Header& h, std::vector<zmq::message_t> payload) {
      EXPECT_TRUE(Send(dealer_, h, std::move(payload)));
      ++sent;
    });
    EXPECT_EQ(sent, 1);
    auto env = Receive(router_, zmq::recv_flags::none, /*routed=*/true);
    EXPECT_TRUE(env.has_value());
    return std::move(*env);
  }
  zmq::context_t ctx_{1};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  zmq::socket_t dealer_{ctx_, zmq::socket_type::dealer};
};

TEST_F(BatchTest, PartsArriveInOrderWithTheirOwnFrames) {
  Batch batch(1 << 20);
  batch.Add(Part(proto::PUSH, 0), Frames({"aaaa"}));
  batch.Add(Part(proto::PULL, 1), {});
  batch.Add(Part(proto::PUSH, 2), Frames({"bb"}));
  batch.Add(Part(proto::CLOCK, 3), {});
  EXPECT_EQ(batch.parts(), 4);

  Envelope env = RoundTrip(batch);
  EXPECT_TRUE(batch.empty());
  ASSERT_TRUE(IsBatch(env));
  EXPECT_EQ(env.message.header.sender(), 5);
  std::vector<Envelope> parts;
  ASSERT_TRUE(Unbatch(env, parts).ok());
  ASSERT_EQ(parts.size(), 4u);
  const proto::MsgType types[] = {proto::PUSH, proto::PULL, proto::PUSH, proto::CLOCK};
  const size_t frames[] = {1, 0, 1, 0};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(parts[i].identity, "node-5");
    EXPECT_TRUE(parts[i].status.ok());
    EXPECT_EQ(parts[i].message.header.type(), types[i]);
    EXPECT_EQ(parts[i].message.header.partition(), i);
    EXPECT_EQ(parts[i].message.header.request_id(), 100u + i);
    EXPECT_EQ(parts[i].message.payload.size(), frames[i]);
  }
  EXPECT_EQ(parts[0].message.payload[0].to_string(), "aaaa");
  EXPECT_EQ(parts[2].message.payload[0].to_string(), "bb");
}

TEST_F(BatchTest, ALonePartGoesAsItself) {
  Batch batch(1 << 20);
  batch.Add(Part(proto::PUSH, 7), Frames({"xyz"}));
  Envelope env = RoundTrip(batch);
  EXPECT_FALSE(IsBatch(env));
  EXPECT_EQ(env.message.header.type(), proto::PUSH);
  EXPECT_EQ(env.message.header.partition(), 7);
  ASSERT_EQ(env.message.payload.size(), 1u);
  EXPECT_EQ(env.message.payload[0].to_string(), "xyz");
}

TEST_F(BatchTest, ABatchIsReusedAfterAFlush) {
  Batch batch(1 << 20);
  for (int round = 0; round < 3; ++round) {
    batch.Add(Part(proto::PUSH, 0), Frames({"one"}));
    batch.Add(Part(proto::PULL, 1), {});
    Envelope env = RoundTrip(batch);
    EXPECT_TRUE(batch.empty());
    std::vector<Envelope> parts;
    ASSERT_TRUE(Unbatch(env, parts).ok());
    ASSERT_EQ(parts.size(), 2u);  // nothing of the round before
    EXPECT_EQ(parts[0].message.payload[0].to_string(), "one");
    EXPECT_EQ(parts[1].message.header.type(), proto::PULL);
    EXPECT_TRUE(parts[1].message.payload.empty());
  }
  int sent = 0;
  batch.Flush(5, [&](const proto::Header&, std::vector<zmq::message_t>) { ++sent; });
  EXPECT_EQ(sent, 0);  // an empty batch sends nothing
}

TEST_F(BatchTest, FitsKeepsTheBudgetOfBytesAndParts) {
  Batch batch(10, /*max_parts=*/3);
  EXPECT_TRUE(batch.Fits(100));  // an empty batch takes anything
  batch.Add(Part(proto::PUSH, 0), Frames({"123456"}));
  EXPECT_TRUE(batch.Fits(4));
  EXPECT_FALSE(batch.Fits(5));
  batch.Add(Part(proto::PUSH, 1), Frames({"1234"}));
  batch.Add(Part(proto::PULL, 2), {});
  EXPECT_FALSE(batch.Fits(0));  // three parts
  batch.Clear();
  EXPECT_TRUE(batch.empty());
  EXPECT_TRUE(batch.Fits(10));
}

TEST_F(BatchTest, MalformedBatchesYieldNothing) {
  auto unbatch = [](proto::Header h, size_t frames) {
    Envelope env;
    env.message.header = std::move(h);
    for (size_t i = 0; i < frames; ++i) env.message.payload.emplace_back(std::string("f"));
    std::vector<Envelope> parts;
    Status s = Unbatch(env, parts);
    EXPECT_EQ(parts.size(), s.ok() ? static_cast<size_t>(env.message.header.batch_size()) : 0u);
    return s;
  };
  proto::Header h;
  h.set_type(proto::BATCH);
  EXPECT_EQ(unbatch(h, 0).code(), StatusCode::kMalformed);  // no parts

  *h.add_batch() = Part(proto::PUSH, 0);
  h.add_batch_frames(1);
  *h.add_batch() = Part(proto::PUSH, 1);
  h.add_batch_frames(1);
  EXPECT_TRUE(unbatch(h, 2).ok());
  EXPECT_EQ(unbatch(h, 1).code(), StatusCode::kMalformed);  // fewer frames than named
  EXPECT_EQ(unbatch(h, 3).code(), StatusCode::kMalformed);  // more

  proto::Header counts = h;
  counts.add_batch_frames(0);  // a count without a part
  EXPECT_EQ(unbatch(counts, 2).code(), StatusCode::kMalformed);

  proto::Header nested = h;
  nested.mutable_batch(1)->set_type(proto::BATCH);
  EXPECT_EQ(unbatch(nested, 2).code(), StatusCode::kMalformed);
  proto::Header unknown = h;
  unknown.mutable_batch(0)->set_type(proto::MSG_UNKNOWN);
  EXPECT_EQ(unbatch(unknown, 2).code(), StatusCode::kMalformed);

  proto::Header huge;
  huge.set_type(proto::BATCH);
  for (int i = 0; i <= kMaxBatchParts; ++i) {
    *huge.add_batch() = Part(proto::PULL, i);
    huge.add_batch_frames(0);
  }
  EXPECT_EQ(unbatch(huge, 0).code(), StatusCode::kMalformed);
}

}  // namespace
}  // namespace hetps
