// Faults on a live cluster: a worker killed with SIGKILL, a server killed with SIGKILL, and
// SIGTERM to each daemon.
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <thread>

#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

TEST(NodeFailureTest, KilledWorkerDoesNotLeaveOthersStuckInABarrier) {
  LocalCluster cluster(
      {.servers = 1, .workers = 3, .scheduler_flags = {"--heartbeat_timeout_ms=1000"}});
  // A real worker process running the synthetic workload for a long time (it declares layer0).
  auto victim = cluster.StartWorker({"--iterations=100000000", "--tensor_elements=1000",
                                     "--heartbeat_interval_ms=200", "--progress_every=1000000"});
  auto clients = cluster.ConnectClients(2);
  LocalCluster::RunEach(2, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"layer0", {1000}, 0}}).ok());
  });
  // Both survivors wait in a barrier the victim never reaches; then the victim is killed.
  auto barriers = std::async(std::launch::async, [&] {
    std::vector<Status> results(2);
    LocalCluster::RunEach(2, [&](int i) { results[i] = clients[i]->Barrier(); });
    return results;
  });
  EXPECT_EQ(barriers.wait_for(500ms), std::future_status::timeout) << "barrier opened early";
  const auto killed_at = std::chrono::steady_clock::now();
  victim->Signal(SIGKILL);
  ASSERT_EQ(barriers.wait_for(15s), std::future_status::ready) << "survivors stuck in the barrier";
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  for (const Status& s : barriers.get()) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(waited, 0.9);  // released by failure detection, not by accident
  // The survivors go on: another barrier, and the model is still served.
  LocalCluster::RunEach(2, [&](int i) { EXPECT_TRUE(clients[i]->Barrier().ok()); });
  std::vector<float> w(1000);
  EXPECT_TRUE(clients[0]->Pull("layer0", w.data(), 1000).Wait().ok());
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
  auto st = cluster.scheduler().WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "scheduler did not finish after the survivors left";
  EXPECT_EQ(WEXITSTATUS(*st), 0);
}

TEST(NodeFailureTest, DeadServerFailsRequestsInsteadOfHanging) {
  LocalCluster cluster(
      {.servers = 2,
       .workers = 1,
       .scheduler_flags = {"--heartbeat_timeout_ms=1000", "--partition_bytes=40000"}});
  auto clients = cluster.ConnectClients(1);
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTensors({{"w", {100000}, 0}}).ok());  // 10 partitions over both servers
  std::vector<float> g(100000, 0.1f);
  ASSERT_TRUE(c.Push("w", g.data(), 100000).Wait().ok());
  cluster.server(1).Signal(SIGKILL);
  auto pushed =
      std::async(std::launch::async, [&] { return c.Push("w", g.data(), 100000).Wait(); });
  ASSERT_EQ(pushed.wait_for(15s), std::future_status::ready) << "push hung on a dead server";
  Status s = pushed.get();
  EXPECT_EQ(s.code(), proto::UNAVAILABLE) << s.ToString();
  // Later requests to it fail at once.
  EXPECT_EQ(c.Pull("w", g.data(), 100000).Wait().code(), proto::UNAVAILABLE);
  EXPECT_TRUE(c.Finish().ok());
}

TEST(NodeFailureTest, LostSchedulerIsAnErrorNotAHang) {
  LocalCluster cluster(
      {.servers = 1, .workers = 1, .scheduler_flags = {"--heartbeat_timeout_ms=1000"}});
  auto clients = cluster.ConnectClients(1);
  ASSERT_TRUE(clients[0]->DeclareTensors({{"w", {10}, 0}}).ok());
  cluster.scheduler().Signal(SIGKILL);
  auto barrier = std::async(std::launch::async, [&] { return clients[0]->Barrier(); });
  ASSERT_EQ(barrier.wait_for(15s), std::future_status::ready) << "barrier hung without a scheduler";
  EXPECT_EQ(barrier.get().code(), proto::UNAVAILABLE);
  auto st = cluster.server(0).WaitExit(15s);
  ASSERT_TRUE(st.has_value()) << "server kept running without a scheduler";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1);
}

// A server that stalls past the heartbeat timeout (SIGSTOP) is declared dead and routed around;
// once it runs again and hears so, it stops (exit 1) instead of serving a cluster that no
// longer counts on it, so a restart on its data dir can take its rank over.
TEST(NodeFailureTest, AServerDeclaredDeadWhileStalledStopsOnceItHearsSo) {
  LocalCluster cluster(
      {.servers = 2, .workers = 1, .scheduler_flags = {"--heartbeat_timeout_ms=800"}});
  auto clients = cluster.ConnectClients(1);
  ASSERT_TRUE(clients[0]->DeclareTensors({{"w", {10}, 0}}).ok());
  cluster.server(0).Signal(SIGSTOP);
  std::this_thread::sleep_for(1500ms);
  cluster.server(0).Signal(SIGCONT);
  auto st = cluster.server(0).WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "a server declared dead went on serving";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << "status " << *st;
  EXPECT_FALSE(cluster.server(1).WaitExit(1ms).has_value()) << "the other server stopped";
  EXPECT_TRUE(clients[0]->Finish().ok());
}

TEST(NodeFailureTest, DaemonsExitCleanlyOnSigterm) {
  LocalCluster cluster({.servers = 1, .workers = 1});
  const std::string output = cluster.Path("worker.out");
  auto worker = cluster.StartWorker(
      {"--iterations=100000000", "--tensor_elements=1000", "--progress_every=100"}, output);
  // Joined and iterating (not a fixed sleep: a loaded machine may take seconds to get there).
  for (int i = 0; i < 300; ++i) {
    std::ifstream in(output);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text.find("iter 100/") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  worker->Signal(SIGTERM);
  auto ws = worker->WaitExit(10s);
  ASSERT_TRUE(ws.has_value()) << "worker ignored SIGTERM";
  EXPECT_TRUE(WIFEXITED(*ws)) << "worker died instead of exiting";
  cluster.server(0).Signal(SIGTERM);
  auto ss = cluster.server(0).WaitExit(10s);
  ASSERT_TRUE(ss.has_value()) << "server ignored SIGTERM";
  EXPECT_TRUE(WIFEXITED(*ss) && WEXITSTATUS(*ss) == 0);
  cluster.scheduler().Signal(SIGTERM);
  auto cs = cluster.scheduler().WaitExit(10s);
  ASSERT_TRUE(cs.has_value()) << "scheduler ignored SIGTERM";
  EXPECT_TRUE(WIFEXITED(*cs) && WEXITSTATUS(*cs) == 0);
}

}  // namespace
}  // namespace hetps::testing
