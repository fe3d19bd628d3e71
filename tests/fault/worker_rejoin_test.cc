// A worker SIGKILLed in the middle of a run and started again under its rank rejoins the running
// cluster, under every consistency controller: it starts at the slowest live worker's clock,
// the others wait for it where their controller says so, and every worker finishes the job.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "server/consistency/controller.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

class WorkerRejoinTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WorkerRejoinTest, AKilledWorkerRestartedUnderItsRankRejoinsAndTheJobFinishes) {
  LocalCluster cluster({.servers = 1,
                        .workers = 3,
                        .scheduler_flags = {"--heartbeat_timeout_ms=800"},
                        .server_flags = {"--consistency=" + GetParam()}});
  auto flags = [](int rank) {
    return std::vector<std::string>{"--iterations=120",    "--tensor_elements=2000,30000",
                                    "--compute_ms=15",     "--heartbeat_interval_ms=200",
                                    "--progress_every=20", "--rank=" + std::to_string(rank)};
  };
  auto read = [](const std::string& path) {
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
  };
  std::vector<std::unique_ptr<Process>> workers;
  const std::string victim = cluster.Path("victim.log");
  for (int r = 0; r < 3; ++r)
    workers.push_back(cluster.StartWorker(flags(r), r == 1 ? victim : ""));
  // Killed once the cluster runs (at clock 20 or a little later).
  for (int i = 0; i < 600 && read(victim).find("iter 20/") == std::string::npos; ++i) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_NE(read(victim).find("iter 20/"), std::string::npos) << read(victim);
  workers[1]->Signal(SIGKILL);
  ASSERT_TRUE(workers[1]->WaitExit(5s).has_value());
  // It asks for rank 1 until the scheduler declared the killed one dead, then joins.
  const std::string printed = cluster.Path("rejoined.log");
  auto again = cluster.StartWorker(flags(1), printed);
  for (Process* w : {workers[0].get(), workers[2].get(), again.get()}) {
    auto st = w->WaitExit(60s);
    ASSERT_TRUE(st.has_value()) << "a worker did not finish";
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << "status " << *st;
  }
  std::smatch m;
  const std::string s = read(printed);
  ASSERT_TRUE(std::regex_search(s, m, std::regex("rank 1 starts at clock (\\d+)"))) << s;
  EXPECT_GT(std::stoi(m[1]), 0) << "it started over instead of where the cluster was";
  EXPECT_NE(s.find("done"), std::string::npos) << s;
  auto st = cluster.scheduler().WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "the scheduler did not end the run";
  EXPECT_EQ(WEXITSTATUS(*st), 0);
}

INSTANTIATE_TEST_SUITE_P(EveryController, WorkerRejoinTest,
                         ::testing::ValuesIn(ClockDrivenControllers()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hetps::testing
