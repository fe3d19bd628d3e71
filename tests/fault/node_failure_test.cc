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
  // Released by failure detection, not by accident: the victim is declared dead 1000 ms after
  // its last heartbeat, which went out up to 200 ms (its interval) before the kill.
  EXPECT_GE(waited, 0.75);
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
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  // Later requests to it fail at once.
  EXPECT_EQ(c.Pull("w", g.data(), 100000).Wait().code(), StatusCode::kUnavailable);
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
  EXPECT_EQ(barrier.get().code(), StatusCode::kUnavailable);
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

// Whether process `pid` has exited (a zombie or reaped).
bool Exited(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] == 'Z' ||
         text[paren + 2] == 'X';
}

// Through cross memory attach a server writes a pull's values into the caller's array itself.
// A server stalled past the heartbeat timeout is declared dead, yet may run again and write:
// the pull fails only once the server's process exited, never while it could still write.
TEST(NodeFailureTest, ArraysLentToAStalledServerComeBackOnlyOnceItExits) {
  LocalCluster cluster(
      {.servers = 1, .workers = 1, .scheduler_flags = {"--heartbeat_timeout_ms=800"}});
  auto clients = cluster.ConnectClients(1, [](ClientOptions& o) { o.transport = "cma"; });
  Client& c = *clients[0];
  const int64_t n = 1 << 16;  // 256 KiB: lent; `small` goes in a frame
  ASSERT_TRUE(c.DeclareTensors({{"w", {n}, 0}, {"small", {10}, 1}}).ok());
  std::vector<float> values(n), few(10);
  ASSERT_TRUE(c.Pull("w", values.data(), n).Wait().ok());
  ASSERT_EQ(c.stats().shared_memory_bytes, n * 4) << "not through cross memory attach";
  const pid_t server = cluster.server(0).pid();
  cluster.server(0).Signal(SIGSTOP);
  Ticket lent = c.Pull("w", values.data(), n);
  Ticket framed = c.Pull("small", few.data(), 10);
  // The framed pull fails once the server is declared dead; the lent one waits.
  auto declared = std::async(std::launch::async, [&] { return framed.Wait(); });
  ASSERT_EQ(declared.wait_for(15s), std::future_status::ready) << "never declared dead";
  EXPECT_EQ(declared.get().code(), StatusCode::kUnavailable);
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(lent.Done()) << "an array handed back while the server could still write it";
  cluster.server(0).Signal(SIGCONT);  // it runs again, hears it was declared dead and exits
  auto failed = std::async(std::launch::async, [&] {
    Status s = lent.Wait();
    return std::make_pair(s, Exited(server));
  });
  ASSERT_EQ(failed.wait_for(15s), std::future_status::ready) << "the pull never came back";
  const auto [status, exited] = failed.get();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
  EXPECT_TRUE(exited) << "handed back before the server exited";
  EXPECT_TRUE(cluster.server(0).WaitExit(10s).has_value());
  EXPECT_TRUE(c.Finish().ok());
}

// A client that stops with requests unanswered (past its grace) asks the servers to let go of
// the arrays they were lent (CMA_REVOKE) and returns only once they did: not while the server
// is stalled, at once once it runs.
TEST(NodeFailureTest, AStoppingClientTakesItsLentArraysBackOnlyOnceTheServerLetsGo) {
  LocalCluster cluster(
      {.servers = 1, .workers = 1, .scheduler_flags = {"--heartbeat_timeout_ms=60000"}});
  auto clients = cluster.ConnectClients(1, [](ClientOptions& o) { o.transport = "cma"; });
  Client& c = *clients[0];
  const int64_t n = 1 << 16;
  ASSERT_TRUE(c.DeclareTensors({{"w", {n}, 0}}).ok());
  std::vector<float> values(n);
  ASSERT_TRUE(c.Pull("w", values.data(), n).Wait().ok());
  cluster.server(0).Signal(SIGSTOP);
  Ticket lent = c.Pull("w", values.data(), n);
  auto finished = std::async(std::launch::async, [&] { return c.Finish(); });
  // Past the client's grace (5 s) its requests failed, but the array is still lent.
  EXPECT_EQ(finished.wait_for(6500ms), std::future_status::timeout)
      << "the client stopped while the server could still write an array";
  EXPECT_FALSE(lent.Done());
  // Waiting for the revocation's answer is a sleep on the server's socket, not a spin.
  const double cpu_before = ProcessCpuSeconds();
  std::this_thread::sleep_for(1s);
  EXPECT_LT(ProcessCpuSeconds() - cpu_before, 0.3) << "the client spins while it waits";
  EXPECT_FALSE(lent.Done());
  cluster.server(0).Signal(SIGCONT);
  ASSERT_EQ(finished.wait_for(15s), std::future_status::ready) << "the client never stopped";
  (void)finished.get();
  EXPECT_TRUE(lent.Done());
  EXPECT_FALSE(lent.Wait().ok());
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
