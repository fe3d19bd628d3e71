// The aggregation tier (docs/aggregation-tier.md): workers' pushes summed by a host-local
// hetps-aggregator reach the servers as one push per partition, exactly, under bsp and asp; an
// aggregator killed mid-run leaves its workers pushing directly with nothing lost or doubled;
// hostile input to an aggregator gets an error and it keeps serving.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <regex>
#include <thread>
#include <tuple>

#include "common/message.h"
#include "common/scheduler_link.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

constexpr int64_t kLength = 300000;  // three partitions of <= 400 KB over two servers

// The node id of worker rank `rank`, and of the aggregator, in `view`.
int32_t WorkerId(const ClusterView& view, int rank) {
  return view.workers().at(static_cast<size_t>(rank)).id();
}
int32_t AggregatorId(const ClusterView& view) { return view.aggregators().at(0).id(); }

ClusterOptions TierCluster(const std::string& consistency, int aggregators,
                           const std::string& log_file = "",
                           std::vector<std::string> aggregator_flags = {}) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 4;
  o.scheduler_flags = {"--partition_bytes=400000", "--heartbeat_timeout_ms=1500"};
  o.server_flags = {"--consistency=" + consistency, "--optimizer=sgd:lr=1", "--init=zeros"};
  o.aggregators = aggregators;
  // A sum leaves early only when the group's pushes come further apart than this; the counts
  // below hold on a loaded machine (and under the sanitizers) with waits this long.
  aggregator_flags.push_back(consistency == "bsp" ? "--window_ms=20000" : "--window_ms=50");
  o.aggregator_flags = std::move(aggregator_flags);
  o.log_file = log_file;
  return o;
}

// Worker i's push at clock t: (i + 1) * (t + 1) everywhere but element j, which adds j % 7, so
// a sum that took a partition's values from the wrong place shows.
std::vector<float> Gradient(int i, int t) {
  std::vector<float> g(kLength, static_cast<float>((i + 1) * (t + 1)));
  for (int64_t j = 0; j < kLength; j += 997) g[j] += static_cast<float>(j % 7);
  return g;
}

// What sgd with lr 1 from zeros holds after the given clocks of every worker's Gradient.
std::vector<float> Expected(int workers, int clocks) {
  std::vector<double> w(kLength, 0.0);
  for (int t = 0; t < clocks; ++t) {
    for (int i = 0; i < workers; ++i) {
      const std::vector<float> g = Gradient(i, t);
      for (int64_t j = 0; j < kLength; ++j) w[j] -= g[j];
    }
  }
  return {w.begin(), w.end()};
}

// The pushes the servers served, from their last lines (they stop once the workers finished).
int64_t ServedPushes(const std::string& log) {
  static const std::regex stopped(R"(stopped: (\d+) pushes, \d+ pulls served)");
  int64_t total = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), stopped), end; it != end; ++it) {
    total += std::stoll((*it)[1]);
  }
  return total;
}

// Every worker pushes its Gradient, clocks and pulls, `clocks` times. With `expect` (bsp) it must
// read exactly the model after the clocks so far; without (asp) at least its own pushes (every
// gradient is positive, so the model is at most minus the worker's own sum).
void RunClocks(std::vector<std::unique_ptr<Client>>& clients, int clocks,
               const std::vector<std::vector<float>>* expect = nullptr, bool own_reads = true) {
  LocalCluster::RunEach(static_cast<int>(clients.size()), [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {kLength}, 0}}).ok());
    std::vector<float> w(kLength);
    for (int t = 0; t < clocks; ++t) {
      const std::vector<float> g = Gradient(i, t);
      ASSERT_TRUE(clients[i]->Push("w", g.data(), kLength).Wait().ok());
      ASSERT_TRUE(clients[i]->Clock().ok());
      ASSERT_TRUE(clients[i]->Pull("w", w.data(), kLength).Wait().ok());
      if (expect != nullptr) {
        EXPECT_TRUE(w == (*expect)[t]) << "worker " << i << " read another model after clock " << t;
      } else if (own_reads) {
        const float own = -static_cast<float>((i + 1) * (t + 1) * (t + 2) / 2);
        EXPECT_LE(w[1], own) << "worker " << i << " did not read its own pushes at clock " << t;
      }
    }
  });
}

// The pulls the servers served.
int64_t ServedPulls(const std::string& log) {
  static const std::regex stopped(R"(stopped: \d+ pushes, (\d+) pulls served)");
  int64_t total = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), stopped), end; it != end; ++it) {
    total += std::stoll((*it)[1]);
  }
  return total;
}

void ExpectModel(Client& c, const std::vector<float>& want) {
  std::vector<float> got(kLength);
  ASSERT_TRUE(c.Pull("w", got.data(), kLength).Wait().ok());
  int64_t wrong = 0;
  for (int64_t j = 0; j < kLength; ++j) wrong += got[j] != want[j];
  EXPECT_EQ(wrong, 0) << "w[0] = " << got[0] << ", want " << want[0];
}

void ExactThroughTheTier(const std::string& consistency) {
  const std::string log = std::filesystem::temp_directory_path() /
                          ("hetps-tier-" + consistency + std::to_string(getpid()) + ".log");
  constexpr int kClocks = 5;
  {
    LocalCluster cluster(TierCluster(consistency, 1, log));
    auto clients = cluster.ConnectClients(4);
    std::vector<std::vector<float>> after;
    for (int t = 1; t <= kClocks; ++t) after.push_back(Expected(4, t));
    RunClocks(clients, kClocks, consistency == "bsp" ? &after : nullptr);
    ExpectModel(*clients[0], Expected(4, kClocks));
    // The scheduler's status lists the aggregator with its group and what it summed (its
    // heartbeats report it; `hetps status` shows it as a table).
    Ran status;
    for (int i = 0; i < 50; ++i) {
      status = Shell(Bin("hetps") + " status --scheduler=" + cluster.endpoint());
      if (status.output.find(" 60 ") != std::string::npos) break;  // every push reported
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(status.code, 0) << status.output;
    EXPECT_NE(status.output.find("GROUP"), std::string::npos) << status.output;
    EXPECT_NE(status.output.find(" 60 "), std::string::npos) << status.output;
    for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
    for (int i = 0; i < 2; ++i) cluster.server(i).WaitExit(std::chrono::seconds(20));
  }
  const std::string text = Slurp(log);
  std::filesystem::remove(log);
  // 4 workers x 3 partitions x 5 clocks directly; through the tier one push per partition and
  // clock when the group's pushes meet (bsp), fewer than half of them however they meet (asp).
  const int64_t served = ServedPushes(text);
  std::printf("servers served %lld pushes (directly: %d)\n", static_cast<long long>(served),
              4 * 3 * kClocks);
  EXPECT_GT(served, 0) << text;
  if (consistency == "bsp") {
    EXPECT_EQ(served, 3 * kClocks) << text;
    // The group's pulls of a clock reach the servers as one per partition (a late one finds
    // the aggregator's copy): 3 x 5 and client 0's last, against 4 x 3 x 5 directly.
    const int64_t pulls = ServedPulls(text);
    std::printf("servers served %lld pulls (directly: %d)\n", static_cast<long long>(pulls),
                4 * 3 * kClocks + 3);
    EXPECT_LE(pulls, 3 * kClocks + 3) << text;
  } else {
    EXPECT_LT(served, 4 * 3 * kClocks / 2 + 1) << text;
  }
}

TEST(TierTest, BspSumsAndReadsThroughTheAggregatorExactlyOncePerPartitionAndClock) {
  ExactThroughTheTier("bsp");
}

TEST(TierTest, AspSumsAndSharesReadsThroughTheAggregatorExactly) { ExactThroughTheTier("asp"); }

// A server aggregator that needs each push's own staleness takes no sums: the workers push
// directly (and the aggregator, which would only share their reads, sums nothing).
TEST(TierTest, ServersThatTakeNoSumsGetEveryWorkersPushDirectly) {
  const std::string log = std::filesystem::temp_directory_path() /
                          ("hetps-tier-nosum-" + std::to_string(getpid()) + ".log");
  {
    ClusterOptions o = TierCluster("asp", 1, log);
    o.server_flags.push_back("--aggregator=sum:staleness_lr=inverse");
    LocalCluster cluster(o);
    auto clients = cluster.ConnectClients(4);
    RunClocks(clients, 2, nullptr, /*own_reads=*/false);  // scaled: no bound to check
    for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
    for (int i = 0; i < 2; ++i) cluster.server(i).WaitExit(std::chrono::seconds(20));
  }
  const std::string text = Slurp(log);
  std::filesystem::remove(log);
  EXPECT_EQ(ServedPushes(text), 4 * 3 * 2) << text;
  EXPECT_NE(text.find("stopped: 0 pushes summed into 0 sums"), std::string::npos) << text;
}

// The aggregator is SIGKILLed while the workers push under bsp: their pushes at it go to the
// servers directly once it is declared dead, and the model is the exact sum of every push.
TEST(TierTest, AnAggregatorKilledMidRunLeavesItsWorkersPushingDirectlyExactly) {
  for (const std::string consistency : {"bsp", "asp"}) {
    SCOPED_TRACE(consistency);
    LocalCluster cluster(TierCluster(consistency, 1));
    auto clients = cluster.ConnectClients(4);
    constexpr int kClocks = 16;
    std::atomic<int> clock0{0};
    std::thread killer([&] {
      while (clock0.load() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      cluster.aggregator(0).Signal(SIGKILL);
    });
    LocalCluster::RunEach(4, [&](int i) {
      ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {kLength}, 0}}).ok());
      for (int t = 0; t < kClocks; ++t) {
        const std::vector<float> g = Gradient(i, t);
        const Status s = clients[i]->Push("w", g.data(), kLength).Wait();
        ASSERT_TRUE(s.ok()) << s.ToString();
        ASSERT_TRUE(clients[i]->Clock().ok());
        if (i == 0) clock0 = t + 1;
      }
    });
    killer.join();
    ExpectModel(*clients[0], Expected(4, kClocks));
    for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
  }
}

// Requests to an aggregator that are not its group's well-formed pushes get an error reply
// (a stranger's first ones too), and it goes on summing its workers' pushes.
TEST(TierTest, HostileInputToAnAggregatorGetsAnErrorAndItKeepsServing) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  LocalCluster cluster(
      TierCluster("bsp", 1, "", {"--bind=tcp://127.0.0.1:" + std::to_string(port)}));
  auto clients = cluster.ConnectClients(4);
  zmq::context_t ctx;
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::routing_id, "stranger");
  sock.set(zmq::sockopt::rcvtimeo, 5000);
  sock.set(zmq::sockopt::linger, 0);
  sock.connect("tcp://127.0.0.1:" + std::to_string(port));
  auto expect_error = [&](const std::string& what) {
    auto env = Receive(sock, zmq::recv_flags::none, /*routed=*/false);
    ASSERT_TRUE(env.has_value()) << what << ": no answer";
    EXPECT_EQ(env->message.header.type(), proto::ERROR) << what;
    EXPECT_FALSE(env->message.header.error_message().empty()) << what;
  };
  // Garbage instead of a header.
  sock.send(zmq::str_buffer("not a header"), zmq::send_flags::none);
  expect_error("garbage");
  // A pull, which an aggregator does not serve.
  proto::Header pull;
  pull.set_type(proto::PULL);
  pull.set_sender(2);
  Send(sock, pull);
  expect_error("a pull");
  // A push in a worker's name from another connection, with a wrong size, without a rank.
  proto::Header push;
  push.set_type(proto::PUSH);
  push.set_sender(2);
  push.set_partition(0);
  push.set_rank(0);
  push.set_num_elements(1000);
  push.set_incarnation(7);
  push.set_seq(1);
  std::vector<zmq::message_t> small;
  small.emplace_back(16);
  Send(sock, push, std::move(small));
  expect_error("a push in another worker's name");
  push.clear_rank();
  std::vector<zmq::message_t> frame;
  frame.emplace_back(4000);
  Send(sock, push, std::move(frame));
  expect_error("a push without a server rank");
  // It still sums: a bsp run through it is exact.
  RunClocks(clients, 2);
  ExpectModel(*clients[0], Expected(4, 2));
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

// Pushes compressed with a codec are decoded, summed and encoded again at the aggregator: fp16
// carries these small integers exactly, so the sums are exact and one per partition and clock.
TEST(TierTest, CompressedPushesAreSummedAndEncodedAgainWithTheirCodec) {
  const std::string log = std::filesystem::temp_directory_path() /
                          ("hetps-tier-fp16-" + std::to_string(getpid()) + ".log");
  constexpr int kClocks = 3;
  {
    LocalCluster cluster(TierCluster("bsp", 1, log));
    auto clients = cluster.ConnectClients(4, [](ClientOptions& o) { o.push_codec = "fp16"; });
    RunClocks(clients, kClocks);
    ExpectModel(*clients[0], Expected(4, kClocks));
    for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
    for (int i = 0; i < 2; ++i) cluster.server(i).WaitExit(std::chrono::seconds(20));
  }
  const std::string text = Slurp(log);
  std::filesystem::remove(log);
  EXPECT_EQ(ServedPushes(text), 3 * kClocks) << text;
}

// The servers' rules for an aggregator's sums (docs/aggregation-tier.md, "Exactly once"), told
// by a hand-made aggregator: a sum is applied whole or not at all, only as each worker's next
// push, and marks each push applied; a pull in a worker's name is that worker's read.
class HandMadeAggregator {
 public:
  HandMadeAggregator(const std::string& scheduler) {
    link_ = std::make_unique<SchedulerLink>(ctx_, scheduler, proto::AGGREGATOR, "tcp://127.0.0.1:9",
                                            200);
  }
  Status Join() {
    static const std::atomic<bool> never{false};
    if (Status s = link_->Join(never, 20000); !s.ok()) return s;
    server_.emplace(ctx_, zmq::socket_type::dealer);
    server_->set(zmq::sockopt::routing_id, NodeIdentity(link_->id()));
    server_->set(zmq::sockopt::rcvtimeo, 10000);
    server_->set(zmq::sockopt::linger, 0);
    server_->connect(link_->view().servers().at(0).address());
    return Status();
  }
  const ClusterView& view() const { return link_->view(); }
  // Sends a sum of `pushes` (worker id, incarnation, seq) of `values` on partition 0; the reply.
  proto::Header Sum(const std::vector<std::tuple<int32_t, uint64_t, int64_t>>& pushes,
                    const std::vector<float>& values) {
    proto::Header h;
    h.set_type(proto::PUSH);
    h.set_sender(link_->id());
    h.set_request_id(++request_);
    h.set_partition(0);
    h.set_dtype(proto::FLOAT32);
    h.set_num_elements(static_cast<int64_t>(values.size()));
    for (const auto& [w, incarnation, seq] : pushes) {
      proto::Contribution& c = *h.add_contributions();
      c.set_worker(w);
      c.set_incarnation(incarnation);
      c.set_seq(seq);
    }
    std::vector<zmq::message_t> payload;
    payload.emplace_back(values.data(), values.size() * sizeof(float));
    return Ask(h, std::move(payload));
  }
  proto::Header Ask(proto::Header h, std::vector<zmq::message_t> payload = {}) {
    link_->MaybeHeartbeat();
    h.set_request_id(++request_);
    Send(*server_, h, std::move(payload));
    auto env = Receive(*server_, zmq::recv_flags::none, /*routed=*/false);
    if (!env) return {};
    last_payload_ = std::move(env->message.payload);
    return env->message.header;
  }
  const std::vector<zmq::message_t>& last_payload() const { return last_payload_; }

 private:
  zmq::context_t ctx_;
  std::unique_ptr<SchedulerLink> link_;
  std::optional<zmq::socket_t> server_;
  uint64_t request_ = 0;
  std::vector<zmq::message_t> last_payload_;
};

TEST(TierTest, AServerAppliesASumWholeOnlyAsEveryWorkersNextPushAndMarksEach) {
  LocalCluster cluster({.servers = 1,
                        .workers = 2,
                        .scheduler_flags = {"--aggregators=1"},
                        .server_flags = {"--optimizer=sgd:lr=1", "--init=zeros"}});
  HandMadeAggregator aggregator(cluster.endpoint());
  std::vector<std::unique_ptr<Client>> clients;
  std::thread joining([&] {
    clients = cluster.ConnectClients(2, [](ClientOptions& o) {
      o.tier = false;  // the hand-made one sums nothing for them
    });
  });
  ASSERT_TRUE(aggregator.Join().ok());
  joining.join();
  LocalCluster::RunEach(2, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {4}, 0}}).ok());
  });
  const int32_t a = WorkerId(aggregator.view(), 0), b = WorkerId(aggregator.view(), 1);
  const std::vector<float> ones(4, 1.0f);
  auto ok = [](const proto::Header& h) { return h.type() == proto::PUSH_REPLY; };
  proto::Header r = aggregator.Sum({{a, 11, 1}, {b, 22, 1}}, ones);
  EXPECT_TRUE(ok(r) && !r.duplicate()) << r.ShortDebugString();
  r = aggregator.Sum({{a, 11, 1}, {b, 22, 1}}, ones);  // again: applied before
  EXPECT_TRUE(ok(r) && r.duplicate()) << r.ShortDebugString();
  r = aggregator.Sum({{a, 11, 2}, {b, 22, 1}}, ones);  // partly applied
  EXPECT_EQ(r.error(), proto::FAILED_PRECONDITION) << r.ShortDebugString();
  r = aggregator.Sum({{a, 11, 3}}, ones);  // would skip a's push 2
  EXPECT_EQ(r.error(), proto::FAILED_PRECONDITION) << r.ShortDebugString();
  r = aggregator.Sum({{a, 11, 2}}, ones);
  EXPECT_TRUE(ok(r) && !r.duplicate()) << r.ShortDebugString();
  r = aggregator.Sum({{999, 33, 1}}, ones);  // no such worker
  EXPECT_EQ(r.error(), proto::INVALID_ARGUMENT) << r.ShortDebugString();
  // Two sums applied: sgd with lr 1 from zeros.
  proto::Header pull;
  pull.set_type(proto::PULL);
  pull.set_partition(0);
  pull.set_sender(AggregatorId(aggregator.view()));
  r = aggregator.Ask(pull);  // in nobody's name
  EXPECT_EQ(r.type(), proto::ERROR) << r.ShortDebugString();
  pull.add_contributions()->set_worker(a);
  r = aggregator.Ask(pull);
  ASSERT_EQ(r.type(), proto::PULL_REPLY) << r.ShortDebugString();
  ASSERT_EQ(aggregator.last_payload().size(), 1u);
  std::vector<float> w(4);
  std::memcpy(w.data(), aggregator.last_payload()[0].data(), sizeof(float) * 4);
  EXPECT_EQ(w, std::vector<float>(4, -2.0f));
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

}  // namespace
}  // namespace hetps::testing
