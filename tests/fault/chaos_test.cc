// Chaos with exact sums. Workers push ones (SGD, lr 1, from zeros: every element of a tensor
// ends at minus the number of pushes applied to it) and clock, under asp and under bsp, while
// processes die:
//  - a seeded schedule SIGKILLs a random server three times, each restarted on its data dir;
//  - the same with the scheduler (on its data dir) killed twice;
//  - a worker process is SIGKILLed after a seeded number of acknowledged pushes and started
//    again under its rank.
// At the end every tensor holds exactly the sum of all acknowledged pushes, each counted once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include "tests/fault/exact_sums.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

const std::vector<TensorSpec>& kTensors = kOnesTensors;
constexpr int kSteps = 40;  // clocks per worker

uint32_t Seed() {
  const char* env = std::getenv("HETPS_CHAOS_SEED");
  const uint32_t seed =
      env != nullptr ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : 20261123;
  std::printf("chaos seed %u (set HETPS_CHAOS_SEED to replay another)\n", seed);
  return seed;
}

ClusterOptions Options(const std::string& consistency, const ScratchDir& root, int workers) {
  return {.servers = 2,
          .workers = workers,
          .scheduler_flags = {"--heartbeat_timeout_ms=800", "--data_dir=" + root.str() + "/{i}"},
          .server_flags = {"--data_dir=" + root.str() + "/server{i}", "--init=zeros",
                           "--optimizer=sgd:lr=1", "--checkpoint_interval_ms=200",
                           "--consistency=" + consistency}};
}

class ChaosTest : public ::testing::TestWithParam<std::string> {};

// Three workers push and clock while `kills` processes die, chosen by `victim`: -1 the
// scheduler, else the server of that index. Each is restarted at once; at the end every tensor
// holds exactly the 3 * kSteps pushes per tensor, each once.
void RunWithKills(const std::string& consistency, int kills,
                  const std::function<int(std::mt19937&)>& victim) {
  std::mt19937 rng(Seed());
  ScratchDir root("hetps-chaos");
  LocalCluster cluster(Options(consistency, root, 3));
  std::vector<std::unique_ptr<Client>> clients(3);
  LocalCluster::RunEach(3, [&](int i) {
    ClientOptions o = cluster.ClientOpts();
    o.server_recovery_timeout_ms = 30000;
    auto c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    clients[i] = std::move(*c);
    ASSERT_TRUE(clients[i]->DeclareTensors(kTensors).ok());
  });
  std::atomic<int> acked{0};
  std::atomic<bool> failed{false};
  std::thread workers([&] {
    LocalCluster::RunEach(3, [&](int i) { PushOnes(*clients[i], i, kSteps, acked, failed); });
  });
  // Each kill once the cluster made progress after the previous restart.
  constexpr int kTotal = 3 * kSteps * 2;
  int next = 0;
  for (int kill = 0; kill < kills && !failed; ++kill) {
    next += std::uniform_int_distribution<int>(kTotal / 8, kTotal / 5)(rng);
    while (acked.load() < next && !failed) std::this_thread::sleep_for(2ms);
    const int v = victim(rng);
    std::printf("kill %d: %s after %d acknowledged pushes\n", kill + 1,
                v < 0 ? "the scheduler" : ("server " + std::to_string(v)).c_str(), acked.load());
    Process& p = v < 0 ? cluster.scheduler() : cluster.server(v);
    p.Signal(SIGKILL);
    ASSERT_TRUE(p.WaitExit(5s).has_value());
    if (v < 0) {
      cluster.RestartScheduler();
    } else {
      cluster.RestartServer(v);
    }
  }
  workers.join();
  ASSERT_FALSE(failed.load());
  ASSERT_EQ(acked.load(), kTotal);
  // The control plane works after the kills: a barrier of every worker, then the sums.
  LocalCluster::RunEach(3, [&](int i) { EXPECT_TRUE(clients[i]->Barrier().ok()); });
  ExpectOnesSums(*clients[0], 3 * kSteps);
  LocalCluster::RunEach(3, [&](int i) { EXPECT_TRUE(clients[i]->Finish().ok()); });
  auto st = cluster.scheduler().WaitExit(10s);
  ASSERT_TRUE(st.has_value()) << "the scheduler did not end the run";
  EXPECT_EQ(WEXITSTATUS(*st), 0);
}

TEST_P(ChaosTest, ServersKilledAtRandomLoseAndDoubleNothing) {
  RunWithKills(GetParam(), 3,
               [](std::mt19937& rng) { return std::uniform_int_distribution<int>(0, 1)(rng); });
}

TEST_P(ChaosTest, TheSchedulerKilledTwiceLosesAndDoublesNothing) {
  RunWithKills(GetParam(), 2, [](std::mt19937&) { return -1; });
}

// A worker process: pushes ones to each tensor and clocks until clock kSteps (computing 60 ms
// per step, so the others are still running when the killed one comes back), telling `acks`
// of each acknowledged push (the tensor's first letter); with `die_after` > 0 it SIGKILLs itself
// right after that many acknowledgements (nothing in flight, so the count is exact). Rank 0 waits
// for the others at the end and writes the sums it pulls. Never returns.
[[noreturn]] void WorkerProcess(const ClientOptions& o, int acks, int die_after, int sums) {
  auto c = Client::Connect(o);
  if (!c.ok() || !(*c)->DeclareTensors(kTensors).ok()) _exit(3);
  std::vector<float> ones(300000, 1.0f);
  int pushed = 0;
  while ((*c)->clock() < kSteps) {
    for (const TensorSpec& t : kTensors) {
      if (!(*c)->Push(t.name, ones.data(), t.NumElements()).Wait().ok()) _exit(4);
      if (write(acks, t.name.data(), 1) != 1) _exit(5);
      if (++pushed == die_after) raise(SIGKILL);
    }
    std::this_thread::sleep_for(60ms);
    if (!(*c)->Clock().ok()) _exit(6);
  }
  if (!(*c)->Barrier().ok()) _exit(7);
  if (sums >= 0) {
    for (const TensorSpec& t : kTensors) {
      std::vector<float> w(t.NumElements());
      if (!(*c)->Pull(t.name, w.data(), t.NumElements()).Wait().ok()) _exit(8);
      for (float v : w) {
        if (v != w[0]) _exit(9);
      }
      if (write(sums, &w[0], sizeof(float)) != sizeof(float)) _exit(5);
    }
  }
  _exit((*c)->Finish().ok() ? 0 : 10);
}

// Forks a worker process (this test process runs no client threads of its own, so the child
// starts from a single-threaded copy).
pid_t Fork(ClientOptions o, int rank, int acks, int die_after, int sums) {
  o.rank = rank;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) WorkerProcess(o, acks, die_after, sums);
  return pid;
}

TEST_P(ChaosTest, AWorkerKilledAndRestartedUnderItsRankLosesAndDoublesNothing) {
  std::mt19937 rng(Seed());
  ScratchDir root("hetps-chaos");
  LocalCluster cluster(Options(GetParam(), root, 3));
  int acks[2], sums[2];
  ASSERT_EQ(pipe(acks), 0);
  ASSERT_EQ(pipe(sums), 0);
  const ClientOptions o = cluster.ClientOpts();
  const int die_after = std::uniform_int_distribution<int>(5, kSteps / 2)(rng);
  std::printf("worker 2 dies after %d acknowledged pushes\n", die_after);
  std::vector<pid_t> pids = {Fork(o, 0, acks[1], 0, sums[1]), Fork(o, 1, acks[1], 0, -1),
                             Fork(o, 2, acks[1], die_after, -1)};
  int status = 0;
  ASSERT_EQ(waitpid(pids[2], &status, 0), pids[2]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  pids[2] = Fork(o, 2, acks[1], 0, -1);  // asks for rank 2 until the dead one is declared dead
  for (pid_t pid : pids) {
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  close(acks[1]);
  close(sums[1]);
  int64_t small = 0, big = 0;
  char buf[4096];
  for (ssize_t n; (n = read(acks[0], buf, sizeof(buf))) > 0;) {
    for (ssize_t i = 0; i < n; ++i) (buf[i] == 's' ? small : big)++;
  }
  float got[2] = {0, 0};
  ASSERT_EQ(read(sums[0], got, sizeof(got)), static_cast<ssize_t>(sizeof(got)));
  close(acks[0]);
  close(sums[0]);
  // The restarted worker continued from the clock the cluster was at, so the total is not
  // simply 3 * kSteps per tensor: it is what was acknowledged.
  EXPECT_GT(small, 2 * kSteps + die_after / 2) << "the restarted worker did not push";
  EXPECT_EQ(got[0], -static_cast<float>(small)) << "small";
  EXPECT_EQ(got[1], -static_cast<float>(big)) << "big";
}

INSTANTIATE_TEST_SUITE_P(Consistency, ChaosTest, ::testing::Values("asp", "bsp"));

}  // namespace
}  // namespace hetps::testing
