// The aggregation tier's switch emulation (docs/aggregation-tier.md, aggregator/switch_sum.h):
// workers stream bsp pushes to a hetps-aggregator --switch_chunk in fixed-point chunks, summed
// in a bounded pool of slots, and the servers apply each partition's sum once per clock,
// exactly (the pushed values are multiples of the fixed point's unit, so the integer sums are
// the real sums); its slots hold a few chunks, never a tensor; a switch killed mid-stream, or a
// worker that does not push, leaves the workers pushing directly with nothing lost or doubled.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "common/message.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

constexpr int64_t kLength = 300000;  // three partitions of <= 400 KB over two servers
constexpr int kChunk = 2048, kSlots = 4;

// A switch with chunks of 8 KiB, 4 slots, values clipped to +-64: the 4 workers' fixed point
// has 24 bits, a unit of 2^-18, and every value pushed below is a multiple of it.
ClusterOptions SwitchCluster(const std::string& log_file = "", int64_t partition_bytes = 400000,
                             int window_ms = 20000) {
  ClusterOptions o;
  o.servers = 2;
  o.workers = 4;
  o.scheduler_flags = {fmt::format("--partition_bytes={}", partition_bytes),
                       "--heartbeat_timeout_ms=1500"};
  o.server_flags = {"--consistency=bsp", "--optimizer=sgd:lr=1", "--init=zeros"};
  o.aggregators = 1;
  o.aggregator_flags = {fmt::format("--switch_chunk={}", kChunk),
                        fmt::format("--switch_slots={}", kSlots), "--switch_clip=64",
                        fmt::format("--window_ms={}", window_ms)};
  o.log_file = log_file;
  return o;
}

// Worker i's push at clock t: (i + 1) * (t + 1) / 4 everywhere, minus j % 5 at every 997th
// element: a chunk summed into the wrong place, or a sign lost, shows.
std::vector<float> Gradient(int i, int t, int64_t n = kLength) {
  std::vector<float> g(n, static_cast<float>((i + 1) * (t + 1)) / 4);
  for (int64_t j = 0; j < n; j += 997) g[j] -= static_cast<float>(j % 5);
  return g;
}

// sgd with lr 1 from zeros after the given (worker, clock) pushes.
std::vector<float> Expected(const std::vector<std::pair<int, int>>& pushes, int64_t n = kLength) {
  std::vector<double> w(n, 0.0);
  for (const auto& [i, t] : pushes) {
    const std::vector<float> g = Gradient(i, t, n);
    for (int64_t j = 0; j < n; ++j) w[j] -= g[j];
  }
  return {w.begin(), w.end()};
}

std::vector<std::pair<int, int>> Every(int workers, int clocks) {
  std::vector<std::pair<int, int>> out;
  for (int t = 0; t < clocks; ++t) {
    for (int i = 0; i < workers; ++i) out.emplace_back(i, t);
  }
  return out;
}

int64_t Wrong(Client& c, const std::vector<float>& want) {
  std::vector<float> got(want.size());
  EXPECT_TRUE(c.Pull("w", got.data(), static_cast<int64_t>(got.size())).Wait().ok());
  int64_t wrong = 0;
  for (size_t j = 0; j < got.size(); ++j) wrong += got[j] != want[j];
  return wrong;
}

int64_t Matched(const std::string& text, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(pattern)) ? std::stoll(m[1]) : -1;
}

// The aggregator's entry of /api/status once its report shows `pushes` pushes.
nlohmann::json AggregatorStatus(LocalCluster& cluster, int64_t pushes) {
  nlohmann::json a;
  for (int i = 0; i < 100; ++i) {
    Ran status = Shell(Bin("hetps") + " status --json --scheduler=" + cluster.endpoint());
    auto j = nlohmann::json::parse(status.output, nullptr, false);
    if (!j.is_discarded() && j.contains("aggregators") && !j["aggregators"].empty()) {
      a = j["aggregators"][0];
      if (a.value("pushes", int64_t{0}) >= pushes) return a;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return a;
}

TEST(SwitchTest, BspPushesStreamInChunksAndSumExactlyOncePerPartitionAndClock) {
  const std::string log =
      std::filesystem::temp_directory_path() / ("hetps-switch-" + std::to_string(getpid()));
  constexpr int kClocks = 5;
  nlohmann::json status;
  {
    LocalCluster cluster(SwitchCluster(log));
    auto clients = cluster.ConnectClients(4);
    LocalCluster::RunEach(4, [&](int i) {
      ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {kLength}, 0}}).ok());
      std::vector<float> w(kLength);
      for (int t = 0; t < kClocks; ++t) {
        const std::vector<float> g = Gradient(i, t);
        ASSERT_TRUE(clients[i]->Push("w", g.data(), kLength).Wait().ok());
        ASSERT_TRUE(clients[i]->Clock().ok());
        ASSERT_TRUE(clients[i]->Pull("w", w.data(), kLength).Wait().ok());
        EXPECT_TRUE(w == Expected(Every(4, t + 1))) << "worker " << i << " after clock " << t;
      }
    });
    EXPECT_EQ(Wrong(*clients[0], Expected(Every(4, kClocks))), 0);
    status = AggregatorStatus(cluster, 4 * 3 * kClocks);
    Ran table = Shell(Bin("hetps") + " status --scheduler=" + cluster.endpoint());
    EXPECT_NE(table.output.find("SLOTS"), std::string::npos) << table.output;
    for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
    for (int i = 0; i < 2; ++i) cluster.server(i).WaitExit(std::chrono::seconds(20));
  }
  const std::string text = Slurp(log);
  std::filesystem::remove(log);
  // One push per partition and clock reached the servers: 3 x 5, against 4 x 3 x 5 directly.
  int64_t served = 0;
  static const std::regex stopped(R"(stopped: (\d+) pushes, \d+ pulls served)");
  for (std::sregex_iterator it(text.begin(), text.end(), stopped), end; it != end; ++it) {
    served += std::stoll((*it)[1]);
  }
  EXPECT_EQ(served, 3 * kClocks) << text;
  // The group's pulls of a clock are shared: one per partition (and client 0's last).
  EXPECT_LE(Matched(text, R"(answered with (\d+) from the servers)"), 3 * kClocks + 3) << text;
  EXPECT_EQ(Matched(text, R"(stopped: (\d+) pushes summed)"), 4 * 3 * kClocks) << text;
  // The three partitions of 100000, 100000 and 100000 elements: 49 chunks of 2048 words each.
  ASSERT_FALSE(status.is_null()) << text;
  EXPECT_EQ(status["switch_chunk"], kChunk);
  EXPECT_EQ(status["chunks"], 3 * 49 * kClocks) << status.dump();
  // The slots held at most 4 chunks (and their shadow copies) per partition being summed,
  // never a partition: 3 x 4 x 2048 x 2 words.
  const int64_t peak = status["peak_slot_bytes"];
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, 3 * kSlots * kChunk * 2 * 4) << status.dump();
  EXPECT_LT(peak, kLength * 4 / 4);
}

// The aggregator's own memory: a 64 MiB tensor streamed through it by 4 workers raises its
// resident set by far less than one copy of the tensor (a whole-push aggregator holds several).
TEST(SwitchTest, StreamingNeverHoldsAWholeTensor) {
  constexpr int64_t kBig = int64_t{16} << 20;  // 64 MiB of float32, one partition
  LocalCluster cluster(SwitchCluster("", kBig * 4));
  auto clients = cluster.ConnectClients(4);
  auto rss_kb = [&](const char* field) {
    std::ifstream in(fmt::format("/proc/{}/status", cluster.aggregator(0).pid()));
    std::string line;
    while (std::getline(in, line)) {
      if (line.starts_with(field)) return int64_t{std::stoll(line.substr(std::strlen(field)))};
    }
    return int64_t{-1};
  };
  const int64_t before = rss_kb("VmRSS:");
  ASSERT_GT(before, 0);
  LocalCluster::RunEach(4, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {kBig}, 0}}).ok());
    for (int t = 0; t < 2; ++t) {
      const std::vector<float> g = Gradient(i, t, kBig);
      ASSERT_TRUE(clients[i]->Push("w", g.data(), kBig).Wait().ok());
      ASSERT_TRUE(clients[i]->Clock().ok());
    }
  });
  const int64_t peak = rss_kb("VmHWM:");
  std::printf("aggregator resident: %lld KiB before, peak %lld KiB (the tensor: %lld KiB)\n",
              static_cast<long long>(before), static_cast<long long>(peak),
              static_cast<long long>(kBig * 4 / 1024));
  EXPECT_LT(peak - before, kBig * 4 / 1024 / 4);
  EXPECT_EQ(Wrong(*clients[0], Expected(Every(4, 2), kBig)), 0);
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

// The switch is SIGKILLed while chunks stream: every push at it goes to the servers directly
// (those its sums applied are answered duplicate), and the model is the exact sum.
TEST(SwitchTest, ASwitchKilledMidStreamLeavesItsWorkersPushingDirectlyExactly) {
  LocalCluster cluster(SwitchCluster());
  auto clients = cluster.ConnectClients(4);
  constexpr int kClocks = 12;
  std::atomic<int> clock0{0};
  std::thread killer([&] {
    while (clock0.load() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(2));
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
  EXPECT_EQ(Wrong(*clients[0], Expected(Every(4, kClocks))), 0);
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

// Worker 3 skips its push of clock 1: the others' streams of that clock make no progress, the
// switch gives them up after its window and they push directly; the sum is exact (without the
// skipped push) and later clocks are exact too.
TEST(SwitchTest, AStreamAMemberDoesNotJoinIsGivenUpAndPushedDirectly) {
  LocalCluster cluster(SwitchCluster("", 400000, /*window_ms=*/500));
  auto clients = cluster.ConnectClients(4);
  constexpr int kClocks = 3;
  LocalCluster::RunEach(4, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {kLength}, 0}}).ok());
    for (int t = 0; t < kClocks; ++t) {
      if (i != 3 || t != 1) {
        const std::vector<float> g = Gradient(i, t);
        const Status s = clients[i]->Push("w", g.data(), kLength).Wait();
        ASSERT_TRUE(s.ok()) << s.ToString();
      }
      ASSERT_TRUE(clients[i]->Clock().ok());
    }
  });
  std::vector<std::pair<int, int>> pushed = Every(4, kClocks);
  std::erase(pushed, std::pair<int, int>{3, 1});
  EXPECT_EQ(Wrong(*clients[0], Expected(pushed)), 0);
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

// Chunks that are not a group member's well-formed ones get an error, and the switch goes on.
TEST(SwitchTest, MalformedChunksGetAnErrorAndTheSwitchKeepsSumming) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  ClusterOptions o = SwitchCluster();
  o.aggregator_flags.push_back("--bind=tcp://127.0.0.1:" + std::to_string(port));
  LocalCluster cluster(o);
  auto clients = cluster.ConnectClients(4);
  zmq::context_t ctx;
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::rcvtimeo, 5000);
  sock.set(zmq::sockopt::linger, 0);
  sock.connect("tcp://127.0.0.1:" + std::to_string(port));
  proto::Header chunk;
  chunk.set_type(proto::PUSH);
  chunk.set_sender(2);
  chunk.set_partition(0);
  chunk.set_rank(0);
  chunk.set_num_elements(16);
  chunk.mutable_chunk()->set_count(1);
  chunk.mutable_chunk()->set_elements(16);
  std::vector<zmq::message_t> frame;
  frame.emplace_back(64);
  Send(sock, chunk, std::move(frame));
  auto env = Receive(sock, zmq::recv_flags::none, /*routed=*/false);
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->message.header.type(), proto::ERROR);
  EXPECT_FALSE(env->message.header.error_message().empty());
  LocalCluster::RunEach(4, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {kLength}, 0}}).ok());
    const std::vector<float> g = Gradient(i, 0);
    ASSERT_TRUE(clients[i]->Push("w", g.data(), kLength).Wait().ok());
    ASSERT_TRUE(clients[i]->Clock().ok());
  });
  EXPECT_EQ(Wrong(*clients[0], Expected(Every(4, 1))), 0);
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

}  // namespace
}  // namespace hetps::testing
