// A worker treats every server reply as untrusted input. A fake server joins a real scheduler
// and answers the client's requests with wrong partition ids, wrong sizes, wrong types, wrong
// request ids and garbage; the client must fail those operations with a clear error (never
// write out of bounds: this test's client code is built with AddressSanitizer) and stay
// usable.
#include <gtest/gtest.h>

#include <deque>
#include <limits>
#include <thread>

#include "common/batch.h"
#include "common/message.h"
#include "common/scheduler_link.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

// How the fake server answers the next request.
enum class Answer {
  kHonest,          // the right reply: pulls get `values`
  kWrongPartition,  // the right type, about another partition
  kNegativePartition,
  kShortPayload,    // a pull reply with too few bytes
  kLongPayload,     // a pull reply with too many bytes
  kWrongType,       // a PUSH_REPLY to a pull
  kUnknownRequest,  // a reply to a request never sent, then the honest one
  kGarbage,         // frames that are no message at all, then the honest one
  kClockBackwards,  // a CLOCK_REPLY that continues at an earlier clock
  kNoFrameShm,      // a pull reply without a frame that says its values are in shared memory
  kNoFrameCma,      // ... that the server wrote them into the caller's array itself
  kMinClockLowest,  // a pull reply whose slowest clock is the lowest int64 (staleness overflows)
};

class FakeServer {
 public:
  FakeServer(const std::string& scheduler, std::vector<float> values) : values_(std::move(values)) {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    link_ = std::make_unique<SchedulerLink>(ctx_, scheduler, proto::SERVER, BoundEndpoint(router_),
                                            200);
    link_->registration().mutable_policy()->set_consistency("asp");
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
  }
  void Queue(Answer a) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_.push_back(a);
  }
  // While holding, requests are recorded and left unanswered; Release answers them and every
  // later one.
  void Hold() { hold_ = true; }
  void Release() { release_ = true; }
  // The types of the requests received so far, in order.
  std::vector<proto::MsgType> Received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  void Serve() {
    if (!link_->Join(stop_, 20000).ok()) return;
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {link_->socket().handle(), 0, ZMQ_POLLIN, 0}};
    while (!stop_) {
      zmq::poll(items, 2, 20ms);
      link_->MaybeHeartbeat();
      while (auto env = Receive(link_->socket(), zmq::recv_flags::dontwait, false)) {
        link_->Heard();
        if (env->message.header.type() == proto::SHARD_MAP) {
          link_->Send(ReplyTo(env->message.header, proto::SHARD_MAP_ACK, link_->id()));
        }
      }
      if (release_.exchange(false)) {
        hold_ = false;
        for (Envelope& env : held_) Respond(env);
        held_.clear();
      }
      while (auto env = Receive(router_, zmq::recv_flags::dontwait, true)) {
        // A batch (common/batch.h) is its parts, each answered on its own.
        std::vector<Envelope> parts;
        if (IsBatch(*env)) {
          ASSERT_TRUE(Unbatch(*env, parts).ok()) << "the client sent a malformed batch";
        } else {
          parts.push_back(std::move(*env));
        }
        for (Envelope& part : parts) Take(part);
      }
    }
  }

  void Take(Envelope& env) {
    const proto::MsgType type = env.message.header.type();
    if (type == proto::SHM_ATTACH || type == proto::CMA_ATTACH) {
      // Answered at once with a reply of the wrong type (INIT_REPLY): the client must stay on
      // its socket. Not recorded: the tests count data requests.
      Respond(env);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      received_.push_back(env.message.header.type());
    }
    if (hold_) {
      held_.push_back(std::move(env));
    } else {
      Respond(env);
    }
  }

  void Respond(Envelope& env) {
    const proto::Header& req = env.message.header;
    enum Answer how = Answer::kHonest;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!answers_.empty()) {
        how = answers_.front();
        answers_.pop_front();
      }
    }
    const proto::MsgType type = req.type() == proto::PULL    ? proto::PULL_REPLY
                                : req.type() == proto::PUSH  ? proto::PUSH_REPLY
                                : req.type() == proto::CLOCK ? proto::CLOCK_REPLY
                                                             : proto::INIT_REPLY;
    proto::Header r = ReplyTo(req, type, link_->id());
    r.set_num_elements(static_cast<int64_t>(values_.size()));
    r.set_dtype(proto::FLOAT32);
    if (type == proto::CLOCK_REPLY) r.set_clock(req.clock() + 1);
    size_t bytes = values_.size() * sizeof(float);
    switch (how) {
      case Answer::kWrongPartition:
        r.set_partition(123456789);
        break;
      case Answer::kNegativePartition:
        r.set_partition(-7);
        break;
      case Answer::kShortPayload:
        bytes = 3;
        break;
      case Answer::kLongPayload:
        bytes = 1 << 20;
        break;
      case Answer::kWrongType:
        r.set_type(proto::PUSH_REPLY);
        break;
      case Answer::kUnknownRequest: {
        proto::Header stray = r;
        stray.set_request_id(req.request_id() + 1000);
        stray.set_partition(99999);
        std::vector<zmq::message_t> junk;
        junk.push_back(Payload(1 << 16));
        SendRouted(router_, env.identity, stray, std::move(junk));
        break;
      }
      case Answer::kGarbage: {
        std::vector<zmq::message_t> frames;
        frames.emplace_back(env.identity.data(), env.identity.size());
        frames.emplace_back(std::string("\xff\xfe not a header"));
        frames.emplace_back(std::string("payload"));
        zmq::send_multipart(router_, frames);
        break;
      }
      case Answer::kClockBackwards:
        r.set_clock(req.clock() - 5);
        break;
      case Answer::kNoFrameShm:
        r.set_shm_length(static_cast<int64_t>(bytes));
        bytes = 0;
        break;
      case Answer::kNoFrameCma:
        r.set_cma_length(static_cast<int64_t>(bytes));
        bytes = 0;
        break;
      case Answer::kMinClockLowest:
        r.set_min_clock(std::numeric_limits<int64_t>::min());
        break;
      case Answer::kHonest:
        break;
    }
    std::vector<zmq::message_t> payload;
    if (type == proto::PULL_REPLY && bytes > 0) payload.push_back(Payload(bytes));
    SendRouted(router_, env.identity, r, std::move(payload));
  }

  // `bytes` of the values, repeated or cut.
  zmq::message_t Payload(size_t bytes) const {
    zmq::message_t m(bytes);
    auto* out = static_cast<uint8_t*>(m.data());
    const auto* in = reinterpret_cast<const uint8_t*>(values_.data());
    const size_t n = values_.size() * sizeof(float);
    for (size_t i = 0; i < bytes; ++i) out[i] = in[i % n];
    return m;
  }

  std::vector<float> values_;
  zmq::context_t ctx_{1};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  std::unique_ptr<SchedulerLink> link_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::deque<enum Answer> answers_;
  std::vector<proto::MsgType> received_;
  std::atomic<bool> hold_{false}, release_{false};
  std::vector<Envelope> held_;  // the serving thread's
  std::thread thread_;
};

TEST(HostileServerTest, BadRepliesFailTheirOperationAndTheClientStaysUsable) {
  LocalCluster cluster({.servers = 0, .workers = 1, .scheduler_flags = {"--num_servers=1"}});
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
  FakeServer server(cluster.endpoint(), values);
  auto clients = cluster.ConnectClients(1);
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTensors({{"w", {8}, 0}}).ok());

  // A guard on each side of the destination: nothing may be written outside the 8 values.
  std::vector<float> buffer(8 + 2, -1.0f);
  float* out = buffer.data() + 1;
  auto pull = [&](Answer how) {
    server.Queue(how);
    return c.Pull("w", out, 8).Wait();
  };
  for (Answer bad : {Answer::kWrongPartition, Answer::kNegativePartition, Answer::kShortPayload,
                     Answer::kLongPayload, Answer::kWrongType, Answer::kNoFrameShm,
                     Answer::kNoFrameCma, Answer::kMinClockLowest}) {
    std::fill(buffer.begin(), buffer.end(), -1.0f);
    Status s = pull(bad);
    EXPECT_FALSE(s.ok()) << "answer " << static_cast<int>(bad) << " was accepted";
    EXPECT_TRUE(s.code() == StatusCode::kMalformed || s.code() == StatusCode::kSizeMismatch)
        << s.ToString();
    EXPECT_EQ(buffer.front(), -1.0f);
    EXPECT_EQ(buffer.back(), -1.0f);
    if (bad == Answer::kWrongPartition) {  // the message names the asked and the answered one
      EXPECT_NE(s.message().find("request for partition 0 with a reply for partition 123456789"),
                std::string::npos)
          << s.message();
    }
  }
  // A reply to no request and frames that are no message are ignored; the honest reply that
  // follows completes the pull.
  for (Answer stray : {Answer::kUnknownRequest, Answer::kGarbage}) {
    std::fill(buffer.begin(), buffer.end(), -1.0f);
    Status s = pull(stray);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(std::vector<float>(out, out + 8), values);
    EXPECT_EQ(buffer.back(), -1.0f);
  }
  // A push answered about another partition fails too.
  server.Queue(Answer::kWrongPartition);
  std::vector<float> g(8, 0.5f);
  EXPECT_EQ(c.Push("w", g.data(), 8).Wait().code(), StatusCode::kMalformed);
  // A clock may not be sent backwards.
  server.Queue(Answer::kClockBackwards);
  EXPECT_EQ(c.Clock().code(), StatusCode::kMalformed);

  // Still usable: an honest round trip works.
  ASSERT_TRUE(c.Push("w", g.data(), 8).Wait().ok());
  ASSERT_TRUE(pull(Answer::kHonest).ok());
  EXPECT_EQ(std::vector<float>(out, out + 8), values);
  EXPECT_TRUE(c.Clock().ok());
}

// Flow control: a client has at most max_in_flight_bytes of requests in flight to a server; the
// rest wait in the client, in order (a clock after pushes stays after them), and go as replies
// come back.
TEST(HostileServerTest, RequestsBeyondTheInFlightWindowWaitInTheClientInOrder) {
  LocalCluster cluster({.servers = 0,
                        .workers = 1,
                        .scheduler_flags = {"--num_servers=1", "--partition_bytes=65536"}});
  FakeServer server(cluster.endpoint(), std::vector<float>(16384, 1.0f));
  ClientOptions options = cluster.ClientOpts();
  options.max_in_flight_bytes = 3 * 65536;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Client& c = **client;
  constexpr int kPartitions = 8;
  ASSERT_TRUE(c.DeclareTensors({{"w", {kPartitions * 16384}, 0}}).ok());
  ASSERT_EQ(c.shard_map().PartitionsOf(c.shard_map().TensorId("w")).size(), kPartitions);

  server.Hold();
  std::vector<float> g(kPartitions * 16384, 0.5f);
  Ticket push = c.Push("w", g.data(), static_cast<int64_t>(g.size()));
  Status clock;
  std::thread clocker([&] { clock = c.Clock(); });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server.Received().size() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(300ms);  // time for more to arrive, were the window not kept
  EXPECT_EQ(server.Received().size(), 3u) << "requests beyond the window reached the server";
  EXPECT_FALSE(push.Done());

  server.Release();
  ASSERT_TRUE(push.Wait().ok());
  clocker.join();
  ASSERT_TRUE(clock.ok()) << clock.ToString();
  const std::vector<proto::MsgType> received = server.Received();
  ASSERT_EQ(received.size(), kPartitions + 1u);
  for (int i = 0; i < kPartitions; ++i) EXPECT_EQ(received[i], proto::PUSH) << i;
  EXPECT_EQ(received.back(), proto::CLOCK) << "the clock passed pushes waiting for the window";
  // Pulls count what they ask for: all 8 partitions arrive, in windows, and complete.
  std::vector<float> values(g.size(), 0.0f);
  ASSERT_TRUE(c.Pull("w", values.data(), static_cast<int64_t>(values.size())).Wait().ok());
  EXPECT_EQ(values, std::vector<float>(g.size(), 1.0f));
  EXPECT_EQ(c.stats().shared_memory_bytes, 0) << "a malformed attach answer was taken";
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace hetps::testing
