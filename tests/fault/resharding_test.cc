// Live re-sharding (hetps ctl move, docs/resharding.md) with exact sums. Two workers push ones
// (SGD, lr 1, from zeros: every element of a tensor ends at minus the pushes applied to it) and
// clock, under asp and under bsp, while an operator moves partitions between the two server
// ranks and back: "big" (1.2 MB, served by an apply thread) and "small" (served by the network
// thread). At the end every tensor holds exactly the sum of all acknowledged pushes, each
// counted once, and the servers hold the partitions where the last move put them. A move whose
// target freezes is called off, and its partition serves from its source again, exactly.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/fault/exact_sums.h"
#include "tests/integration/local_cluster.h"
#include "tests/scratch_dir.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kWorkers = 2;
constexpr int kSteps = 40;                     // clocks per worker
constexpr int kTotal = kWorkers * kSteps * 2;  // acknowledged pushes of a whole run
// Partition ids (tensors in name order, one partition each) and the ranks the rules give them
// (the largest first on the emptiest rank).
constexpr int kBig = 0, kSmall = 1;

ClusterOptions Options(const std::string& consistency) {
  return {.servers = 2,
          .workers = kWorkers,
          .scheduler_flags = {"--heartbeat_timeout_ms=800"},
          .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1", "--heartbeat_interval_ms=100",
                           "--consistency=" + consistency}};
}

std::string Move(int partition, int rank) {
  return "move --partitions=" + std::to_string(partition) + " --to=" + std::to_string(rank);
}

// Per server rank, the partitions its live server reports holding.
std::map<int, int64_t> HeldNow(LocalCluster& cluster) {
  std::map<int, int64_t> held;
  Ran status = Shell(Bin("hetps") + " status --json --scheduler=" + cluster.endpoint());
  auto j = nlohmann::json::parse(status.output, nullptr, false);
  if (j.is_object() && j["servers"].is_array()) {
    for (const auto& s : j["servers"]) {
      if (s["state"] == "alive") held[s["rank"].get<int>()] = s["partitions"].get<int64_t>();
    }
  }
  return held;
}

// The same once it is `want` (servers report with their heartbeats), or after 5 s.
std::map<int, int64_t> Held(LocalCluster& cluster, const std::map<int, int64_t>& want) {
  std::map<int, int64_t> held = HeldNow(cluster);
  for (int tries = 0; tries < 50 && held != want; ++tries) {
    std::this_thread::sleep_for(100ms);
    held = HeldNow(cluster);
  }
  return held;
}

// The process serving server rank `rank`, by the pid the status reports.
int ServerOfRank(LocalCluster& cluster, int rank, int servers = 2) {
  Ran status = Shell(Bin("hetps") + " status --json --scheduler=" + cluster.endpoint());
  auto j = nlohmann::json::parse(status.output, nullptr, false);
  if (!j.is_object() || !j["servers"].is_array()) return -1;
  for (const auto& s : j["servers"]) {
    if (s["rank"].get<int>() != rank || s["state"] != "alive") continue;
    for (int i = 0; i < servers; ++i) {
      if (cluster.server(i).pid() == s["pid"].get<int>()) return i;
    }
  }
  return -1;
}

// Two workers that declare kOnesTensors, then push ones and clock kSteps times, counting
// acknowledged pushes; Finish() checks the sums from both workers' views.
class Pushers {
 public:
  explicit Pushers(LocalCluster& cluster, int recovery_timeout_ms = 0) {
    clients_ = cluster.ConnectClients(
        kWorkers, [&](ClientOptions& o) { o.server_recovery_timeout_ms = recovery_timeout_ms; });
    LocalCluster::RunEach(
        kWorkers, [&](int i) { ASSERT_TRUE(clients_[i]->DeclareTensors(kOnesTensors).ok()); });
    thread_ = std::thread([this] {
      LocalCluster::RunEach(kWorkers,
                            [this](int i) { PushOnes(*clients_[i], i, kSteps, acked_, failed_); });
    });
  }
  ~Pushers() {
    if (thread_.joinable()) thread_.join();
  }
  Client& client(int i) { return *clients_[i]; }
  int acked() const { return acked_.load(); }
  void WaitFor(int acked) const {
    while (acked_.load() < acked && !failed_.load()) std::this_thread::sleep_for(2ms);
  }
  void Finish() {
    thread_.join();
    ASSERT_FALSE(failed_.load());
    ASSERT_EQ(acked_.load(), kTotal);
    LocalCluster::RunEach(kWorkers, [&](int i) { EXPECT_TRUE(clients_[i]->Barrier().ok()); });
    ExpectOnesSums(*clients_[0], kWorkers * kSteps);
    ExpectOnesSums(*clients_[1], kWorkers * kSteps);
    LocalCluster::RunEach(kWorkers, [&](int i) { EXPECT_TRUE(clients_[i]->Finish().ok()); });
  }

 private:
  std::vector<std::unique_ptr<Client>> clients_;
  std::atomic<int> acked_{0};
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

class ReshardingTest : public ::testing::TestWithParam<std::string> {};

// Each partition moves to the other rank and back while both workers push; refused moves
// change nothing.
TEST_P(ReshardingTest, PartitionsMovedWhilePushesFlowKeepExactSums) {
  LocalCluster cluster(Options(GetParam()));
  Pushers pushers(cluster);
  auto wait_for = [&](int n) { pushers.WaitFor(n); };
  // Refused: a rank that does not exist, a partition that does not, one already there.
  EXPECT_NE(cluster.Ctl(Move(kBig, 2)), 0);
  EXPECT_NE(cluster.Ctl(Move(7, 1)), 0);
  EXPECT_NE(cluster.Ctl(Move(kBig, 0)), 0);
  wait_for(kTotal / 5);
  ASSERT_EQ(cluster.Ctl(Move(kBig, 1)), 0);
  EXPECT_NE(cluster.Ctl(Move(kBig, 1)), 0) << "the map did not place it on rank 1";
  EXPECT_EQ(Held(cluster, {{0, 0}, {1, 2}}), (std::map<int, int64_t>{{0, 0}, {1, 2}}));
  wait_for(2 * kTotal / 5);
  ASSERT_EQ(cluster.Ctl(Move(kSmall, 0)), 0);
  EXPECT_EQ(Held(cluster, {{0, 1}, {1, 1}}), (std::map<int, int64_t>{{0, 1}, {1, 1}}));
  wait_for(3 * kTotal / 5);
  ASSERT_EQ(cluster.Ctl(Move(kBig, 0)), 0);
  ASSERT_EQ(cluster.Ctl(Move(kSmall, 1)), 0);
  EXPECT_EQ(Held(cluster, {{0, 1}, {1, 1}}), (std::map<int, int64_t>{{0, 1}, {1, 1}}));
  std::printf("moved four times; %d of %d pushes acknowledged meanwhile\n", pushers.acked(),
              kTotal);
  pushers.Finish();
}

// The target freezes (SIGSTOP) while the partition is on its way: the scheduler declares it
// dead, calls the move off, and the source serves the partition again with every update.
TEST(ReshardingCallOffTest, AMoveWhoseTargetFreezesIsCalledOffAndTheSourceServesAgain) {
  LocalCluster cluster(
      {.servers = 2,
       .workers = 1,
       .scheduler_flags = {"--heartbeat_timeout_ms=800"},
       .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1", "--heartbeat_interval_ms=100"}});
  auto clients = cluster.ConnectClients(1);
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTensors(kOnesTensors).ok());
  std::vector<float> ones(300000, 1.0f), w(300000);
  ASSERT_TRUE(c.Push("big", ones.data(), 300000).Wait().ok());
  const int target = ServerOfRank(cluster, 1);
  ASSERT_GE(target, 0);
  cluster.server(target).Signal(SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(cluster.Ctl(Move(kBig, 1)), 0);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("the move was called off after %.2f s\n", waited);
  EXPECT_LT(waited, 10.0);
  // Served from rank 0 again, with the update it took before the move.
  ASSERT_TRUE(c.Push("big", ones.data(), 300000).Wait().ok());
  ASSERT_TRUE(c.Pull("big", w.data(), 300000).Wait().ok());
  EXPECT_EQ(w[0], -2.0f);
  EXPECT_EQ(w[299999], -2.0f);
  cluster.server(target).Signal(SIGKILL);
}

// Elastic ranks (--max_servers): with 20 partitions over two ranks, a third server joins while
// both workers push and partitions move to it; then rank 0 is drained (its partitions move to
// the others and its server exits cleanly), and the new server is stopped (SIGTERM: it moves
// its partitions off first and exits cleanly). One rank serves everything at the end. Exact.
TEST_P(ReshardingTest, AServerAddedAndTwoDrainedWhilePushesFlowKeepExactSums) {
  LocalCluster cluster(
      {.servers = 2,
       .workers = kWorkers,
       .scheduler_flags = {"--heartbeat_timeout_ms=800", "--max_servers=3",
                           "--partition_bytes=65536"},
       .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1", "--heartbeat_interval_ms=100",
                        "--consistency=" + GetParam()}});
  Pushers pushers(cluster);
  auto wait_for = [&](int n) { pushers.WaitFor(n); };
  const int64_t partitions =
      static_cast<int64_t>(pushers.client(0).shard_map().partitions().size());
  ASSERT_EQ(partitions, 20);
  wait_for(kTotal / 5);
  const int added = cluster.StartServer();
  ASSERT_GE(added, 0);
  std::map<int, int64_t> held;
  for (int tries = 0; tries < 100 && held[2] < partitions / 4; ++tries) {
    std::this_thread::sleep_for(100ms);
    held = HeldNow(cluster);
  }
  std::printf("rank 2 took %lld of %lld partitions\n", static_cast<long long>(held[2]),
              static_cast<long long>(partitions));
  ASSERT_GE(held[2], partitions / 4) << "the new rank took too little";
  wait_for(2 * kTotal / 5);
  const int first = ServerOfRank(cluster, 0, 3);
  ASSERT_GE(first, 0);
  ASSERT_EQ(cluster.Ctl("drain-server --rank=0"), 0);
  auto st = cluster.server(first).WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "the drained server kept running";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  EXPECT_NE(cluster.Ctl("drain-server --rank=0"), 0) << "a retired rank was drained again";
  wait_for(3 * kTotal / 5);
  cluster.server(added).Signal(SIGTERM);
  st = cluster.server(added).WaitExit(30s);
  ASSERT_TRUE(st.has_value()) << "the stopped server kept running";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  EXPECT_EQ(Held(cluster, {{1, partitions}}), (std::map<int, int64_t>{{1, partitions}}));
  pushers.Finish();
}

// Servers with data dirs (the moved state is the target's first checkpoint of it): one end of a
// move freezes mid-move (SIGSTOP), is declared dead, the move is called off, and the frozen
// process is killed and restarted on its data dir; then a move completes and its target is
// killed and restarted on its data dir. The workers wait for the restarts and resend; exact.
class ReshardingCrashTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReshardingCrashTest, AnEndKilledDuringAMoveAndATargetKilledAfterOneRecoverExactly) {
  ScratchDir dir("hetps-reshard");
  LocalCluster cluster(
      {.servers = 2,
       .workers = kWorkers,
       .scheduler_flags = {"--heartbeat_timeout_ms=800"},
       .server_flags = {"--data_dir=" + dir.str() + "/{i}", "--init=zeros", "--optimizer=sgd:lr=1",
                        "--heartbeat_interval_ms=100", "--checkpoint_interval_ms=300"}});
  Pushers pushers(cluster, /*recovery_timeout_ms=*/30000);
  auto wait_for = [&](int n) { pushers.WaitFor(n); };
  auto restart = [&](int i) {
    cluster.server(i).Signal(SIGKILL);
    ASSERT_TRUE(cluster.server(i).WaitExit(10s).has_value());
    std::this_thread::sleep_for(1s);  // declared dead (800 ms) before its successor registers
    cluster.RestartServer(i);
  };
  wait_for(kTotal / 5);
  // "big" (rank 0) to rank 1, with the source or the target frozen.
  const int frozen = ServerOfRank(cluster, GetParam() == "source" ? 0 : 1);
  ASSERT_GE(frozen, 0);
  cluster.server(frozen).Signal(SIGSTOP);
  EXPECT_NE(cluster.Ctl(Move(kBig, 1)), 0);
  restart(frozen);
  wait_for(3 * kTotal / 5);
  ASSERT_EQ(cluster.Ctl(Move(kBig, 1)), 0);
  const int target = ServerOfRank(cluster, 1);
  ASSERT_GE(target, 0);
  wait_for(4 * kTotal / 5);
  restart(target);  // it holds "big" and "small" now, from its data dir
  pushers.Finish();
}

INSTANTIATE_TEST_SUITE_P(End, ReshardingCrashTest, ::testing::Values("source", "target"));

INSTANTIATE_TEST_SUITE_P(Consistency, ReshardingTest, ::testing::Values("asp", "bsp"));

}  // namespace
}  // namespace hetps::testing
