// A scheduler with --data_dir, SIGKILLed and restarted on it, resumes the same cluster: while it
// is down the data plane goes on (for longer than the failure-detection timeout, and no node
// stops); once it is back, a barrier a worker was waiting in completes (the worker asks again),
// a new worker can join, and the run ends cleanly. A scheduler data dir of another cluster
// shape, or a folder that is not one, is refused naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST(SchedulerRestartTest, ARestartedSchedulerResumesTheClusterAndNoNodeStops) {
  ScratchDir dir("hetps-sched");
  LocalCluster cluster(
      {.servers = 2,
       .workers = 2,
       .scheduler_flags = {"--heartbeat_timeout_ms=600", "--data_dir=" + dir.str() + "/scheduler"},
       .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1"}});
  auto clients = cluster.ConnectClients(2);
  LocalCluster::RunEach(2, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {1000}, 0}}).ok());
  });
  std::vector<float> ones(1000, 1.0f);
  // Worker 0 waits in a barrier that worker 1 has not reached when the scheduler dies.
  auto barrier = std::async(std::launch::async, [&] { return clients[0]->Barrier(); });
  std::this_thread::sleep_for(200ms);
  cluster.scheduler().Signal(SIGKILL);
  ASSERT_TRUE(cluster.scheduler().WaitExit(5s).has_value());
  // Three heartbeat timeouts without a scheduler: pushes and pulls go on, no node stops.
  int pushes = 0;
  for (int i = 0; i < 18; ++i, ++pushes) {
    ASSERT_TRUE(clients[1]->Push("w", ones.data(), 1000).Wait().ok()) << "push " << i;
    std::this_thread::sleep_for(100ms);
  }
  for (int s = 0; s < 2; ++s) {
    EXPECT_FALSE(cluster.server(s).WaitExit(1ms).has_value()) << "server " << s << " stopped";
  }
  EXPECT_EQ(barrier.wait_for(0ms), std::future_status::timeout);
  cluster.RestartScheduler();
  // Worker 1 reaches the barrier; worker 0's, sent to the dead scheduler, was sent again.
  EXPECT_TRUE(clients[1]->Barrier().ok());
  ASSERT_EQ(barrier.wait_for(10s), std::future_status::ready) << "the barrier never completed";
  EXPECT_TRUE(barrier.get().ok());
  // A worker joins the resumed cluster and reads every push.
  auto third = Client::Connect(cluster.ClientOpts());
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  ASSERT_TRUE((*third)->DeclareTensors({{"w", {1000}, 0}}).ok());
  std::vector<float> w(1000);
  ASSERT_TRUE((*third)->Pull("w", w.data(), 1000).Wait().ok());
  EXPECT_EQ(w[0], -static_cast<float>(pushes));
  EXPECT_TRUE((*third)->Finish().ok());
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
  auto st = cluster.scheduler().WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "the resumed scheduler did not end the run";
  EXPECT_EQ(WEXITSTATUS(*st), 0);
  for (int s = 0; s < 2; ++s) {
    auto server = cluster.server(s).WaitExit(10s);
    ASSERT_TRUE(server.has_value());
    EXPECT_EQ(WEXITSTATUS(*server), 0);
  }
}

// What a restarted scheduler sends to a node whose connection is not back yet is held and
// delivered, not dropped: the server is frozen across the restart, a worker leaves meanwhile,
// and the server still learns of it (NODE_LEFT), so BSP lets the other worker go on.
TEST(SchedulerRestartTest, MessagesToANodeNotYetReconnectedAreDeliveredOnceItIs) {
  ScratchDir dir("hetps-sched-held");
  LocalCluster cluster(
      {.servers = 1,
       .workers = 2,
       .scheduler_flags = {"--heartbeat_timeout_ms=5000", "--data_dir=" + dir.str() + "/scheduler"},
       .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1", "--consistency=bsp"}});
  auto clients = cluster.ConnectClients(2);
  LocalCluster::RunEach(2, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTensors({{"w", {100}, 0}}).ok());
  });
  std::vector<float> ones(100, 1.0f), w(100);
  LocalCluster::RunEach(2, [&](int i) {
    for (int c = 0; c < 3; ++c) {
      ASSERT_TRUE(clients[i]->Push("w", ones.data(), 100).Wait().ok());
      ASSERT_TRUE(clients[i]->Clock().ok());
      ASSERT_TRUE(clients[i]->Pull("w", w.data(), 100).Wait().ok());
    }
  });
  cluster.server(0).Signal(SIGSTOP);  // its connection to the new scheduler cannot come up
  cluster.scheduler().Signal(SIGKILL);
  ASSERT_TRUE(cluster.scheduler().WaitExit(5s).has_value());
  cluster.RestartScheduler();
  ASSERT_TRUE(clients[1]->Finish().ok());  // NODE_LEFT to the frozen server: held
  cluster.server(0).Signal(SIGCONT);
  // Worker 0 goes on alone: each clock's round closes only once the server stopped counting
  // worker 1.
  auto alone = std::async(std::launch::async, [&] {
    for (int c = 0; c < 3; ++c) {
      if (!clients[0]->Push("w", ones.data(), 100).Wait().ok()) return false;
      if (!clients[0]->Clock().ok()) return false;
      if (!clients[0]->Pull("w", w.data(), 100).Wait().ok()) return false;
    }
    return true;
  });
  const bool went_on = alone.wait_for(20s) == std::future_status::ready;
  if (!went_on) cluster.server(0).Signal(SIGKILL);  // fails the waiting pull: the test ends
  ASSERT_TRUE(went_on) << "the server never heard that worker 1 left";
  EXPECT_TRUE(alone.get());
  EXPECT_EQ(w[0], -9.0f);
  EXPECT_TRUE(clients[0]->Finish().ok());
}

// Runs hetps-scheduler with `flags` until it exits; returns (exit code, what it printed).
std::pair<int, std::string> RunScheduler(const std::vector<std::string>& flags,
                                         const std::string& out) {
  Supervisor supervisor({});
  std::vector<std::string> argv = {Bin("hetps-scheduler"), "--bind=tcp://127.0.0.1:*"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto p = supervisor.Start("scheduler", "scheduler", argv, out);
  EXPECT_TRUE(p.ok());
  if (!p.ok()) return {-1, ""};
  auto st = supervisor.WaitExit(**p, 10s);
  if (!st.has_value()) {
    kill((*p)->pid, SIGKILL);
    supervisor.WaitExit(**p, 10s);
  }
  std::stringstream printed;
  printed << std::ifstream(out).rdbuf();
  return {st.has_value() ? WEXITSTATUS(*st) : -1, printed.str()};
}

TEST(SchedulerRestartTest, ADataDirOfAnotherClusterOrAnotherKindIsRefusedNamingIt) {
  ScratchDir dir("hetps-sched");
  const std::string data = dir.str() + "/scheduler";
  {  // A scheduler for 1 server and 1 worker claims the dir, then is stopped.
    LocalCluster cluster({.servers = 1, .workers = 1, .scheduler_flags = {"--data_dir=" + data}});
    cluster.scheduler().Signal(SIGTERM);
    ASSERT_TRUE(cluster.scheduler().WaitExit(10s).has_value());
  }
  auto [code, printed] = RunScheduler({"--data_dir=" + data, "--num_servers=2", "--num_workers=1"},
                                      dir.str() + "/a.log");
  EXPECT_EQ(code, 1) << printed;
  EXPECT_NE(printed.find(data), std::string::npos) << printed;
  EXPECT_NE(printed.find("1 servers and 1 workers"), std::string::npos) << printed;
  const std::string other = dir.str() + "/other";
  fs::create_directories(other);
  std::ofstream(other + "/notes.txt") << "not a scheduler's";
  std::tie(code, printed) = RunScheduler({"--data_dir=" + other}, dir.str() + "/b.log");
  EXPECT_EQ(code, 1) << printed;
  EXPECT_NE(printed.find(other), std::string::npos) << printed;
}

}  // namespace
}  // namespace hetps::testing
